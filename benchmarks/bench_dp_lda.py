"""Claim: LDA with a private ridge precision matrix (DP-RP) approaches the non-private error as
epsilon grows (Su et al. sec. 5.2.1, on scikit-learn's breast-cancer data instead of Ionosphere).

Features are standardized with statistics of the training split and rows scaled by 1/sqrt(p),
then clipped to L2 norm 1. As in the paper only the pooled within-class second-moment matrix is
private; class means and the standardization are not (a fully private classifier would also
have to pay for those). lambda is picked on a separate validation split for each epsilon: the
noisy matrix is released once and every lambda is computed from it, which is post-processing
and costs no extra privacy (the validation rows are not part of the private training data).
Run: python benchmarks/bench_dp_lda.py [--reps 50]
"""

import argparse

import numpy as np
from sklearn.datasets import load_breast_cancer


def lda_error(precision, means, X, y):
    """Return the misclassification rate of the linear discriminant with the given precision."""
    scores = np.stack([X @ precision @ m - 0.5 * m @ precision @ m for m in means], axis=1)
    return float(np.mean(np.argmax(scores, axis=1) != y))


def main():
    ap = argparse.ArgumentParser(description="LDA with a private precision matrix")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--train", type=int, default=200)
    ap.add_argument("--eps", type=float, nargs="+", default=[0.5, 1, 2, 4, 8, 16])
    ap.add_argument("--delta", type=float, default=1e-3)
    args = ap.parse_args()

    import dp

    X_all, y_all = load_breast_cancer(return_X_y=True)
    p = X_all.shape[1]
    errors = {eps: [] for eps in [None, *args.eps]}
    for rep in range(args.reps):
        rng = np.random.default_rng(rep)
        idx = rng.permutation(len(y_all))
        tr, va, te = idx[: args.train], idx[args.train : args.train + 100], idx[args.train + 100 :]
        mu, sd = X_all[tr].mean(axis=0), X_all[tr].std(axis=0)
        Z = (X_all - mu) / sd / np.sqrt(p)
        means = [Z[tr][y_all[tr] == c].mean(axis=0) for c in (0, 1)]
        centred = Z[tr] - np.array(means)[y_all[tr]]
        grid = np.geomspace(1e-6, 1.0, 13)
        for eps in errors:
            noisy = dp.private_covariance(
                centred,
                eps,
                args.delta,
                mechanism="gaussian",
                clip=1.0,
                random_state=np.random.default_rng([rep, int(10 * (eps or 0))]),
            )
            precisions = [dp.ridge_precision(noisy.covariance, a) for a in grid]
            best = min(precisions, key=lambda P: lda_error(P, means, Z[va], y_all[va]))
            errors[eps].append(lda_error(best, means, Z[te], y_all[te]))
    print(
        f"LDA on breast cancer (n_train={args.train}, p={p}, {args.reps} splits, Gaussian noise, delta={args.delta})"
    )
    print(f"{'epsilon':>12}{'test error':>12}{'(s.e.)':>10}")
    for eps, errs in errors.items():
        label = "non-private" if eps is None else f"{eps:g}"
        print(
            f"{label:>12}{np.mean(errs):>12.3f}{np.std(errs, ddof=1) / np.sqrt(len(errs)):>10.3f}"
        )


if __name__ == "__main__":
    main()
