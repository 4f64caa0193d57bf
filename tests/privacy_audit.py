"""Empirical privacy check of one release on a pair of neighbouring datasets.

The threshold test of privacy audits (Jagielski, Ullman and Oprea 2020; Nasr et al. 2021): run the
mechanism many times on D and on D', reduce each output to one number S, and for a threshold t
compare P[S > t | D] with P[S > t | D']. (epsilon, delta)-DP requires, for every event E,
P[E | D] <= e^epsilon P[E | D'] + delta, so

    epsilon >= ln((P[E | D] - delta) / P[E | D']).

With Clopper-Pearson bounds (lower on the numerator, upper on the denominator) and a Bonferroni
split of the confidence over every threshold and direction tried, the largest such value is a
lower bound on the true epsilon that holds with the stated confidence. A release whose bound
exceeds the epsilon it claims is a measured leak.
"""

import numpy as np
from scipy.stats import beta as beta_distribution


def clopper_pearson(successes, trials, alpha):
    """Return the two-sided (1 - alpha) Clopper-Pearson interval (low, high) for a binomial proportion."""
    successes = np.asarray(successes, dtype=float)
    low = np.where(
        successes > 0, beta_distribution.ppf(alpha / 2, successes, trials - successes + 1), 0.0
    )
    high = np.where(
        successes < trials,
        beta_distribution.ppf(1 - alpha / 2, successes + 1, trials - successes),
        1.0,
    )
    return low, high


def epsilon_lower_bound(on_d, on_d_prime, delta=0.0, confidence=0.95, n_thresholds=40):
    """Return a `confidence`-level lower bound on the epsilon of a release, from samples of S on D and D'.

    Thresholds are quantiles of the pooled samples; the events are S > t and S <= t, in both
    directions (D against D' and D' against D): 4 n_thresholds tests share alpha by Bonferroni.
    """
    on_d = np.asarray(on_d, dtype=float).ravel()
    on_d_prime = np.asarray(on_d_prime, dtype=float).ravel()
    pooled = np.concatenate([on_d, on_d_prime])
    thresholds = np.unique(np.quantile(pooled, np.linspace(0.01, 0.99, n_thresholds)))
    alpha = (1 - confidence) / (4 * thresholds.size)
    best = 0.0
    for first, second in ((on_d, on_d_prime), (on_d_prime, on_d)):
        above_first = (first[:, None] > thresholds).sum(axis=0)
        above_second = (second[:, None] > thresholds).sum(axis=0)
        for count_first, count_second in (
            (above_first, above_second),
            (first.size - above_first, second.size - above_second),
        ):
            low, _ = clopper_pearson(count_first, first.size, 2 * alpha)  # one-sided at alpha
            _, high = clopper_pearson(count_second, second.size, 2 * alpha)
            numerator = low - delta
            usable = (numerator > 0) & (high > 0)
            if usable.any():
                best = max(best, float(np.log(numerator[usable] / high[usable]).max()))
    return best
