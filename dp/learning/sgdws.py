"""DP-SGDwS: smoothed gradient descent on uniform m-of-n samples (thesis Alg. 6, section 4.3.1).

Noise (4.52): sigma_t = beta S1 / eps0 with eps0 = n eps / (2 m T) when that is <= 1 (Thm 4.1.5)
and eps0 = log(1 + n eps / (2 m T)) otherwise (Thm 4.1.4); step (4.55). Both live in the shared
calibration (dp.learning.accounting) and step rule (dp.learning.gdws).
"""

from __future__ import annotations

from dp.learning.gdws import smoothed_descent
from dp.learning.settings import RunSettings


def dp_sgdws(settings: RunSettings):
    """Return (stages, batches, cost) of DP-SGDwS: m uniform records per iteration."""
    if not settings.sampled:
        raise ValueError("dp-sgdws needs batch_size < n (use dp-gdws for full gradients)")
    stages, cost = smoothed_descent(settings, settings.n_iter)
    return stages, settings.batches(), cost
