"""Claim: DP-AGL recovers the support nearly as well as the non-private graphical lasso (Su et al.
Fig. 1): Models 3 and 4, p = 20, n = 2000, delta = 1e-3, epsilon in {1, 2}, ROC over a lambda path.

Writes a PNG with one panel per model (mean TPR vs mean FPR over replications) and prints the
area under each curve. Run: python benchmarks/bench_dp_roc.py [--reps 50] [--out roc.png]
"""

import argparse

import numpy as np


def roc_points(precisions, truth):
    """Return (FPR, TPR) arrays of the off-diagonal support of each precision vs the true one."""
    iu = np.triu_indices(truth.shape[0], 1)
    true_edge = truth[iu] != 0
    fpr, tpr = [], []
    for P in precisions:
        est = np.abs(P[iu]) > 1e-10
        tpr.append((est & true_edge).sum() / max(true_edge.sum(), 1))
        fpr.append((est & ~true_edge).sum() / max((~true_edge).sum(), 1))
    return np.array(fpr), np.array(tpr)


def main():
    ap = argparse.ArgumentParser(description="ROC curves of DP-AGL (Su et al. Fig. 1)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--p", type=int, default=20)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--n-alphas", type=int, default=25)
    ap.add_argument("--mechanism", choices=["gaussian", "laplace"], default="gaussian")
    ap.add_argument("--out", default="roc.png")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import dp
    from dp.simulation import model_precision, normalize_rows_by_max_norm, sample_gaussian

    settings = [None, 1.0, 2.0]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, model in zip(axes, (3, 4)):
        truth = model_precision(model, args.p, random_state=100 + model)
        curves = {eps: [] for eps in settings}
        for rep in range(args.reps):
            X = normalize_rows_by_max_norm(
                sample_gaussian(truth, args.n, random_state=[model, rep])
            )
            S = X.T @ X / args.n
            for eps in settings:
                if eps is None:
                    noisy = S
                else:
                    noisy = dp.project_psd(
                        dp.private_covariance(
                            X,
                            eps,
                            1e-3,
                            mechanism=args.mechanism,
                            clip=1.0,
                            random_state=np.random.default_rng([model, rep, int(eps * 10)]),
                        ).covariance
                    )
                off = np.abs(noisy - np.diag(np.diag(noisy))).max()
                alphas = np.geomspace(off, off * 1e-3, args.n_alphas)
                path = dp.graphical_lasso_path(noisy, alphas, tol=1e-4, max_iter=300)
                curves[eps].append(roc_points([r.precision for r in path], truth))
        for eps in settings:
            fpr = np.mean([c[0] for c in curves[eps]], axis=0)
            tpr = np.mean([c[1] for c in curves[eps]], axis=0)
            order = np.argsort(fpr)
            f, t = np.r_[0, fpr[order], 1], np.r_[0, tpr[order], 1]
            auc = np.trapezoid(t, f)
            label = "non-private" if eps is None else f"epsilon = {eps:g}"
            ax.plot(f, t, marker=".", label=f"{label} (AUC {auc:.3f})")
            print(f"Model {model}, {label:<12} AUC {auc:.3f}")
        ax.plot([0, 1], [0, 1], color="grey", lw=0.5, ls="--")
        ax.set(
            title=f"Model {model}: p={args.p}, n={args.n}, {args.reps} reps, {args.mechanism}",
            xlabel="false positive rate",
            ylabel="true positive rate",
        )
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
