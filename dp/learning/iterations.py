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
    """The last iterate, how the loop ended and, when asked for, f along the way."""

    x: np.ndarray
    n_iter: int  # iterations run
    status: str  # "completed" or "diverged"
    message: str
    # f(x_t) at t = 0, k, 2k, ... and T on the private data without noise: NOT private; None unless asked
    nonprivate_history: np.ndarray | None = None


def check_exact_range(stages: list[Stage], clip: float, batches) -> None:
    """Refuse, before any release, a run whose releases could leave the exact grid range.

    Each release is w * (sum of at most n clipped loss gradients) / divisor, every coordinate at most
    w * clip (n / divisor for a fixed divisor, as DP-SGD's q n) whatever the data: checked on that
    public bound and the pre-drawn noise, the loop can never stop on a private value (a
    data-dependent stop would itself be a release).
    """
    reach = 1.0 if batches.divisor is None else batches.n / batches.divisor
    for stage in stages:
        if not stage.stream.fits_exactly(stage.gradient_weight * clip * reach):
            raise ValueError(
                "epsilon is too large for an exact release at this n and n_iter "
                "(the noise is below the float64 grid); use epsilon=math.inf for the non-private run"
            )


def run_stages(
    problem: RegularizedProblem,
    stages: list[Stage],
    batches,
    x0: np.ndarray,
    history_every: int | None = None,
) -> Trajectory:
    """Return the trajectory of the momentum loop over `stages`, reading records from `batches`.

    Only the clipped mean loss gradient goes through the noise; the regularizer's 2 reg y is public
    (y is computed from earlier releases) and is added after. The loop stops early only on a
    non-finite iterate, a function of the releases alone. With `history_every` = k, f is also
    evaluated on the private data every k iterations and at the last one: a non-private diagnostic.
    """
    check_exact_range(stages, problem.clip, batches)
    total = sum(stage.n_iter for stage in stages)
    x = np.array(x0, dtype=np.float64)
    history = None if history_every is None else [problem.objective(x)]
    t_global = 0
    for k, stage in enumerate(stages):
        x_prev = x.copy()  # restart: x_0^k = x_1^k (Alg. 5 line 6)
        for t in range(stage.n_iter):
            velocity = stage.momentum * (x - x_prev)
            y = x + velocity if stage.extrapolate else x
            loss_gradient = problem.clipped_loss_gradient(
                y, batches.rows(t_global), batches.divisor
            )
            noisy = stage.stream.release(t, stage.gradient_weight * loss_gradient)
            noisy = noisy + stage.gradient_weight * problem.regularizer_gradient(y)
            x_prev, x = x, x + velocity - stage.steps[t] * noisy
            t_global += 1
            if history is not None and (t_global % history_every == 0 or t_global == total):
                history.append(problem.objective(x))
            if not np.all(np.isfinite(x)):
                return Trajectory(
                    x_prev,
                    t_global,
                    "diverged",
                    f"diverged at iteration {t_global} (stage {k + 1}): the iterate is not finite",
                    None if history is None else np.array(history),
                )
    return Trajectory(
        x,
        t_global,
        "completed",
        f"completed {t_global} iterations",
        None if history is None else np.array(history),
    )
