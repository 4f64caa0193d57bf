"""DP-SMAG: DP-MAG on uniform m-of-n samples (thesis Alg. 7, section 4.3.2).

Per release eps0 amplified from eps / (K n_k) as in (4.57) (Thm 4.1.5, or 4.1.4 above 1); step
(4.59) adds the sampling variance (1 - (m-1)/(n-1)) S2^2 / (4 d m) (mean scale) to (4.43).
"""

from __future__ import annotations

from dp.learning.mag import private_multistage
from dp.learning.settings import RunSettings


def dp_smag(settings: RunSettings):
    """Return (stages, batches, cost) of DP-SMAG."""
    if not settings.sampled:
        raise ValueError("dp-smag needs batch_size < n (use dp-mag for full gradients)")
    stages, cost = private_multistage(settings)
    return stages, settings.batches(), cost
