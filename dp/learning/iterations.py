"""The one momentum loop every method runs: heavy ball, Nesterov, and their multistage restarts.

A stage runs x_{t+1} = x_t + m (x_t - x_{t-1}) - alpha_t * release(w * g(y_t)), with
y_t = x_t + m (x_t - x_{t-1}) (Nesterov, thesis (4.6)) or y_t = x_t (heavy ball, (4.5)), where g is
the clipped gradient on the iteration's batch and `release` adds the stage's privacy noise.
DP-GDwS (Alg. 4) is this loop with w = beta, m = 1 - beta: its smoothed gradient
g~_t = (1 - beta) g~_{t-1} + beta g(x_t) + eta_t satisfies alpha g~_{t-1} = x_{t-1} - x_t (thesis,
"Convergence Rate Analysis" of 4.2.1). Each new stage restarts the momentum (Alg. 5 line 6).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dp.learning.noise import NoiseStream
from dp.learning.problems import RegularizedProblem


@dataclass
class Stage:
    """Fixed parameters for a run of iterations (one stage of Alg. 5/7; the whole run of Alg. 4/6)."""

    steps: np.ndarray  # alpha_t, one per iteration of the stage
    momentum: float
    extrapolate: bool  # Nesterov: the gradient is taken at the extrapolated point
    gradient_weight: float  # beta of the smoothing; 1 for the unsmoothed methods
    stream: NoiseStream

    @property
    def n_iter(self) -> int:
        return len(self.steps)


@dataclass
class Trajectory:
    """The iterates' objective values and how the loop ended."""

    x: np.ndarray
    history: np.ndarray  # f(x_t) at t = 0, k, 2k, ... and T, evaluated without noise
    n_iter: int  # iterations run
    status: str  # "completed" or "diverged"
    message: str


def run_stages(problem: RegularizedProblem, stages: list[Stage], batches, x0: np.ndarray,
               history_every: int = 1) -> Trajectory:
    """Return the trajectory of the momentum loop over `stages`, reading records from `batches`.

    f is recorded every `history_every` iterations and at the last one (benchmarks thin it out:
    evaluating f on all records can cost more than a stochastic step).
    """
    total = sum(stage.n_iter for stage in stages)
    x = np.array(x0, dtype=np.float64)
    history = [problem.objective(x)]
    t_global = 0
    for k, stage in enumerate(stages):
        x_prev = x.copy()  # restart: x_0^k = x_1^k (Alg. 5 line 6)
        for t in range(stage.n_iter):
            velocity = stage.momentum * (x - x_prev)
            y = x + velocity if stage.extrapolate else x
            gradient = problem.clipped_gradient(y, batches.rows(t_global), batches.divisor)
            try:
                noisy = stage.stream.release(t, stage.gradient_weight * gradient)
            except ValueError as exc:  # the gradient outgrew the exact grid: the run blew up
                return Trajectory(x, np.array(history), t_global, "diverged",
                                  f"diverged at iteration {t_global + 1} (stage {k + 1}): {exc}")
            x_prev, x = x, x + velocity - stage.steps[t] * noisy
            t_global += 1
            if t_global % history_every == 0 or t_global == total:
                history.append(problem.objective(x))
            if not (np.isfinite(history[-1]) and np.all(np.isfinite(x))):
                return Trajectory(x_prev, np.array(history), t_global, "diverged",
                                  f"diverged at iteration {t_global} (stage {k + 1}): f is not finite")
    return Trajectory(x, np.array(history), t_global, "completed", f"completed {t_global} iterations")
