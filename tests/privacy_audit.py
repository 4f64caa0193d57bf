"""Empirical privacy check of one release on a pair of neighbouring datasets.

The threshold test of privacy audits (Jagielski, Ullman and Oprea 2020; Nasr et al. 2021): run the
mechanism many times on D and on D', reduce each output to one number S, and for an event
E = {S > t} (or {S <= t}) compare P[E | D] with P[E | D']. (epsilon, delta)-DP requires, for
every event, P[E | D] <= e^epsilon P[E | D'] + delta, so

    epsilon >= ln((P[E | D] - delta) / P[E | D']).

The event is chosen on a held-out part of the samples and tested on the rest. Choosing on the
same samples that are then tested would need a Bonferroni split over every candidate (so only a
few thresholds, the 1-99 % quantiles, could be afforded, and the tails that matter for Gaussian
releases were out of reach); held out, any number of candidates, reaching into both tails, costs
nothing: one event is tested, with a Clopper-Pearson lower bound on P[E | D] and an upper bound
on P[E | D'], each one-sided at (1 - confidence) / 2. By the union bound both hold with
probability >= confidence, and then the value is a lower bound on the true epsilon: a release
whose bound exceeds the epsilon it claims is a measured leak.
"""

import numpy as np
from scipy.special import expit, logit
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


def one_sided_alpha(confidence: float, n_events: int = 1) -> float:
    """Return the level of each one-sided bound: two per tested event share 1 - confidence."""
    return (1.0 - confidence) / (2 * n_events)


def _event_bounds(first, second, thresholds, delta, alpha):
    """Return the bound ln((low_first - delta) / high_second) for every event, both kinds.

    Events: S > t and S <= t for each threshold; `first` and `second` are sorted samples. Each
    Clopper-Pearson bound is one-sided at `alpha` (the two-sided interval at 2 alpha).
    """
    above_first = first.size - np.searchsorted(first, thresholds, side="right")
    above_second = second.size - np.searchsorted(second, thresholds, side="right")
    out = []
    for count_first, count_second in (
        (above_first, above_second),
        (first.size - above_first, second.size - above_second),
    ):
        low, _ = clopper_pearson(count_first, first.size, 2 * alpha)
        _, high = clopper_pearson(count_second, second.size, 2 * alpha)
        numerator = low - delta
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where((numerator > 0) & (high > 0), np.log(numerator / high), -np.inf)
        out.append(value)
    return out  # [S > t bounds, S <= t bounds]


def candidate_thresholds(samples, n_thresholds: int) -> np.ndarray:
    """Return thresholds at quantiles spread evenly in logit scale, from the smallest to the largest sample."""
    size = samples.size
    edge = 1.0 / size
    levels = expit(np.linspace(logit(edge), logit(1 - edge), n_thresholds))
    return np.unique(np.quantile(samples, levels))


def epsilon_lower_bound(
    on_d, on_d_prime, delta=0.0, confidence=0.95, n_thresholds=400, holdout=0.5
):
    """Return a `confidence`-level lower bound on the epsilon of a release, from samples of S on D and D'.

    The first `holdout` fraction of each sample (iid draws, so a split by position is a random
    split) chooses the event: thresholds at `n_thresholds` quantiles of the pooled held-out
    samples (logit-spaced, so both tails are reached), events S > t and S <= t, in both
    directions (D against D' and D' against D); the event with the largest bound there (at the
    level of a Bonferroni split over all candidates, so that it rests on enough counts) is then
    tested once on the remaining samples, at `confidence` (module docstring). The choice never
    sees the test part, so the candidates cost no confidence.
    """
    on_d = np.asarray(on_d, dtype=float).ravel()
    on_d_prime = np.asarray(on_d_prime, dtype=float).ravel()
    cut_d, cut_d_prime = int(holdout * on_d.size), int(holdout * on_d_prime.size)
    choose = (np.sort(on_d[:cut_d]), np.sort(on_d_prime[:cut_d_prime]))
    test = (np.sort(on_d[cut_d:]), np.sort(on_d_prime[cut_d_prime:]))
    alpha = one_sided_alpha(confidence)
    thresholds = candidate_thresholds(np.concatenate(choose), n_thresholds)
    # choose by the bound a Bonferroni split over every candidate would give: it favours events
    # with enough counts to hold up on the test part, where the largest plain bound is mostly luck
    choosing_alpha = one_sided_alpha(confidence, 4 * thresholds.size)
    best, event = -np.inf, None
    for order in ((0, 1), (1, 0)):
        values = _event_bounds(
            choose[order[0]], choose[order[1]], thresholds, delta, choosing_alpha
        )
        for kind, value in enumerate(values):
            k = int(np.argmax(value))
            if value[k] > best:
                best, event = value[k], (order, kind, thresholds[k])
    if event is None:
        return 0.0
    order, kind, threshold = event
    bound = _event_bounds(test[order[0]], test[order[1]], np.array([threshold]), delta, alpha)
    return max(0.0, float(bound[kind][0]))
