"""Convergence pictures: RMSE against optimization time, one line per trace (thesis Fig. 3.5 style)."""

from __future__ import annotations

import numpy as np

from hamsi.atomic import atomic_output


def plot_convergence(
    traces: dict, path, title: str = "", heldout: str = "test", stop_epoch=None
) -> None:
    """Write a PNG of train (solid) and held-out (dashed) RMSE against time for each labelled Trace.

    Each trace's first row is its start, the bias baseline (factors near 0, biases at their
    penalized fit): a dotted line marks its held-out RMSE, so a run that ends above it is seen to
    be worse than biases alone. stop_epoch (the kept cycle of early stopping, or the cycles the
    search chose) is marked on every trace. The y-axis is linear with plain decimal ticks.
    """
    # why lazy: matplotlib loads only when a picture is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, MaxNLocator

    figure, axis = plt.subplots(figsize=(6, 4))
    for label, trace in traces.items():
        seconds = trace.column("time_s")
        (line,) = axis.plot(seconds, trace.column("train_rmse"), label=f"{label} train")
        test = trace.column("validation_rmse")
        if not np.isfinite(test).any():
            continue
        color = line.get_color()
        axis.plot(seconds, test, linestyle="--", color=color, label=f"{label} {heldout}")
        if np.isfinite(test[0]):
            axis.axhline(
                test[0], linestyle=":", color=color, label=f"{label} bias baseline {test[0]:.4f}"
            )
        epochs = trace.column("cycle")
        if stop_epoch is not None and np.any(epochs == stop_epoch):
            at = int(np.flatnonzero(epochs == stop_epoch)[0])
            axis.plot(
                seconds[at],
                test[at],
                marker="o",
                color=color,
                linestyle="none",
                label=f"{label} chosen stop, cycle {stop_epoch} ({test[at]:.4f})",
            )
    axis.set_xlabel("optimization time (s)")
    axis.set_ylabel("RMSE")
    axis.yaxis.set_major_locator(MaxNLocator(nbins=8))
    axis.yaxis.set_major_formatter(FormatStrFormatter("%.3f"))
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small")
    figure.tight_layout()
    with atomic_output(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120)
    plt.close(figure)
