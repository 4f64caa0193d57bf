"""The vectors one worker updates, and the per-shard partials it forms on them.

Every partial comes from the per-shard kernels of hamsi.kernels (shard_iteration_partials) on
the engine's shards, so the stepper receives the numbers a LocalExchange gives.
"""

from __future__ import annotations

import numpy as np

from cluster.messages import ShardPartials
from hamsi import kernels

_UNUSED = np.zeros(0)


def shard_partials(
    shard: int, request, x, x_start, g, g_start, S, Y, s_new, y_new
) -> ShardPartials:
    """Return the partials `request` asks for on one shard (s_new, y_new: where the pair is formed)."""
    M = S.shape[0]
    out = ShardPartials(shard)
    if request.pair:
        out.pair, out.new_pair_g = np.empty(2 * M + 2), np.empty(2)
    if request.gram:
        out.gram = np.empty(2 * M + 1)
    if request.wtg:
        out.wtg = np.empty(2 * M)
    if request.norms:
        out.norms = np.empty(2)
    if not (request.pair or request.gram or request.wtg or request.norms):
        return out
    kernels.shard_iteration_partials(
        x,
        x_start,
        g,
        g_start,
        S,
        Y,
        s_new,
        y_new,
        request.pair,
        request.gram,
        request.wtg,
        request.norms,
        *(
            _UNUSED if a is None else a
            for a in (out.pair, out.new_pair_g, out.gram, out.wtg, out.norms)
        ),
    )
    return out


class ShardVectors:
    """x, g, memory rows, starts and saved copies of one stretch of x that this worker updates.

    g, s_new, y_new: given (views into shared memory) or allocated here.
    """

    def __init__(self, x, S, Y, x_start, g_start, saved, g=None, s_new=None, y_new=None):
        self.x, self.S, self.Y, self.x_start, self.g_start, self.saved = (
            x,
            S,
            Y,
            x_start,
            g_start,
            saved,
        )
        self.g = np.zeros_like(x) if g is None else g
        self.s_new = np.zeros((1, x.size)) if s_new is None else s_new
        self.y_new = np.zeros((1, x.size)) if y_new is None else y_new

    def store_pair(self, slot: int) -> None:
        kernels.shard_copy_pair(self.s_new, self.y_new, self.S, self.Y, slot)

    def remember_start(self) -> None:
        self.x_start[:], self.g_start[:] = self.x, self.g

    def step(self, coef, sigma: float, inv_beta: float) -> None:
        if coef is None:
            kernels.shard_gradient_step(self.x, self.g, inv_beta)
        else:
            kernels.shard_lbfgs_step(self.x, self.g, self.S, self.Y, coef, sigma, inv_beta)

    def save(self, name: str) -> None:
        self.saved[name] = self.x.copy()

    def restore(self, name: str) -> None:
        self.x[:] = self.saved[name]

    def partials(self, shard: int, request, lo: int, hi: int, g=None) -> ShardPartials:
        """Return shard `shard`'s partials over x[lo:hi] (g: another buffer holding its gradient)."""
        g = self.g[lo:hi] if g is None else g
        return shard_partials(
            shard,
            request,
            self.x[lo:hi],
            self.x_start[lo:hi],
            g,
            self.g_start[lo:hi],
            self.S[:, lo:hi],
            self.Y[:, lo:hi],
            self.s_new[:, lo:hi],
            self.y_new[:, lo:hi],
        )


class VectorWork:
    """The parts of a work that only forward to its vectors."""

    def vectors(self):
        raise NotImplementedError

    def store_pair(self, slot):
        for v in self.vectors():
            v.store_pair(slot)

    def remember_start(self):
        for v in self.vectors():
            v.remember_start()

    def step(self, coef, sigma, inv_beta):
        for v in self.vectors():
            v.step(coef, sigma, inv_beta)

    def save(self, name):
        for v in self.vectors():
            v.save(name)

    def restore(self, name):
        for v in self.vectors():
            v.restore(name)
