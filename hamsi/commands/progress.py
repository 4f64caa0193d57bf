"""Progress of a fit on stderr: a tqdm bar on a terminal, one line per cycle when piped to a log.

Both show the cycle against max_cycles, the optimization time against max_time, and the best
held-out RMSE so far (validation, or test when the test ratings fill the trace's validation
column and steer nothing); the bar's length is the share of the nearer of the two limits.
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
        max_cycles: int | None,
        max_time: float | None,
        *,
        stream=None,
        bar: bool | None = None,
        scored: str = "validation",
    ):
        self.max_cycles, self.max_time, self.scored = max_cycles, max_time, scored
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
        if math.isfinite(row["validation_rmse"]) and row["validation_rmse"] < self.best[0]:
            self.best = (row["validation_rmse"], row["cycle"])
        if self._bar is None:
            print(self._line(row), file=self.stream)
            return
        self._bar.set_description_str(self._cycles(row), refresh=False)
        self._bar.set_postfix_str(self._status(row), refresh=False)
        self._bar.update(round(BAR_STEPS * self.fraction(row)) - self._bar.n)

    def fraction(self, row: dict) -> float:
        """Return how far the run is to the nearer of max_cycles and max_time (0..1)."""
        shares = [0.0]
        if self.max_cycles:
            shares.append(row["cycle"] / self.max_cycles)
        if self.max_time:
            shares.append(row["time_s"] / self.max_time)
        return min(1.0, max(shares))

    def _cycles(self, row: dict) -> str:
        return f"cycle {row['cycle']}" + (f"/{self.max_cycles}" if self.max_cycles else "")

    def _status(self, row: dict) -> str:
        parts = [
            f"optimization {row['time_s']:.2f}"
            + (f"/{self.max_time:g}" if self.max_time else "")
            + " s",
            f"train RMSE {row['train_rmse']:.4f}",
        ]
        if self.best[1] is not None:
            parts.append(f"best {self.scored} RMSE {self.best[0]:.4f} (cycle {self.best[1]})")
        return ", ".join(parts)

    def _line(self, row: dict) -> str:
        held_out = row["validation_rmse"]
        scored = f"  {self.scored} {held_out:.4f}" if math.isfinite(held_out) else ""
        best_part = f"  best {self.best[0]:.4f}@{self.best[1]}" if self.best[1] is not None else ""
        limit = f"/{self.max_cycles}" if self.max_cycles else ""
        return (
            f"cycle {row['cycle']:4d}{limit}  inner {row['inner']:6d}  {row['time_s']:8.3f} s  "
            f"train {row['train_rmse']:.4f}{scored}{best_part}  f {row['objective']:.6g}"
        )

    def close(self) -> None:
        """Finish the bar (a no-op in line mode)."""
        if self._bar is not None:
            self._bar.close()
