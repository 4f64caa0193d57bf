"""Convergence pictures: RMSE against optimization time, one line per trace (thesis Fig. 3.5 style)."""

from __future__ import annotations

from hamsi.atomic import atomic_output


def plot_convergence(traces: dict, path, title: str = "") -> None:
    """Write a PNG of train (solid) and test (dashed) RMSE against time for each labelled Trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axis = plt.subplots(figsize=(6, 4))
    for label, trace in traces.items():
        seconds = trace.column("time_s")
        line, = axis.plot(seconds, trace.column("train_rmse"), label=f"{label} train")
        test = trace.column("test_rmse")
        if np.isfinite(test).any():
            axis.plot(seconds, test, linestyle="--", color=line.get_color(), label=f"{label} test")
    axis.set_xlabel("optimization time (s)")
    axis.set_ylabel("RMSE")
    axis.set_yscale("log")
    axis.set_title(title)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    figure.tight_layout()
    with atomic_output(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120)
    plt.close(figure)
