"""`hamsi dp-learn`: private logistic regression on a CSV with the gradient methods of thesis ch. 4."""

from __future__ import annotations

import argparse
import math

from hamsi.commands import seed_value
from hamsi.errors import InputError


def register(subparsers) -> None:
    """Add the `dp-learn` sub-command to the CLI (dp itself is imported only when it runs)."""
    p = subparsers.add_parser(
        "dp-learn",
        help="differentially private logistic regression (DP-GDwS, DP-MAG, DP-SGDwS, ...)",
        description=(
            "Fit L2-regularized logistic regression on DATA.csv (numeric columns, header row "
            "optional) with a private gradient method; the --target column must hold two distinct "
            "values. Per-record gradients are clipped to --clip; the run is epsilon-DP (Laplace "
            "methods) or (epsilon, delta)-DP (the -gauss variants and dp-sgd) for replace-one "
            "neighbours. Prints the training accuracy, f - f* (f* from a non-private solve to 1e-10) "
            "and the privacy spent."
        ),
    )
    p.add_argument("data", metavar="DATA.csv", help="numeric CSV, one record per row")
    p.add_argument("--target", required=True, help="label column: its header name or 1-based number")
    p.add_argument("--method", default="dp-gdws",
                   help="dp-gdws (default), dp-mag, dp-sgdws, dp-onlinegdws, dp-smag, their -gauss variants, "
                        "dp-gd, dp-hb, dp-nag, m-asg, m-asg*, dp-sgd")
    p.add_argument("--epsilon", type=float, required=True, help="privacy budget epsilon (> 0; 'inf' = no noise)")
    p.add_argument("--delta", type=float, default=0.0, help="privacy delta (> 0 for the Gaussian methods)")
    p.add_argument("--n-iter", type=int, default=1000, help="iterations T (default 1000)")
    p.add_argument("--beta", type=float, default=0.1, help="smoothing weight in (0, 1] (default 0.1)")
    p.add_argument("--batch-size", type=int, default=None, help="sample / bucket size of the stochastic methods")
    p.add_argument("--clip", type=float, default=2.0, help="per-record gradient norm bound C (default 2)")
    p.add_argument("--reg", type=float, default=0.01, help="L2 penalty lambda (default 0.01)")
    p.add_argument("--seed", type=seed_value, default=None,
                   help="seed the noise (reproducible, NOT secure); default: os.urandom")
    p.add_argument("--plot", default=None, metavar="gap.png", help="draw f - f* per iteration")
    p.set_defaults(run=run)


def _target_column(target: str, header, n_columns: int, path: str) -> int:
    """Return the 0-based index of --target (a header name or a 1-based number)."""
    if header and target in header:
        return header.index(target)
    if target.isdigit() and 1 <= int(target) <= n_columns:
        return int(target) - 1
    names = f"; columns: {', '.join(map(str, header))}" if header else " (the file has no header row)"
    raise InputError(f"{path}: --target {target!r} is neither a column name nor a number 1..{n_columns}{names}")


def _draw_gap(gap, title: str, handle) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(np.arange(len(gap)), np.maximum(gap, 1e-16))
    ax.set_xlabel("iteration t")
    ax.set_ylabel("f(x_t) - f*")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.savefig(handle, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Run the private method, print accuracy, f - f* and the privacy spent; return 0."""
    import os

    import numpy as np

    from dp.learning import make_problem, minimize_private
    from hamsi.atomic import atomic_output
    from hamsi.commands import check_writable, naming_output
    from hamsi.commands.glasso import read_numeric_csv
    from hamsi.limits import refuse_unless_fits

    if args.plot:
        check_writable("--plot", args.plot)
    values, header = read_numeric_csv(args.data)
    if args.n_iter is not None:  # per iteration: the objective history and every coordinate's noise (drawn in bulk)
        refuse_unless_fits(f"--n-iter {args.n_iter} on {values.shape[1]} columns",
                           8.0 * args.n_iter * (2 * values.shape[1] + 4))
    column = _target_column(args.target, header, values.shape[1], args.data)
    labels = values[:, column]
    X = np.delete(values, column, axis=1)
    classes = np.unique(labels)
    if len(classes) != 2:
        raise InputError(f"{args.data}: --target column must hold exactly 2 distinct values, got {len(classes)}")
    if X.shape[1] == 0:
        raise InputError(f"{args.data}: no feature columns besides the target")
    y = np.where(labels == classes[1], 1.0, -1.0)
    result = minimize_private(X, y, method=args.method, epsilon=args.epsilon, delta=args.delta,
                              n_iter=args.n_iter, beta=args.beta, batch_size=args.batch_size,
                              clip=args.clip, reg=args.reg, random_state=args.seed)
    _, f_star = make_problem("logistic", X, y, args.reg, args.clip, 2).solve()
    gap = result.history - f_star
    accuracy = float(np.mean(np.where(X @ result.x > 0, 1.0, -1.0) == y))
    if args.plot:
        with naming_output("--plot", args.plot), atomic_output(args.plot, "wb") as handle:
            _draw_gap(gap, f"{args.method} on {os.path.basename(args.data)}, epsilon={args.epsilon:g}", handle)
    spent = result.privacy_spent
    print(f"method: {args.method}  rows: {X.shape[0]}  features: {X.shape[1]}  iterations: {result.n_iter} "
          f"({result.message})")
    print(f"training accuracy: {accuracy:.4f}  (class {classes[1]:g} vs {classes[0]:g})")
    print(f"f - f*: {gap[-1]:.4g}  (f = {result.history[-1]:.6g}, f* = {f_star:.6g} non-private)")
    if math.isinf(spent.epsilon):
        print("privacy: none (epsilon = inf: the iterates are NOT private)")
    else:
        rho = f", rho={spent.rho:.4g} zCDP" if spent.rho is not None else ""
        print(f"privacy spent: epsilon={spent.epsilon:g} delta={spent.delta:g}{rho} ({spent.accounting})")
    if args.plot:
        print(f"wrote plot: {args.plot}")
    return 1 if result.status == "diverged" else 0
