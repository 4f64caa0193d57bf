"""dp.queries: batches of linear queries W x under differential privacy (matrix mechanism family).

Strategies: identity (noise the counts), workload (noise W x), hierarchical, wavelet, and COA
(Yuan, Yang, Zhang and Hao: the optimal strategy under (epsilon, delta)-DP by a convex program).
"""

from dp.queries.api import (
    METHODS,
    Answers,
    answer,
    check_workload,
    expected_error,
    noise_variance,
    optimize,
)
from dp.queries.strategy import Certificate, Iteration, Strategy
from dp.queries.workloads import (
    make_workload,
    power_law_histogram,
    random_histogram,
    synthetic_histogram,
    wdiscrete,
    wmarginal,
    wrange,
    wrelated,
)

__all__ = [
    "METHODS",
    "Answers",
    "answer",
    "check_workload",
    "expected_error",
    "noise_variance",
    "optimize",
    "Certificate",
    "Iteration",
    "Strategy",
    "make_workload",
    "power_law_histogram",
    "random_histogram",
    "synthetic_histogram",
    "wdiscrete",
    "wmarginal",
    "wrange",
    "wrelated",
]
