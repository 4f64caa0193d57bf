"""Default hyper-parameters of a rating factorization, chosen from the data.

The estimators choose rank, reg, reg_weighting and reg_damping by validation when they are
"auto" (hamsi.search: successive halving on a split of the training ratings); this module gives
every other value (the start, the steps, eta) for the penalty so chosen, and its REG_PER_SD is
the search's uniform candidate. On ml-100k-like and long-tail-like the search mostly picks the
damped count-weighted penalty (benchmarks/bench_accuracy.py, docs/accuracy.md).

``choose_hyperparameters(ratings, rank) -> dict`` is the one place that decides them; the
estimators and the CLI take its values for every parameter the user leaves unset. Split the
dict with ``problem_options`` (keywords of `hamsi.problems.MatrixFactorization`) and
``optimizer_options`` (keywords of `hamsi.optimizer.minimize_hamsi`).

Why these values (the measurements behind each are in docs/accuracy.md, "The fixed defaults"):

- biases on, around the training mean: on MovieLens user and item biases alone take most of
  the way from the global mean to the best factor model.
- an L2 penalty reg (|U|^2 + |V|^2) with reg = REG_PER_SD * sd (sd the ratings' standard
  deviation, so rescaling the ratings rescales the model and nothing else). The best reg at
  convergence does not move with the density, as the MAP reading reg = noise variance / prior
  variance says. The ALS-WR weighting (reg_weighting="count", every rating carrying
  reg (|U_a|^2 + |V_b|^2)) needs a reg falling with the density. Both stay available: a user's
  reg and reg_weighting are kept.
- a small start: factors N(0, s^2) with s such that the start predicts the mean (its
  predictions spread by INIT_SPREAD of the ratings' standard deviation); the reference's
  N(0, 1) start predicts values spread by sqrt(rank) stars, which a run then spends its first
  cycles undoing. The biases start at their penalized least-squares fit with the factors at 0
  (ten O(|I|) sweeps), so a run starts from the bias baseline instead of spending its first
  cycles reaching it.
- gradient steps (before L-BFGS has M pairs) of 1/L for L the largest curvature of one user's
  or item's bias in one subset, (n_a + reg) / (K |I|) at most, so the heaviest user's bias
  cannot overshoot, whatever the size of the data and the reg.
- eta 0.5 (steps 1/(0.5 t)^0.51 times the L-BFGS direction), with minimize_hamsi's safeguard
  (its default) assumed. Larger steps (eta 0.1-0.2) take early steps that throw the held-out
  RMSE up for tens of cycles; eta 1 stays at the start; without the safeguard small eta
  diverges. With the count-weighted penalty (every rating carries its user's and item's share
  of it) eta 0.05: those runs converge slowly with eta 0.5, and the uniform penalty gains
  nothing from the smaller eta.
- early stopping: patience 60 cycles on a validation split of 5 % of the training ratings
  (the best-validation iterate is returned). Long, because the validation RMSE can rise for
  tens of cycles as the factors grow out of the small start before it falls; a short patience
  stops such a run near its start. It guards the long runs and large ranks, which overfit after
  their best cycle.
"""

from __future__ import annotations

import numpy as np

from hamsi.data.moments import RatingStatistics, rating_statistics
from hamsi.errors import InputError

REG_PER_SD = 7.0
INIT_SPREAD = 0.01
HAMSI_ETA_DEFAULT = 0.5
HAMSI_ETA_COUNT_WEIGHTED = 0.05
GAMMA_DEFAULT = 0.51
MEMORY_DEFAULT = 5
PATIENCE_DEFAULT = 60
VALIDATION_FRACTION = 0.05
PROBLEM_KEYS = (
    "reg",
    "biases",
    "reg_weighting",
    "reg_damping",
    "init_scale",
    "init_biases",
    "init_factors",
)
OPTIMIZER_KEYS = ("eta", "eta_gd", "gamma", "memory")


