"""The matrix mechanism with the L2 approximation (AMM; Li et al. 2010; LRM paper App. B, Formula (12)).

The LRM paper compares LRM with the strategy that minimizes ||A||_{2,inf}^2 tr(W'W (A'A)^-1), i.e.
max(diag(M)) tr(W'W M^-1) over M = A'A > 0, and then answers A x with *Laplace* noise (L1
sensitivity, epsilon-DP): the "approximation" is optimizing the L2 sensitivity while paying the L1
one. Program (12) is scale-invariant, so it is the program COA solves (COA paper, (9)/(10):
minimize tr(W'W X^-1) with diag(X) = 1); App. B smooths max(diag M) by log-sum-exp and runs a
spectral projected gradient, we take COA's Newton solver with its duality-gap certificate
instead (same optimum, certified). Reconstruction R = W A^-1 (A is square and invertible).
"""

from __future__ import annotations

from dataclasses import replace

from dp.queries.coa import coa_schur_strategy
from dp.queries.strategy import Strategy, with_objective


def amm_strategy(W, **options) -> Strategy:
    """Return AMM: the optimum of Formula (12) (by coa-schur, `options` go to it) under Laplace noise."""
    l2_optimal = coa_schur_strategy(W, **options)
    return with_objective(replace(l2_optimal, method="amm", noise="laplace"))
