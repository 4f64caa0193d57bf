"""`hamsi glasso`: a (private) sparse or ridge precision matrix from a numeric CSV file."""

from __future__ import annotations

import argparse
import math
import warnings

import numpy as np

import dp  # its names load on first use (dp/__init__.py): listing the command stays cheap
from dp.commands import warning_for_cli
from dp.validation import DEFAULT_CLIP, PrivacyLeakWarning, constant_columns
from hamsi.cli_io import (
    check_writable,
    read_numeric_csv,
    reissue,
    report_warnings,
    seed_value,
    write_as_set,
    write_binary,
)
from hamsi.errors import DivergenceError, InputError


def register(subparsers) -> None:
    """Add the `glasso` sub-command to the CLI."""
    p = subparsers.add_parser(
        "glasso",
        help="estimate a (differentially private) precision matrix from a CSV",
        description=(
            "Estimate a precision matrix from DATA.csv (rows = records, numeric columns, header "
            "optional) with the graphical lasso (DP-AGL) or the ridge estimator (DP-RP) of Su, "
            "Guo and Zhang. With --epsilon, rows are clipped to L2 norm <= --clip and the "
            "covariance is released with Laplace or Gaussian noise; otherwise nothing is private. "
            "Preconditions of a private run (the data are not inspected for them: a message about "
            "the data would itself be a release): finite values, centred columns, none constant."
        ),
    )
    p.add_argument("data", metavar="DATA.csv", help="numeric CSV, one record per row")
    p.add_argument(
        "--alpha",
        required=True,
        help="penalty (number >= 0) in the units of the covariance S: with --epsilon the rows are "
        "clipped to L2 norm --clip c, so S's entries are at most c^2 (about c^2 / p on the "
        "diagonal for rows at the bound): choose alpha against that scale; or 'cv' for a 5-fold "
        "choice (only without --epsilon)",
    )
    p.add_argument("--epsilon", type=float, default=None, help="privacy budget epsilon (> 0)")
    p.add_argument(
        "--delta",
        type=float,
        default=0.0,
        help="privacy delta in (0, 1) for --mechanism gaussian (laplace is pure: no --delta)",
    )
    p.add_argument("--mechanism", choices=["laplace", "gaussian"], default="laplace")
    p.add_argument(
        "--neighbouring",
        choices=["replace-one", "add-remove"],
        default="replace-one",
        help="neighbour relation of the guarantee (default replace-one, the paper's: the row "
        "count is public). add-remove: the row count is private; the noisy sum X'X is "
        "divided by a noisy count that takes 10%% of epsilon, or by --public-n",
    )
    p.add_argument(
        "--public-n",
        type=int,
        default=None,
        metavar="N",
        help="with --neighbouring add-remove: a row count known publicly (not read from the "
        "data), to divide the noisy sum by instead of paying for a noisy count",
    )
    p.add_argument("--estimator", choices=["glasso", "ridge"], default="glasso")
    p.add_argument(
        "--clip",
        type=float,
        default=None,
        help="L2 bound on each row (default 1, with a warning: choose it from public knowledge)",
    )
    p.add_argument(
        "--seed",
        type=seed_value,
        default=None,
        help="seed the noise (reproducible, NOT secure); default: os.urandom",
    )
    p.add_argument(
        "--out", default=None, metavar="precision.npy", help="write the precision matrix"
    )
    p.add_argument("--graph", default=None, metavar="graph.png", help="draw the estimated graph")
    p.set_defaults(run=run)


def _parse_alpha(text: str):
    if text == "cv":
        return "cv"
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--alpha must be a number >= 0 or 'cv', got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise InputError(f"--alpha must be a finite number >= 0, got {text!r}")
    return value