def choose_hyperparameters(
    ratings,
    rank: int,
    *,
    subsets: int = 2,
    reg: float | None = None,
    reg_weighting: str = "uniform",
    reg_damping: float = 0.0,
) -> dict:
    """Return the default hyper-parameters for factorizing `ratings` at `rank` with HAMSI.

    ``choose_hyperparameters(ratings, rank, *, subsets=2, reg=None, reg_weighting="uniform", reg_damping=0.0)``
    returns a dict with the keys reg (float), reg_weighting (str), reg_damping (float), biases (True), init_scale (float),
    init_biases (True: start the biases at their penalized least-squares fit), eta,
    eta_gd, gamma (floats), memory (int), patience (int, cycles without validation gain before
    early stopping) and validation_fraction (float, the share of the training ratings to hold
    out for early stopping when no validation set is given).

    `ratings` is a hamsi.Ratings (anything with rows, cols, values) or the RatingStatistics the Dask
    data path reduces on the workers (hamsi.data.moments); `subsets` is the number K
    of subsets of the cover. A `reg` (and `reg_weighting`) the user chose is kept, and the
    gradient step is fitted to it, so any reg >= 0 gets a stable start.
    """
    stats = ratings if isinstance(ratings, RatingStatistics) else rating_statistics(ratings)
    if stats.n_ratings == 0:
        raise InputError("cannot choose hyper-parameters for empty ratings (0 entries)")
    if isinstance(rank, bool) or int(rank) != rank or rank < 1:
        raise InputError(f"rank must be a positive integer; got {rank!r}")
    spread = stats.spread
    scale = spread if spread > 0 else 1.0
    reg = REG_PER_SD * scale if reg is None else float(reg)
    return {
        "reg": reg,
        "reg_weighting": reg_weighting,
        "reg_damping": float(reg_damping),
        "biases": True,
        "init_scale": float(np.sqrt(INIT_SPREAD * scale / np.sqrt(rank))),
        "init_biases": True,
        "init_factors": "spectral",
        "eta": HAMSI_ETA_COUNT_WEIGHTED if reg_weighting == "count" else HAMSI_ETA_DEFAULT,
        "eta_gd": gradient_eta(
            stats, reg, reg_weighting, max(1, int(subsets)), GAMMA_DEFAULT, reg_damping
        ),
        "gamma": GAMMA_DEFAULT,
        "memory": MEMORY_DEFAULT,
        "patience": PATIENCE_DEFAULT,
        "validation_fraction": VALIDATION_FRACTION,
    }


def gradient_eta(
    stats, reg: float, reg_weighting: str, subsets: int, gamma: float, damping: float = 0.0
) -> float:
    """Return eta_GD whose first gradient step 1/eta_GD^gamma is 1/L (module doc).

    L is the largest curvature of the objective in one bias coordinate within one subset:
    (n_a (1 + reg) + reg damping) / (K |I|) with the count-weighted penalty, (n_a + reg) / (K |I|) with the
    uniform one (each of a's ratings carries reg / n_a), over every user and item a (n_a
    ratings, spread over K subsets): the largest count decides it. `stats`: RatingStatistics or Ratings.
    """
    stats = stats if isinstance(stats, RatingStatistics) else rating_statistics(stats)
    count = float(stats.max_count)
    if reg_weighting == "count":
        curvature = count / subsets * (1.0 + reg) + reg * damping / subsets
    else:
        curvature = (count + reg) / subsets
    return float((curvature / stats.n_ratings) ** (1.0 / gamma))


def problem_options(params: dict) -> dict:
    """Return the entries of `params` that `MatrixFactorization(ratings, rank, **...)` takes."""
    return {key: params[key] for key in PROBLEM_KEYS if key in params}


def optimizer_options(params: dict) -> dict:
    """Return the entries of `params` that `minimize_hamsi(problem, partition, **...)` takes."""
    return {key: params[key] for key in OPTIMIZER_KEYS if key in params}
