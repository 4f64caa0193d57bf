"""Every per-iteration decision of HAMSI (thesis Alg. 3) and mb-GD, in one place, for every exchange.

The stepper holds the small replicated state of a run: the L-BFGS memory (hamsi.lbfgs), the
inner-iteration counter t, the schedule's random state and the safeguard's state. It decides,
from reduced numbers only: the subset order of a cycle, when a curvature pair is formed, whether
it is kept, when the quasi-Newton step takes over, beta_t, and (safeguard) the step cap and the
fallback. Dask workers each run a copy and reach the same decisions from the same numbers.

Behaviour taken from the reference implementation (spartensor/hamsi-mf), where the thesis leaves
a choice:
- beta_t = (eta t)^gamma with t the inner-iteration counter (1-based), not the cycle number;
- until M curvature pairs are accepted, plain gradient steps x -= g / (eta_GD t)^gamma,
  eta_GD = 0.001; the pairs are collected meanwhile;
- with one subset (K = 1) a cycle is one inner iteration and the pair is formed between
  consecutive iterates; for K > 1 a cycle visits K + 1 subsets, x and g are remembered after the
  first gradient and the pair is formed after the last one (same subset), before the step.

The safeguard (on by default) keeps the thesis steps wherever they are sound and adds three
guards against the divergence the plain method shows on real rating data (large early steps
1/(eta t)^gamma times an L-BFGS direction scaled by sigma up to 500):
1. curvature-pair acceptance: a pair is kept only when s'y > c |s| |y| (c = CURVATURE_COSINE),
   so nearly orthogonal pairs cannot make H ill-conditioned;
2. a step cap: |x_new - x| <= STEP_RADIUS max(|x|, sqrt(n)); |sigma g + W c|^2 is formed from
   small reductions (g'g, W'g and the 2M x 2M Gram matrix of the memory rows, updated with each
   pair from the same reduction round), so it costs no extra all-reduce;
3. a fallback: when a cycle's objective is not finite or exceeds JUMP_FACTOR times the best seen,
   the last good iterate is restored, the memory cleared and every later step scaled by SHRINK;
   after MAX_FALLBACKS the run stops as diverged.
With safeguard=False the steps are bit for bit those of thesis Alg. 3 as above.

The fallback's objective is F at the cycle's end point, from the evaluation that makes the
cycle's trace row (run with or without the safeguard; only with it does its time count on the
clock). It is not folded into the gradient pass: a cycle's gradients are taken at the points
before each of its steps, so the losses known there add up to F along the way, not at the end
point, and the last step's effect would show one cycle late, after its end point had been kept
as the good iterate the fallback restores.
"""

from __future__ import annotations

import math
import time

import numpy as np

from hamsi import kernels
from hamsi.exchange import Evaluation, Request
from hamsi.lbfgs import LBFGSMemory
from hamsi.options import METHODS
from hamsi.schedules import hamsi_cycle, mbgd_epoch

CURVATURE_COSINE = 1.0e-4
STEP_RADIUS = 1.0
JUMP_FACTOR = 2.0
SHRINK = 0.5
MAX_FALLBACKS = 30


def beta_schedule(eta: float, gamma: float, t: int) -> float:
    """Return beta_t = (eta t)^gamma (thesis Alg. 3, line 5); the step is 1 / beta_t."""
    return (eta * t) ** gamma


def engine_rngs(random_state) -> tuple[np.random.Generator, np.random.Generator]:
    """Return (initialization rng, schedule rng), both determined by random_state (an int or None)."""
    init_seed, schedule_seed = np.random.SeedSequence(random_state).spawn(2)
    return np.random.default_rng(init_seed), np.random.default_rng(schedule_seed)


def summed(partials: np.ndarray) -> np.ndarray:
    """Return the shard-order sum of per-shard partials (the one reduction of every exchange)."""
    out = np.empty(partials.shape[1])
    kernels.sum_partials_in_order(partials, out)
    return out


