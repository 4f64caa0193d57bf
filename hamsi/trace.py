"""Run records: the per-cycle trace, the per-phase time split, and the scipy-like result object."""

from __future__ import annotations

import csv
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy.optimize import OptimizeResult

from hamsi.atomic import atomic_output

# the trace's former column names (FutureWarning): a cycle was called an epoch, and the
# validation RMSE a test RMSE
RENAMED_COLUMNS = {"epoch": "cycle", "test_rmse": "validation_rmse"}


def _renamed_column(old: str) -> str:
    """Return the column `old` is now called, with a FutureWarning."""
    new = RENAMED_COLUMNS[old]
    warnings.warn(
        f"the trace column {old!r} is deprecated; use {new!r} (same values)",
        FutureWarning,
        stacklevel=3,
    )
    return new


class TraceRow(NamedTuple):
    """One row of the trace: after cycle `cycle` (0: the start), `inner` inner iterations in all.

    time_s: cumulative optimization time (evaluation excluded); train_rmse / validation_rmse: on
    the training ratings and on the validation ratings (fit's `validation=`; NaN without them);
    objective: f(x) (thesis eq. 3.1). `epoch` and `test_rmse` are deprecated names.
    """

    cycle: int
    inner: int
    time_s: float
    train_rmse: float
    validation_rmse: float
    objective: float

    @property
    def epoch(self) -> int:
        """Deprecated name of `cycle`."""
        return getattr(self, _renamed_column("epoch"))

    @property
    def test_rmse(self) -> float:
        """Deprecated name of `validation_rmse`."""
        return getattr(self, _renamed_column("test_rmse"))

    def record(self) -> TraceRecord:
        """Return the row as a dict (what a fit's callback receives)."""
        return TraceRecord(self._asdict())


class TraceRecord(dict):
    """A trace row as a dict; its deprecated keys (`epoch`, `test_rmse`) still read, with a FutureWarning."""

    def __missing__(self, key):
        if key in RENAMED_COLUMNS:
            return self[_renamed_column(key)]
        raise KeyError(key)


TRACE_COLUMNS = TraceRow._fields

#: status codes of a run, as in scipy.optimize (0 = stopped normally)
STATUS = {
    "epoch_limit": 0,
    "time_limit": 0,
    "tolerance": 0,
    "target": 0,
    "early_stop": 0,
    "diverged": 2,
}


@dataclass
class PhaseTimes:
    """Seconds per phase (thesis Fig. 3.7): gradient, update (step), Hessian approximation; the
    safeguard's own work; on Dask also exchange (sending) and wait (blocked on peers), and stalled:
    the part of them during which a worker was stopped (SIGSTOP; cluster.mailbox.StallClock),
    which is no optimization time."""

    gradient: float = 0.0
    update: float = 0.0
    hessian: float = 0.0
    safeguard: float = 0.0
    exchange: float = 0.0
    wait: float = 0.0
    stalled: float = 0.0

    @property
    def total(self) -> float:
        """Return the optimization time: the sum of the phases, less the time stalled."""
        return (
            self.gradient
            + self.update
            + self.hessian
            + self.safeguard
            + self.exchange
            + self.wait
            - self.stalled
        )

    def as_dict(self) -> dict:
        """Return the phases as a plain dict."""
        return {
            "gradient": self.gradient,
            "update": self.update,
            "hessian": self.hessian,
            "safeguard": self.safeguard,
            "exchange": self.exchange,
            "wait": self.wait,
            "stalled": self.stalled,
        }


@dataclass
class Trace:
    """One row per cycle (for mb-GD a cycle is an epoch): cumulative optimization time, evaluation excluded."""

    rows: list = field(default_factory=list)

    def append(
        self,
        cycle: int,
        inner: int,
        time_s: float,
        train_rmse: float,
        validation_rmse: float,
        objective: float,
    ) -> None:
        """Record one cycle."""
        self.rows.append(
            TraceRow(
                int(cycle),
                int(inner),
                float(time_s),
                float(train_rmse),
                float(validation_rmse),
                float(objective),
            )
        )

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> np.ndarray:
        """Return one column (see TRACE_COLUMNS; a deprecated name warns) as an array."""
        if name in RENAMED_COLUMNS:
            name = _renamed_column(name)
        return np.array([getattr(row, name) for row in self.rows])

    def to_frame(self):
        """Return the trace as a pandas DataFrame with TRACE_COLUMNS."""
        # why lazy: pandas loads only for a DataFrame of the trace
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(TRACE_COLUMNS))

    def write_csv(self, path, header=TRACE_COLUMNS) -> None:
        """Write the trace as CSV atomically: a temp file renamed into place.

        header: the column names (TRACE_COLUMNS; the CLI names the validation column test_rmse
        when the test ratings fill it).
        """
        with atomic_output(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for row in self.rows:
                writer.writerow([row[0], row[1]] + [repr(value) for value in row[2:]])


class RunResult(OptimizeResult):
    """scipy's OptimizeResult; `best_epoch` is a deprecated name of `best_cycle` (FutureWarning)."""

    def __missing__(self, key):
        if key == "best_epoch":
            warnings.warn(
                "result.best_epoch is deprecated; use result.best_cycle (same value)",
                FutureWarning,
                stacklevel=3,
            )
            return self["best_cycle"]
        raise KeyError(key)


def make_result(
    x,
    reason: str,
    message: str,
    trace: Trace,
    phases: PhaseTimes,
    n_inner: int,
    n_cycles: int,
    *,
    fun: float | None = None,
    time: float | None = None,
    **extra,
) -> OptimizeResult:
    """Return a scipy OptimizeResult: x, fun, success, status, reason, message, nit, trace, phase_times.

    fun: f(x) (None: the objective of the trace's last row); time: the optimization time
    (None: the sum of the phases).
    """
    if fun is None:
        fun = trace.rows[-1].objective if trace.rows else float("nan")
    return RunResult(
        x=x,
        fun=float(fun),
        success=reason != "diverged",
        status=STATUS[reason],
        reason=reason,
        message=message,
        nit=n_inner,
        n_cycles=n_cycles,
        time=phases.total if time is None else time,
        phase_times=phases.as_dict(),
        trace=trace,
        **extra,
    )
