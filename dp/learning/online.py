"""DP-onlineGDwS: smoothed gradient descent over disjoint buckets, one pass (thesis 4.3.1, Fig. 4.13).

Bucket t holds records [t b, (t + 1) b); every record is read once, so by parallel composition
each release is epsilon-DP on its own and the run is epsilon-DP (as in Song et al. [76]). The
number of iterations is n // b, not a free parameter.
"""

from __future__ import annotations

from dp.learning.gdws import smoothed_descent
from dp.learning.sampling import DisjointBuckets
from dp.learning.settings import RunSettings


def dp_online_gdws(settings: RunSettings):
    """Return (stages, batches, cost) of DP-onlineGDwS with buckets of batch_size records."""
    n, b = settings.problem.n, settings.batch_size
    if not settings.sampled:
        raise ValueError("dp-onlinegdws needs batch_size < n (the bucket size)")
    stages, cost = smoothed_descent(settings, n // b, disjoint=True)
    return stages, DisjointBuckets(n, b), cost
