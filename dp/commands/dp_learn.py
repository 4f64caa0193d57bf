"""`hamsi dp-learn`: private logistic regression on a CSV with the gradient methods of thesis ch. 4."""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

import numpy as np

from dp.commands import warning_for_cli
from dp.validation import PrivacyLeakWarning
from hamsi.atomic import atomic_output
from hamsi.cli_io import check_writable, naming_output, read_numeric_csv, seed_value
from hamsi.errors import InputError
from hamsi.limits import refuse_unless_fits


def register(subparsers) -> None:
    """Add the `dp-learn` sub-command to the CLI (dp's library is imported only when it runs)."""
    p = subparsers.add_parser(
        "dp-learn",
        help="differentially private logistic regression (DP-GDwS, DP-MAG, DP-SGDwS, ...)",
        description=(
            "Fit L2-regularized logistic regression with an intercept on DATA.csv (numeric "
            "columns, header row optional) with a private gradient method, as "
            "dp.PrivateLogisticRegression does, and print the private coefficients, the intercept "
            "and the privacy spent. Rows are projected onto the ball of radius --data-norm, "
            "rescaled by 0.7 of a private mean row norm (10%% of epsilon) and per-record gradients clipped "
            "to --clip; the fit is epsilon-DP (Laplace methods) or (epsilon, delta)-DP (the -gauss "
            "variants and dp-sgd) for replace-one neighbours, --classes public. "
            "--nonprivate-diagnostics adds training accuracy and f - f* computed on the data "
            "without noise (NOT private: for study, not for publication)."
        ),
    )
    _add_data_arguments(p)
    _add_method_arguments(p)
    _add_model_arguments(p)
    _add_output_arguments(p)
    p.set_defaults(run=run)


def _add_data_arguments(p) -> None:
    """The data file, its label column and the public label set."""
    p.add_argument("data", metavar="DATA.csv", help="numeric CSV, one record per row")
    p.add_argument(
        "--target", required=True, help="label column: its header name or 1-based number"
    )
    p.add_argument(
        "--classes",
        default=None,
        metavar="NEG,POS",
        help="the two label values, public (without it they are read from the data, with a warning)",
    )


def _add_method_arguments(p) -> None:
    """The method, the privacy parameters and the iteration plan."""
    p.add_argument(
        "--method",
        default=None,
        help="default: chosen from n, d, epsilon, delta (dp-mag, or dp-mag-gauss with --delta); "
        "dp-gdws, dp-mag, dp-sgdws, dp-onlinegdws, dp-smag, their -gauss variants, "
        "dp-gd, dp-hb, dp-nag, m-asg, m-asg*, dp-sgd",
    )
    p.add_argument(
        "--epsilon",
        type=float,
        required=True,
        help="privacy budget epsilon (> 0; 'inf' = no noise)",
    )
    p.add_argument(
        "--delta", type=float, default=0.0, help="privacy delta (> 0 for the Gaussian methods)"
    )
    p.add_argument(
        "--n-iter", type=int, default=None, help="iterations T (default: chosen from n, d, epsilon)"
    )
    p.add_argument(
        "--beta", type=float, default=0.1, help="smoothing weight in (0, 1] (default 0.1)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="sample / bucket size of the stochastic methods (default ceil(sqrt(n)))",
    )


def _add_model_arguments(p) -> None:
    """The public bounds (R, C), the intercept and the penalty."""
    p.add_argument(
        "--data-norm",
        type=float,
        default=None,
        help="public bound R on a row's L2 norm; rows are scaled to it (default 1, with a warning)",
    )
    p.add_argument(
        "--clip",
        type=float,
        default=None,
        help="per-record gradient norm bound C (default: max(1, 0.3 sqrt(d)) x 1.118 in L1 for the "
        "Laplace methods, 1.118 in L2 for the Gaussian ones, on the rescaled rows)",
    )
    p.add_argument(
        "--no-intercept",
        action="store_true",
        help="fit without an intercept (the thesis' model)",
    )
    p.add_argument(
        "--reg",
        type=float,
        default=None,
        help="L2 penalty lambda (default sqrt(d) / (n epsilon) within [3e-3, 1e-2])",
    )