class Stepper:
    """The decisions of one HAMSI (method "hamsi") or mb-GD ("mbgd") run; see the module docstring."""

    cleared_pairs = (
        0,
        0,
    )  # the default for a stepper restored from a checkpoint written before the field

    def __init__(
        self,
        *,
        method: str,
        n_subsets: int,
        n_params: int,
        schedule: str = "det",
        memory: int = 5,
        eta: float,
        gamma: float,
        eta_gd: float,
        safeguard: bool,
        random_state=None,
    ):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {method!r}")
        self.method, self.n_subsets, self.n_params, self.schedule = (
            method,
            int(n_subsets),
            int(n_params),
            schedule,
        )
        self.eta, self.gamma, self.eta_gd = float(eta), float(gamma), float(eta_gd)
        self.safeguard = bool(safeguard) and method == "hamsi"
        self.memory_size = int(memory)
        self.lbfgs = LBFGSMemory(self.memory_size)
        self.schedule_rng = engine_rngs(random_state)[1]
        self.inner = 0
        self.have_start = False
        self.gram = np.zeros((2 * self.memory_size, 2 * self.memory_size))
        self.step_scale = 1.0
        self.fallbacks = 0
        self.cleared_pairs = (0, 0)  # pairs (accepted, rejected) by memories a fallback cleared
        self.best_objective = math.inf
        self.good: Evaluation | None = None  # the evaluation of the last good iterate

    @property
    def pairs_accepted(self) -> int:
        """Return the curvature pairs accepted in the whole run (also those a fallback cleared)."""
        return self.cleared_pairs[0] + self.lbfgs.n_accepted

    @property
    def pairs_rejected(self) -> int:
        """Return the curvature pairs rejected in the whole run."""
        return self.cleared_pairs[1] + self.lbfgs.n_rejected

    @property
    def hamsi(self) -> bool:
        return self.method == "hamsi"

    # ------------------------------------------------------------------ the cycle
    def cycle(self, epoch: int) -> np.ndarray:
        """Return the subset order of cycle `epoch` (1-based): K + 1 subsets, or one when K = 1."""
        if not self.hamsi:
            return mbgd_epoch(self.schedule, self.n_subsets, epoch, self.schedule_rng)
        if self.n_subsets == 1:  # the one place of the K = 1 case: a cycle is one inner iteration
            return np.zeros(1, dtype=np.int64)
        return hamsi_cycle(self.schedule, self.n_subsets, epoch, self.schedule_rng)

    def pair_now(self, position: int, last: int) -> bool:
        """Return True when this inner iteration forms a curvature pair (Alg. 3, line 14).

        At the cycle's last position (same subset as its first). With K = 1 a cycle is one
        iteration (see `cycle`), so the pair joins consecutive iterates once a start is remembered.
        """
        return self.hamsi and self.have_start and position == last

    def request(
        self, position: int, last: int, subset: int, vote: bool, next_subset: int = -1
    ) -> Request:
        """Return what inner iteration (position, subset) needs from the exchange."""
        pair = self.pair_now(position, last)
        quasi_newton = self.hamsi and (
            self.lbfgs.full or (pair and self.lbfgs.n_accepted + 1 >= self.memory_size)
        )
        return Request(
            subset=int(subset),
            pair=pair,
            wtg=quasi_newton,
            gram=pair and self.safeguard,
            norms=self.safeguard,
            vote=vote,
            next_subset=int(next_subset),
        )

    # ------------------------------------------------------------------ one inner iteration
    def inner_iteration(
        self, exchange, position: int, last: int, subset: int, vote: bool, next_subset: int = -1
    ) -> bool:
        """Run one inner iteration through `exchange`; return False when a clock vote stopped it first."""
        self.inner += 1
        reductions = exchange.iterate(self.request(position, last, subset, vote, next_subset))
        if reductions.stopped:
            self.inner -= 1
            return False
        start = time.perf_counter()
        slot = self._consider_pair(reductions, exchange) if reductions.pair is not None else None
        if position == 0 and self.hamsi:  # Alg. 3, line 12
            exchange.remember_start()
            self.have_start = True
        middle = time.perf_counter()
        coef, sigma, inv_beta = self._step(reductions, slot)
        exchange.step(coef, sigma, inv_beta)
        exchange.phases.hessian += middle - start
        exchange.phases.update += time.perf_counter() - middle
        return True

    def _consider_pair(self, reductions, exchange) -> int | None:
        """Decide on the new pair (Alg. 3, lines 15-19); store it and return its slot, or None."""
        products = summed(reductions.pair)
        if self.safeguard:
            gram = summed(reductions.gram)
            if not products[0] > CURVATURE_COSINE * math.sqrt(max(gram[0] * products[1], 0.0)):
                self.lbfgs.n_rejected += 1
                return None
        slot = self.lbfgs.next_slot
        if not self.lbfgs.consider_pair(products):
            return None
        exchange.store_pair(slot)
        if self.safeguard:
            self._update_gram(slot, products, gram)
        return slot

    def _update_gram(self, slot: int, products: np.ndarray, gram: np.ndarray) -> None:
        """Put the new pair's row into the Gram matrix of the memory rows [S; Y] (ring indexing)."""
        M = self.memory_size
        s_row = np.concatenate([gram[1 : 1 + M], gram[1 + M : 1 + 2 * M]])
        y_row = np.concatenate([products[2 : 2 + M], products[2 + M : 2 + 2 * M]])
        s_row[slot], s_row[M + slot] = gram[0], products[0]
        y_row[slot], y_row[M + slot] = products[0], products[1]
        self.gram[slot, :], self.gram[:, slot] = s_row, s_row
        self.gram[M + slot, :], self.gram[:, M + slot] = y_row, y_row

    def _step(self, reductions, slot):
        """Return (coef, sigma, inv_beta) of this iteration's step (Alg. 3, line 13; coef None: gradient step)."""
        if not self.hamsi:
            return None, 0.0, 1.0 / beta_schedule(self.eta, self.gamma, self.inner)
        if not self.lbfgs.full:
            inv_beta = 1.0 / beta_schedule(self.eta_gd, self.gamma, self.inner)
            return None, 0.0, self._capped(inv_beta, reductions, None, 0.0, None)
        partials = reductions.wtg
        if slot is not None:  # the memory now holds the new pair: W^T g with its row (s.g, y.g)
            partials = partials.copy()
            partials[:, slot] = reductions.new_pair_g[:, 0]
            partials[:, self.memory_size + slot] = reductions.new_pair_g[:, 1]
        wtg = summed(partials)
        coef = self.lbfgs.coefficients(wtg)
        inv_beta = 1.0 / beta_schedule(self.eta, self.gamma, self.inner)
        return (
            coef,
            self.lbfgs.sigma,
            self._capped(inv_beta, reductions, coef, self.lbfgs.sigma, wtg),
        )

    def _capped(self, inv_beta: float, reductions, coef, sigma: float, wtg) -> float:
        """Return inv_beta, shrunk after fallbacks and capped so |step| <= STEP_RADIUS max(|x|, sqrt(n))."""
        if not self.safeguard:
            return inv_beta
        inv_beta *= self.step_scale
        gg, xx = summed(reductions.norms)
        if coef is None:
            squared = gg
        else:
            squared = (
                sigma * sigma * gg
                + 2.0 * sigma * float(coef @ wtg)
                + float(coef @ self.gram @ coef)
            )
        length = math.sqrt(max(squared, 0.0))
        radius = STEP_RADIUS * math.sqrt(max(xx, float(self.n_params)))
        if inv_beta * length > radius:
            inv_beta = radius / length
        return inv_beta

    # ------------------------------------------------------------------ the end of a cycle
    def begin(self, evaluation, exchange) -> None:
        """Take the starting point as the first good iterate."""
        if self.safeguard:
            self._keep(evaluation, exchange)

    def _keep(self, evaluation, exchange) -> None:
        start = time.perf_counter()
        exchange.save("good")
        self.good = evaluation
        self.best_objective = min(self.best_objective, evaluation.objective)
        exchange.phases.safeguard += time.perf_counter() - start

    def end_cycle(self, evaluation, exchange):
        """Return (evaluation to record, repeated) after a cycle; the safeguard's fallback lives here.

        repeated is True when the iterate was replaced by the last good one (whose numbers are
        returned). `gave_up` is set after MAX_FALLBACKS.
        """
        if not self.safeguard:
            return evaluation, False
        exchange.phases.safeguard += evaluation.seconds  # the objective is the fallback's test
        sound = math.isfinite(evaluation.objective) and math.isfinite(evaluation.train)
        if sound and evaluation.objective <= JUMP_FACTOR * self.best_objective:
            self._keep(evaluation, exchange)
            return evaluation, False
        start = time.perf_counter()
        self.fallbacks += 1
        exchange.restore("good")
        self.cleared_pairs = (self.pairs_accepted, self.pairs_rejected)
        self.lbfgs = LBFGSMemory(self.memory_size)
        self.gram[:] = 0.0
        self.have_start = False
        self.step_scale *= SHRINK
        exchange.phases.safeguard += time.perf_counter() - start
        good = self.good
        if good is None:  # begin() keeps the start whenever the safeguard is on
            raise RuntimeError("Stepper.begin must run before the first end_cycle")
        return Evaluation(good.train, good.objective, good.heldout, evaluation.time_s), True

    @property
    def gave_up(self) -> bool:
        """True after more than MAX_FALLBACKS fallbacks (the run then stops as diverged)."""
        return self.fallbacks > MAX_FALLBACKS