def _check_privacy_flags(args: argparse.Namespace) -> None:
    """Refuse flags that would be silently unused."""
    if args.delta != 0.0 and args.mechanism == "laplace":
        raise InputError(
            f"--delta {args.delta:g} is not used by --mechanism laplace (pure epsilon-DP); "
            "drop --delta or use --mechanism gaussian"
        )
    if args.delta != 0.0 and args.epsilon is None:
        raise InputError("--delta is only used with --epsilon (a private estimate)")
    if args.public_n is not None and (args.epsilon is None or args.neighbouring != "add-remove"):
        raise InputError(
            "--public-n is only used with --epsilon and --neighbouring add-remove "
            "(under replace-one the row count is public already)"
        )
    if args.public_n is not None and args.public_n < 1:
        raise InputError(f"--public-n must be a positive integer, got {args.public_n}")


def _refuse_constant_columns(path: str, X, header) -> None:
    """Raise InputError naming the first constant column (dp.validation.constant_columns).

    Only for a non-private run: for a private one this message (and even the refusal) would
    depend on the data, so no constant column is a documented precondition instead."""
    cols = constant_columns(X)
    if cols.size:
        col = int(cols[0])
        name = f" ({header[col]!r})" if header else ""
        raise InputError(
            f"{path}: column {col + 1}{name} is constant ({cols.size} constant column(s) in total); "
            "the estimators assume zero-mean columns and a constant zero column makes the graphical "
            "lasso unbounded: drop it"
        )