def _add_output_arguments(p) -> None:
    """The noise seed and the non-private diagnostics."""
    p.add_argument(
        "--seed",
        type=seed_value,
        default=None,
        help="seed the noise (reproducible, NOT secure); default: os.urandom",
    )
    p.add_argument(
        "--nonprivate-diagnostics",
        action="store_true",
        help="also print training accuracy and f - f* on the private data (NOT private)",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="gap.png",
        help="draw f - f* per iteration (NOT private; needs --nonprivate-diagnostics)",
    )


def _labels(labels, classes_arg: str | None, path: str, private: bool = True):
    """Return (y in {-1, +1}, (negative, positive)): from --classes (public) or, with a warning, the data.

    A private run's messages never count the distinct labels (a record with a new label changes
    the count)."""
    if classes_arg is None:
        warnings.warn(
            "--classes not given: the two label values are read from the data, which is not "
            "private; pass --classes NEG,POS",
            PrivacyLeakWarning,
            stacklevel=2,
        )
        classes = np.unique(labels)
        if len(classes) != 2:
            got = "" if private else f", got {len(classes)}"
            raise InputError(
                f"{path}: --target column must hold exactly 2 distinct values{got}; "
                "pass --classes NEG,POS"
            )
    else:
        try:
            classes = np.array([float(v) for v in classes_arg.split(",")])
        except ValueError:
            raise InputError(f"--classes {classes_arg!r}: give two numbers, NEG,POS") from None
        if len(classes) != 2 or classes[0] == classes[1]:
            raise InputError(f"--classes {classes_arg!r}: give two distinct numbers, NEG,POS")
        if not np.all(np.isin(labels, classes)):
            # names the public classes only: which row holds another value would be a release
            raise InputError(
                f"{path}: the --target column holds a value outside --classes {classes_arg}"
            )
    return np.where(labels == classes[1], 1.0, -1.0), (classes[0], classes[1])


def _target_column(target: str, header, n_columns: int, path: str) -> int:
    """Return the 0-based index of --target (a header name or a 1-based number)."""
    if header and target in header:
        return header.index(target)
    if target.isdigit() and 1 <= int(target) <= n_columns:
        return int(target) - 1
    names = (
        f"; columns: {', '.join(map(str, header))}" if header else " (the file has no header row)"
    )
    raise InputError(
        f"{path}: --target {target!r} is neither a column name nor a number 1..{n_columns}{names}"
    )


