"""The threshold test itself: a lower bound that is tight on Laplace noise and never above the truth."""

import numpy as np
import pytest
from privacy_audit import clopper_pearson, epsilon_lower_bound


def test_clopper_pearson_matches_the_closed_form_at_the_ends():
    low, high = clopper_pearson(np.array([0, 10]), 10, 0.05)
    assert low[0] == 0.0 and high[1] == 1.0
    assert high[0] == pytest.approx(1 - 0.025 ** (1 / 10))  # (alpha/2)^(1/n) closed form
    assert low[1] == pytest.approx(0.025 ** (1 / 10))


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


def test_delta_lowers_the_bound():
    rng = np.random.default_rng(2)
    on_d, on_d_prime = rng.normal(0, 1, 50_000), rng.normal(1, 1, 50_000)
    assert epsilon_lower_bound(on_d, on_d_prime, delta=1e-2) < epsilon_lower_bound(on_d, on_d_prime)
