"""Workload matrices and histograms of the COA and LRM experiments, seeded with default_rng.

Workloads (Yuan et al. COA sec. 5; LRM sec. 6.1): WDiscrete, WRange, WMarginal, WRelated.
Histograms: uniform random counts, power-law counts, and the four synthetic sets of COA sec. 5.6
(Random Alternating, Random Laplace, Random Gaussian, Random Uniform; mean 0, variance 10).
"""

from __future__ import annotations

import numpy as np

from dp.validation import DataError

_RNG_TYPES = (type(None), int, np.integer, np.random.Generator)


def _rng(random_state) -> np.random.Generator:
    if isinstance(random_state, bool) or not isinstance(random_state, _RNG_TYPES):
        raise TypeError(
            f"random_state must be None, an int seed or a numpy Generator, got {random_state!r}"
        )
    return np.random.default_rng(random_state)


def _check_size(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise DataError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def wdiscrete(m: int, n: int, p: float = 0.02, random_state=None) -> np.ndarray:
    """Return an m x n matrix of +1 (probability p) and -1 entries (LRM sec. 6.1, WDiscrete)."""
    m, n = _check_size(m, "m"), _check_size(n, "n")
    if not 0.0 <= p <= 1.0:
        raise DataError(f"p must lie in [0, 1], got {p!r}")
    return np.where(_rng(random_state).random((m, n)) < p, 1.0, -1.0)


def wrange(m: int, n: int, random_state=None) -> np.ndarray:
    """Return m range queries: row i is 1 on [a_i, b_i] (inclusive), endpoints two uniform draws.

    All m first endpoints are drawn, then all m second ones (the order of the published anchors).
    """
    m, n = _check_size(m, "m"), _check_size(n, "n")
    rng = _rng(random_state)
    first = rng.integers(0, n, size=m)
    ends = np.sort(np.column_stack([first, rng.integers(0, n, size=m)]), axis=1)
    cells = np.arange(n)
    return ((cells >= ends[:, :1]) & (cells <= ends[:, 1:])).astype(np.float64)


def marginal_domain(n: int) -> list[int]:
    """Return the attribute sizes of a domain of n cells: the prime factors of n (at least two)."""
    n = _check_size(n, "n", 4)
    sizes, rest, f = [], n, 2
    while f * f <= rest:
        while rest % f == 0:
            sizes.append(f)
            rest //= f
        f += 1
    if rest > 1:
        sizes.append(rest)
    if len(sizes) < 2:
        raise DataError(f"WMarginal needs a domain with at least two attributes; n={n} is prime")
    return sizes


def wmarginal(m: int, n: int, random_state=None) -> np.ndarray:
    """Return m queries drawn uniformly from all cells of all two-way marginals (COA sec. 5).

    The n cells are the cross product of attributes whose sizes are the prime factors of n
    (n = 512: nine binary attributes). A query counts the records with attribute i = a and
    attribute j = b.
    """
    m = _check_size(m, "m")
    sizes = marginal_domain(n)
    cells = np.indices(sizes).reshape(len(sizes), -1)  # attribute values of every cell
    queries = [
        (i, j, a, b)
        for i in range(len(sizes))
        for j in range(i + 1, len(sizes))
        for a in range(sizes[i])
        for b in range(sizes[j])
    ]
    pick = _rng(random_state).integers(0, len(queries), size=m)
    W = np.empty((m, cells.shape[1]))
    for row, k in enumerate(pick):
        i, j, a, b = queries[k]
        W[row] = (cells[i] == a) & (cells[j] == b)
    return W


def wrelated(m: int, n: int, s: int | None = None, random_state=None) -> np.ndarray:
    """Return W = C B with C (m x s) and B (s x n) standard normal (LRM sec. 6.1, WRelated).

    s defaults to min(m, n) // 2; rank(W) = s almost surely.
    """
    m, n = _check_size(m, "m"), _check_size(n, "n")
    s = max(min(m, n) // 2, 1) if s is None else _check_size(s, "s")
    rng = _rng(random_state)
    C = rng.standard_normal((m, s))
    return C @ rng.standard_normal((s, n))


WORKLOADS = {"discrete": wdiscrete, "range": wrange, "marginal": wmarginal, "related": wrelated}


def make_workload(kind: str, m: int, n: int, random_state=None, **options) -> np.ndarray:
    """Return the workload named `kind` ("discrete", "range", "marginal", "related")."""
    if kind not in WORKLOADS:
        raise ValueError(f"unknown workload {kind!r}; choose one of {', '.join(WORKLOADS)}")
    return WORKLOADS[kind](m, n, random_state=random_state, **options)


def random_histogram(n: int, high: int = 100, random_state=None) -> np.ndarray:
    """Return n counts drawn uniformly from {0, ..., high}."""
    n = _check_size(n, "n")
    return _rng(random_state).integers(0, high + 1, size=n).astype(np.float64)


def power_law_histogram(
    n: int, total: int = 100_000, exponent: float = 1.5, random_state=None
) -> np.ndarray:
    """Return n counts of `total` records whose cell popularity falls as rank**-exponent (shuffled)."""
    n = _check_size(n, "n")
    rng = _rng(random_state)
    weights = np.arange(1, n + 1, dtype=np.float64) ** -float(exponent)
    return rng.multinomial(total, rng.permutation(weights / weights.sum())).astype(np.float64)


def synthetic_histogram(kind: str, n: int, random_state=None) -> np.ndarray:
    """Return one of the synthetic sets of COA sec. 5.6 ("alternating", "laplace", "gaussian", "uniform").

    "alternating": the values 0 and 10 alternating (random phase); the others: i.i.d. draws with
    mean 0 and variance 10 from the Laplace, Gaussian and uniform distributions.
    """
    n = _check_size(n, "n")
    rng = _rng(random_state)
    if kind == "alternating":
        return 10.0 * ((np.arange(n) + rng.integers(0, 2)) % 2)
    if kind == "laplace":
        return rng.laplace(0.0, np.sqrt(5.0), size=n)  # variance 2 b^2 = 10
    if kind == "gaussian":
        return rng.normal(0.0, np.sqrt(10.0), size=n)
    if kind == "uniform":
        return rng.uniform(-np.sqrt(30.0), np.sqrt(30.0), size=n)  # variance a^2 / 3 = 10
    raise ValueError(
        f"unknown synthetic histogram {kind!r}; choose alternating, laplace, gaussian or uniform"
    )
