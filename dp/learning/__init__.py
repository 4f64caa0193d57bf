"""Private gradient methods for smooth, strongly convex learning (N. Kuru's thesis, ch. 4).

DP-GDwS (Alg. 4), DP-MAG (Alg. 5), DP-SGDwS (Alg. 6), DP-onlineGDwS, DP-SMAG (Alg. 7), the
baselines of its figures, Gaussian (zCDP / RDP) variants and DP-SGD. One algorithm per module;
every method runs the momentum loop of dp.learning.iterations.
"""

from dp.learning.api import ALL_METHODS, PrivateMinimizeResult, minimize_private
from dp.learning.estimator import PrivateLogisticRegression
from dp.learning.problems import LeastSquaresProblem, LogisticProblem, make_problem

__all__ = [
    "ALL_METHODS",
    "PrivateMinimizeResult",
    "minimize_private",
    "PrivateLogisticRegression",
    "LeastSquaresProblem",
    "LogisticProblem",
    "make_problem",
]
