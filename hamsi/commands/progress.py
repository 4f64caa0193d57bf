"""Progress of a fit on stderr: a tqdm bar on a terminal, one line per cycle when piped to a log.

Both show the cycle against max_epochs, the optimization time against max_time, and the best
validation RMSE so far; the bar's length is the share of the nearer of the two limits.
"""

from __future__ import annotations

import math
import sys

from tqdm import tqdm

BAR_STEPS = 1000
BAR_FORMAT = "{desc} |{bar}| {elapsed} elapsed{postfix}"


class Progress:
    """A fit callback (row: dict of a trace row) that reports each cycle; close() when the fit ends."""

    def __init__(
        self,
        max_epochs: int | None,
        max_time: float | None,
        *,
        stream=None,
        bar: bool | None = None,
    ):
        self.max_epochs, self.max_time = max_epochs, max_time
        self.stream = sys.stderr if stream is None else stream
        self.best = (math.inf, None)
        use_bar = bar if bar is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar = None
        if use_bar:
            self._bar = tqdm(
                total=BAR_STEPS,
                file=self.stream,
                bar_format=BAR_FORMAT,
                dynamic_ncols=True,
                mininterval=0.1,
                leave=True,
            )

    def __call__(self, row: dict) -> None:
        if math.isfinite(row["test_rmse"]) and row["test_rmse"] < self.best[0]:
            self.best = (row["test_rmse"], row["epoch"])
        if self._bar is None:
            print(self._line(row), file=self.stream)
            return
        self._bar.set_description_str(self._cycles(row), refresh=False)
        self._bar.set_postfix_str(self._status(row), refresh=False)
        self._bar.update(round(BAR_STEPS * self.fraction(row)) - self._bar.n)

    def fraction(self, row: dict) -> float:
        """Return how far the run is to the nearer of max_epochs and max_time (0..1)."""
        shares = [0.0]
        if self.max_epochs:
            shares.append(row["epoch"] / self.max_epochs)
        if self.max_time:
            shares.append(row["time_s"] / self.max_time)
        return min(1.0, max(shares))

    def _cycles(self, row: dict) -> str:
        return f"cycle {row['epoch']}" + (f"/{self.max_epochs}" if self.max_epochs else "")

    def _status(self, row: dict) -> str:
        parts = [
            f"optimization {row['time_s']:.2f}"
            + (f"/{self.max_time:g}" if self.max_time else "")
            + " s",
            f"train RMSE {row['train_rmse']:.4f}",
        ]
        if self.best[1] is not None:
            parts.append(f"best validation RMSE {self.best[0]:.4f} (cycle {self.best[1]})")
        return ", ".join(parts)

    def _line(self, row: dict) -> str:
        test_part = f"  test {row['test_rmse']:.4f}" if math.isfinite(row["test_rmse"]) else ""
        best_part = f"  best {self.best[0]:.4f}@{self.best[1]}" if self.best[1] is not None else ""
        limit = f"/{self.max_epochs}" if self.max_epochs else ""
        return (
            f"epoch {row['epoch']:4d}{limit}  inner {row['inner']:6d}  {row['time_s']:8.3f} s  "
            f"train {row['train_rmse']:.4f}{test_part}{best_part}  f {row['objective']:.6g}"
        )

    def close(self) -> None:
        """Finish the bar (a no-op in line mode)."""
        if self._bar is not None:
            self._bar.close()
