"""The threshold test itself: a lower bound that is tight on Laplace noise and never above the truth
with the stated confidence."""

import numpy as np
import pytest
from privacy_audit import clopper_pearson, epsilon_lower_bound, one_sided_alpha

import dp


def test_clopper_pearson_matches_the_closed_form_at_the_ends():
    low, high = clopper_pearson(np.array([0, 10]), 10, 0.05)
    assert low[0] == 0.0 and high[1] == 1.0
    assert high[0] == pytest.approx(1 - 0.025 ** (1 / 10))  # (alpha/2)^(1/n) closed form
    assert low[1] == pytest.approx(0.025 ** (1 / 10))


@pytest.mark.parametrize("events", [1, 3, 160])
def test_the_one_sided_bounds_of_all_tested_events_share_exactly_one_minus_confidence(events):
    # two one-sided bounds per event; the old split gave each (1 - c) / (4 T) over 4 T events: 90 %
    assert 2 * events * one_sided_alpha(0.95, events) == pytest.approx(0.05)


def _randomized_response_audits(confidence, audits=300, n=1000, epsilon=1.0, seed=0):
    """Return the fraction of audits whose bound exceeds the true epsilon of randomized response.

    One bit, P[1 | D] = e^eps / (1 + e^eps), P[1 | D'] = 1 / (1 + e^eps): the event {S > 0}
    reaches the true epsilon exactly, so the bound exceeds it only when a confidence bound fails.
    """
    rng = np.random.default_rng(seed)
    p = np.exp(epsilon) / (1 + np.exp(epsilon))
    above = 0
    for _ in range(audits):
        on_d = (rng.random(n) < p).astype(float)
        on_d_prime = (rng.random(n) < 1 - p).astype(float)
        above += epsilon_lower_bound(on_d, on_d_prime, confidence=confidence) > epsilon
    return above / audits


def test_the_bound_exceeds_the_truth_in_at_most_5_percent_of_audits_at_95_percent():
    assert _randomized_response_audits(0.95) <= 0.05
    # and the check has power: an over-confident helper (50 %) is caught by the same count
    assert _randomized_response_audits(0.5, seed=1) > 0.05


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_laplace_release_bound_is_below_and_close_to_its_epsilon(epsilon):
    rng = np.random.default_rng(0)
    on_d = rng.laplace(0.0, 1 / epsilon, 100_000)
    on_d_prime = rng.laplace(1.0, 1 / epsilon, 100_000)  # sensitivity 1
    bound = epsilon_lower_bound(on_d, on_d_prime)
    assert 0.85 * epsilon < bound <= epsilon


def test_half_the_noise_is_caught():
    rng = np.random.default_rng(1)
    bound = epsilon_lower_bound(rng.laplace(0.0, 0.5, 100_000), rng.laplace(1.0, 0.5, 100_000))
    assert bound > 1.5  # claimed 1, true 2


def test_a_gaussian_release_with_half_its_noise_is_caught_in_the_tail():
    # a (1, 1e-5) analytic Gaussian with half its noise: thresholds chosen on held-out samples
    # reach the tail where the loss shows; 50000 releases per side, the claim 1 is exceeded
    full = dp.analytic_gaussian_sigma(1.0, 1e-5, 1.0)
    rng = np.random.default_rng(3)
    on_d, on_d_prime = rng.normal(0.0, full / 2, 50_000), rng.normal(1.0, full / 2, 50_000)
    assert epsilon_lower_bound(on_d, on_d_prime, delta=1e-5) > 1.0
    honest = epsilon_lower_bound(rng.normal(0, full, 50_000), rng.normal(1, full, 50_000), 1e-5)
    assert honest <= 1.0


def test_delta_lowers_the_bound():
    rng = np.random.default_rng(2)
    on_d, on_d_prime = rng.normal(0, 1, 50_000), rng.normal(1, 1, 50_000)
    assert epsilon_lower_bound(on_d, on_d_prime, delta=1e-2) < epsilon_lower_bound(on_d, on_d_prime)
