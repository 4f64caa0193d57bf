"""What `hamsi factorize` writes and prints after a fit: the output files as a set and the closing line.

The trace (CSV), the model (.npz) and the plot are written together or not at all
(`cli_io.write_as_set`); the model file is private (0600).
"""

from __future__ import annotations

import math
import os

from hamsi import plots
from hamsi.cli_io import write_as_set
from hamsi.trace import TRACE_COLUMNS


def output_paths(args) -> list[tuple[str, str]]:
    """Return [(flag, path)] of the files this run writes."""
    return [
        (flag, path)
        for flag, path in (("--trace", args.trace), ("--out", args.out), ("--plot", args.plot))
        if path
    ]


def write_outputs(args, model) -> None:
    """Write the trace, the model and the plot as a set (all replaced, or none); errors name the flag."""

    def plot(path):
        title = f"{os.path.basename(os.path.normpath(args.data))}, rank {model.rank_}"
        heldout = "validation" if args.patience is not None else "test"
        if args.patience is not None:
            stop = model.best_cycle_
        else:  # the cycles the search chose on validation, or none
            stop = model.result_.n_cycles if model.search_results_ is not None else None
        plots.plot_convergence(
            {args.algorithm: model.trace_}, path, title=title, heldout=heldout, stop_epoch=stop
        )

    def trace(path):
        model.trace_.write_csv(path, header=trace_header(args))

    writers = {"--trace": trace, "--out": model.save, "--plot": plot}
    write_as_set(
        {flag: (path, writers[flag]) for flag, path in output_paths(args)}, private=("--out",)
    )


def trace_header(args) -> tuple:
    """Return the --trace CSV's columns: the held-out one is validation_rmse, or test_rmse when the test ratings fill it."""
    if args.patience is not None:  # the validation split of the training ratings, which steers
        return TRACE_COLUMNS
    return tuple("test_rmse" if name == "validation_rmse" else name for name in TRACE_COLUMNS)


def summary(args, model, test, *, test_rmse: float | None = None) -> str:
    """Return the closing line: why the run stopped, its size and time, the RMSEs and the values used.

    Validation figures come from the split of the training ratings; the test RMSE (of the clipped
    predictions the model serves, as score() computes it) is computed once, here, or given by
    `test_rmse` when the test ratings stayed on the workers (computed there: cluster.scoring).
    """
    result = model.result_
    last = model.trace_.rows[-1]
    text = (
        f"{args.algorithm}: {result.message}; {result.n_cycles} cycles, {result.nit} inner iterations, "
        f"{result.time:.3f} s, train RMSE {last.train_rmse:.4f}"
    )
    if math.isfinite(last.validation_rmse) and args.patience is not None:
        text += f", validation RMSE {last.validation_rmse:.4f}"
    if model.best_cycle_ is not None and args.patience is not None:
        best = next(row for row in model.trace_.rows if row.cycle == model.best_cycle_)
        text += f"; kept cycle {model.best_cycle_} (validation RMSE {best.validation_rmse:.4f})"
    if test is not None:
        test_rmse = model.rmse(test)
    if test_rmse is not None:
        text += f"; test RMSE {test_rmse:.4f}"
    damping = f", damping {model.reg_damping_:g}" if model.reg_damping_ else ""
    return text + (
        f"; rank {model.rank_}, reg {model.reg_:.4g} ({model.reg_weighting_}{damping}), eta {model.eta_:.4g}"
    )