def _draw_gap(gap, title: str, handle) -> None:
    # why lazy: matplotlib loads only when --plot draws
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(np.arange(len(gap)), np.maximum(gap, 1e-16))
    ax.set_xlabel("iteration t")
    ax.set_ylabel("f(x_t) - f*")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.savefig(handle, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def _print_nonprivate_diagnostics(args, y, fitted) -> None:
    """Print training accuracy and f - f* on the private data (and draw the plot): NOT private."""
    # why lazy: dp.learning loads SciPy and scikit-learn, only with --nonprivate-diagnostics
    from dp.learning import make_problem

    result = fitted.results[0]
    problem = make_problem(
        "logistic", fitted.design, y, result.reg, fitted.data_norm, 2, data_norm=fitted.data_norm
    )
    _, f_star = problem.solve()
    gap = result.nonprivate_history - f_star
    accuracy = float(np.mean(np.where(problem.X @ result.x > 0, 1.0, -1.0) == y))
    if args.plot:
        with naming_output("--plot", args.plot), atomic_output(args.plot, "wb") as handle:
            _draw_gap(
                gap,
                f"{result.method} on {os.path.basename(args.data)}, epsilon={args.epsilon:g} "
                "(NOT private)",
                handle,
            )
    print("NON-PRIVATE diagnostics (computed on the training data without noise; do not publish):")
    print(f"  training accuracy: {accuracy:.4f}")
    print(f"  f - f*: {gap[-1]:.4g}  (f = {result.nonprivate_history[-1]:.6g}, f* = {f_star:.6g})")
    if args.plot:
        print(f"  wrote plot: {args.plot}")


def _warn_in_one_line(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning ({category.__name__}): {warning_for_cli(message)}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run the private method, print the coefficients and the privacy spent (and diagnostics if asked)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", PrivacyLeakWarning)  # every run says it, not only the first
        warnings.showwarning = _warn_in_one_line
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    # why lazy: dp.learning loads SciPy, scikit-learn and dp_accounting, only when the command runs
    from dp.learning.accounting import check_run_epsilon
    from dp.learning.defaults import (
        GRAM_FRACTION,
        ROW_SCALE_OF_MEAN,
        SCALE_FRACTION,
        public_bounds,
    )
    from dp.learning.estimator import fit_logistic

    if args.plot and not args.nonprivate_diagnostics:
        raise InputError(
            "--plot draws f on the private data without noise: add --nonprivate-diagnostics"
        )
    if args.plot:
        check_writable("--plot", args.plot)
    epsilon = check_run_epsilon(args.epsilon, None)
    private = not math.isinf(epsilon)  # messages of a private run quote no data
    values, header = read_numeric_csv(args.data, private=private)
    if (
        args.n_iter is not None
    ):  # per iteration: the objective history and every coordinate's noise (drawn in bulk)
        refuse_unless_fits(
            f"--n-iter {args.n_iter} on {values.shape[1]} columns",
            8.0 * args.n_iter * (2 * values.shape[1] + 4),
        )
    column = _target_column(args.target, header, values.shape[1], args.data)
    X = np.delete(values, column, axis=1)
    if X.shape[1] == 0:
        raise InputError(f"{args.data}: no feature columns besides the target")
    y, (negative, positive) = _labels(values[:, column], args.classes, args.data, private)
    clip, data_norm = public_bounds(args.clip, args.data_norm)
    fitted = fit_logistic(
        X,
        [y],
        epsilon=epsilon,
        delta=args.delta,
        data_norm=data_norm,
        fit_intercept=not args.no_intercept,
        random_state=args.seed,
        history_every=1 if args.nonprivate_diagnostics else None,
        method=args.method,
        n_iter=args.n_iter,
        beta=args.beta,
        batch_size=args.batch_size,
        clip=clip,
        reg=args.reg,
    )
    result = fitted.results[0]
    print(
        f"method: {result.method}  rows: {X.shape[0]}  features: {X.shape[1]}  iterations: {result.n_iter} "
        f"({result.message})  lambda: {result.reg:.4g}"
    )
    print(
        f"coefficients (class {positive:g} vs {negative:g}): "
        + " ".join(f"{v:.6g}" for v in fitted.coef[0])
    )
    print(f"intercept: {fitted.intercept[0]:.6g}")
    eps_spent, delta_spent = fitted.privacy_spent
    if not private:
        print("privacy: none (epsilon = inf: the coefficients are NOT private)")
    else:
        spent = result.privacy_spent
        rho = f", rho={spent.rho:.4g} zCDP" if spent.rho is not None else ""
        print(
            f"privacy spent: epsilon={eps_spent:g} delta={delta_spent:g}{rho} for the gradients "
            f"({spent.accounting}); row scale {fitted.row_scale:.4g}: {ROW_SCALE_OF_MEAN:g} of a noisy mean row norm "
            f"(Laplace) from {SCALE_FRACTION:.0%} of epsilon"
            + (
                ""
                if fitted.gram_bound is None
                else f"; gram bound {fitted.gram_bound:.4g}: a noisy largest curvature of the "
                f"rows (Laplace) from {GRAM_FRACTION:.0%} of epsilon, for the steps"
            )
        )
    if args.nonprivate_diagnostics:
        _print_nonprivate_diagnostics(args, y, fitted)
    return 1 if result.status == "diverged" else 0