def _draw_graph(precision, labels, handle) -> None:
    # why lazy: matplotlib loads only when --graph draws
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = precision.shape[0]
    angle = 2 * np.pi * np.arange(p) / p
    xy = np.column_stack([np.cos(angle), np.sin(angle)])
    fig, ax = plt.subplots(figsize=(6, 6))
    rows, cols = np.nonzero(np.triu(np.abs(precision) > 1e-10, 1))
    for i, j in zip(rows, cols):
        ax.plot(xy[[i, j], 0], xy[[i, j], 1], color="tab:blue", lw=0.8, alpha=0.7)
    ax.scatter(xy[:, 0], xy[:, 1], s=60, color="tab:orange", zorder=3)
    if p <= 40:
        for k in range(p):
            ax.annotate(str(labels[k]), xy[k] * 1.08, ha="center", va="center", fontsize=8)
    ax.set_title(f"{len(rows)} edges among {p} variables")
    ax.set_axis_off()
    fig.savefig(handle, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def _no_edge_hint(model, clip: float | None) -> str:
    """Return the hint printed when the graphical lasso keeps no edge: alpha against S's scale.

    The largest off-diagonal |S_ij| is read from the covariance the fit used: the released S~
    under --epsilon (post-processing of the release), the exact S otherwise (nothing private).
    """
    S = model.sample_covariance_
    largest = float(np.max(np.abs(S - np.diag(np.diag(S))))) if S.shape[0] > 1 else 0.0
    scale = (
        f"; rows were clipped to L2 norm {clip:g}, so S's entries are at most {clip * clip:g} "
        f"(about {clip * clip / S.shape[0]:.3g} on the diagonal for rows at the bound)"
        if clip is not None
        else ""
    )
    return (
        f"no edge: alpha {model.alpha_:g} is in the units of S, whose largest off-diagonal "
        f"entry is {largest:.3g}{scale}; a smaller alpha keeps edges"
    )


def run(args: argparse.Namespace) -> int:
    """Fit the chosen estimator, write the outputs, print what privacy was spent; return 0."""
    alpha = _parse_alpha(args.alpha)
    _check_privacy_flags(args)
    outputs = {flag: path for flag, path in (("--out", args.out), ("--graph", args.graph)) if path}
    for flag, path in outputs.items():
        check_writable(flag, path)
    private = args.epsilon is not None
    X, header = read_numeric_csv(args.data, private=private)
    if not private:
        _refuse_constant_columns(args.data, X, header)
    model = _fit(args, alpha, X)
    precision = model.precision_
    if not np.all(np.isfinite(precision)):  # post-processing of the (noisy) estimate: no release
        solver = f" ({model.solver_message_})" if args.estimator == "glasso" else ""
        raise DivergenceError(
            f"{args.data}: the {args.estimator} estimate holds NaN or inf{solver}; nothing "
            "written: rescale the columns or raise --alpha"
        )
    labels = header if header else list(range(precision.shape[0]))
    writers = {
        "--out": lambda temporary: write_binary(
            temporary, lambda handle: np.save(handle, precision)
        ),
        "--graph": lambda temporary: write_binary(
            temporary, lambda handle: _draw_graph(precision, labels, handle)
        ),
    }
    write_as_set({flag: (path, writers[flag]) for flag, path in outputs.items()})
    _print_report(args, model, X.shape)
    return 0


def _clip(args: argparse.Namespace):
    """Return --clip, or dp's default (which warns: PrivacyLeakWarning)."""
    return DEFAULT_CLIP if args.clip is None else args.clip


def _fit(args: argparse.Namespace, alpha, X):
    """Return the estimator --estimator fitted to X; its PrivacyLeakWarnings printed one line each."""
    private = args.epsilon is not None
    cls = dp.PrivateGraphicalLasso if args.estimator == "glasso" else dp.PrivateRidgePrecision
    # one accountant for the run: the fit's charges are recorded (a fit without one warns from the
    # second on, which only matters to a process that fits several times)
    budget = (
        dp.PrivacyAccountant(args.epsilon, args.delta, neighbouring=args.neighbouring)
        if private
        else None
    )
    model = cls(
        alpha=alpha,
        epsilon=args.epsilon,
        delta=args.delta,
        mechanism=args.mechanism,
        clip=_clip(args),
        random_state=args.seed,
        budget=budget,
        public_n=args.public_n,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PrivacyLeakWarning)
        with np.errstate(all="ignore"):  # a non-finite estimate is reported by run, in one line
            model.fit(X)
    reissue(report_warnings("glasso", caught, PrivacyLeakWarning, describe=warning_for_cli))
    return model


def _rows_line(args: argparse.Namespace, n: int) -> str:
    """Return what the report says of the row count: private under add-remove, so not n there."""
    if args.epsilon is None or args.neighbouring != "add-remove":
        return str(n)
    if args.public_n:
        return f"{args.public_n} (public, --public-n)"
    return "private (add-remove neighbours)"


def _print_privacy(args: argparse.Namespace, model) -> None:
    """Print the privacy spent (or that there is none) and what the run does not report."""
    if args.epsilon is None:
        print("privacy: none (epsilon not given; the estimate is NOT private)")
        return
    eps, delta = model.privacy_spent_
    print(
        f"privacy spent: epsilon={eps:g} delta={delta:g} ({args.mechanism} mechanism, "
        f"{args.neighbouring} neighbours, noise scale {model.noise_scale_:.3g})"
    )
    if args.neighbouring == "add-remove" and not args.public_n:
        print(
            "covariance: noisy sum X'X over a noisy row count (10% of epsilon, Laplace), "
            "both in the spend above"
        )
    print(
        f"rows clipped to L2 norm {float(_clip(args)):g}: not reported (the count is data; "
        "reporting it would be a release that is not private)"
    )


def _print_report(args: argparse.Namespace, model, shape) -> None:
    """Print the estimate's size, the privacy spent, the solver's outcome and the files written."""
    n, p = shape
    precision = model.precision_
    edges = int(np.count_nonzero(np.triu(np.abs(precision) > 1e-10, 1)))
    print(
        f"estimator: {args.estimator}  alpha: {model.alpha_:g}  rows: {_rows_line(args, n)}  "
        f"columns: {p}"
    )
    _print_privacy(args, model)
    if args.estimator == "glasso":
        print(f"iterations: {model.n_iter_} ({model.solver_message_})  edges: {edges}")
        if edges == 0:
            private = args.epsilon is not None
            print(_no_edge_hint(model, float(_clip(args)) if private else None))
    for label, path in (("precision", args.out), ("graph", args.graph)):
        if path:
            print(f"wrote {label}: {path}")
