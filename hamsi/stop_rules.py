"""When a HAMSI / mb-GD run stops, and what it says: one StopRules object for every engine.

The in-process engine and the Dask workers hand it the same reduced numbers after every cycle,
so they stop in the same cycle with the same message (the state is small and travels between
Dask chunks and into checkpoints).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def divergence_message(
    objective: float, epoch: int, inner: int, eta: float, safeguard: bool
) -> str:
    """Return the one message of a diverged run: what happened and which way to move eta.

    The step is 1 / beta_t = (eta t)^-gamma, so a LARGER eta gives SMALLER steps.
    """
    advice = (
        f"try a larger eta (now {eta:g}): the step is 1/(eta t)^gamma, so a larger eta means "
        "smaller steps"
    )
    if not safeguard:
        advice += ", or turn the safeguard on (safeguard=True)"
    return (
        f"diverged: the objective became {objective} in cycle {epoch} (inner iteration {inner}); "
        f"the steps are too large for this problem - {advice}"
    )


@dataclass
class StopRules:
    """Stop at the first of: divergence, target, no validation gain for `patience` cycles, tol, limits.

    Order and wording as scipy.optimize results: `check` returns (reason, message) or None.
    best_heldout / best_epoch / new_best follow the validation error (early stopping restores the
    best iterate); previous_objective carries the tol rule from one cycle to the next.
    """

    max_epochs: int | None = None
    max_time: float | None = None
    tol: float = 0.0
    target: float | None = None
    patience: int | None = None
    has_heldout: bool = False
    eta: float = 0.0
    safeguard: bool = False
    metric: str = "rmse"
    best_heldout: float = math.inf
    best_epoch: int | None = None
    new_best: bool = False
    without_gain: int = 0
    previous_objective: float | None = None

    @property
    def keeps_best(self) -> bool:
        """True when the run keeps (and finally returns) the best-validation iterate."""
        return self.patience is not None and self.has_heldout

    def out_of_time(self, time_s: float) -> bool:
        """Return True once the optimization time reached max_time (checked after every inner iteration)."""
        return self.max_time is not None and time_s >= self.max_time

    def start(self, objective: float, heldout: float) -> None:
        """Take the starting point's numbers (epoch 0) as the reference of the tol and patience rules."""
        self.previous_objective = objective
        self._follow_heldout(0, heldout)

    def _follow_heldout(self, epoch: int, heldout: float) -> None:
        self.new_best = False
        if self.has_heldout and math.isfinite(heldout):
            if heldout < self.best_heldout:
                self.best_heldout, self.best_epoch, self.new_best = heldout, epoch, True
                self.without_gain = 0
            else:
                self.without_gain += 1

    def check(
        self,
        epoch: int,
        inner: int,
        time_s: float,
        train: float,
        heldout: float,
        objective: float,
        repeated: bool = False,
    ) -> tuple[str, str] | None:
        """Return (reason, message) when the run must stop after cycle `epoch`, else None.

        repeated: the numbers are those of an earlier iterate the safeguard went back to; only the
        limits apply then (the objective did not change, the validation error is not new).
        """
        metric = self.metric
        if not repeated:
            if not (math.isfinite(objective) and math.isfinite(train)):
                return "diverged", divergence_message(
                    objective, epoch, inner, self.eta, self.safeguard
                )
            if self.target is not None and train <= self.target:
                return (
                    "target",
                    f"train {metric} {train:.6g} reached the target {self.target:g} in cycle {epoch}",
                )
            self._follow_heldout(epoch, heldout)
            if (
                self.patience is not None
                and self.has_heldout
                and self.without_gain >= self.patience
            ):
                return "early_stop", (
                    f"validation {metric} did not improve on {self.best_heldout:.6g} "
                    f"(cycle {self.best_epoch}) for {self.patience} cycles (cycle {epoch})"
                )
            previous, self.previous_objective = self.previous_objective, objective
            change = abs(previous - objective) if previous is not None else math.inf
            if self.tol > 0 and change <= self.tol * abs(objective):
                return "tolerance", (
                    f"the objective changed by {change:.3g} <= tol * |f| (tol {self.tol:g}) "
                    f"in cycle {epoch}"
                )
        else:
            self.new_best = False
        if self.max_epochs is not None and epoch >= self.max_epochs:
            return "epoch_limit", f"reached max_cycles = {self.max_epochs}"
        if self.out_of_time(time_s):
            return "time_limit", (
                f"optimization time {time_s:.3f} s reached max_time = {self.max_time:g} s "
                f"in cycle {epoch}"
            )
        return None


def overfitting_note(rows, best_epoch: int | None, metric: str = "rmse") -> str:
    """Return a note when validation error rose after best_epoch while training error fell, else "".

    rows: trace rows (epoch, inner, time_s, train, test, objective).
    """
    if best_epoch is None or not rows:
        return ""
    best = next((r for r in rows if r[0] == best_epoch), None)
    last = rows[-1]
    if best is None or last[0] == best_epoch:
        return ""
    if last[4] > best[4] and last[3] < best[3]:
        return (
            f"overfitting: validation {metric} rose from {best[4]:.4g} (cycle {best_epoch}) to "
            f"{last[4]:.4g} while train {metric} fell from {best[3]:.4g} to {last[3]:.4g}"
        )
    return ""
