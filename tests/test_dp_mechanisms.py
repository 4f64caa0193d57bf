"""Samplers, calibration and mechanisms: exact laws, Balle-Wang condition, privacy audit."""

import math

import numpy as np
import pytest
from scipy import stats

import dp
from dp._random import RandomBits
from dp.discrete import discrete_gaussian, discrete_laplace

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


def _discrete_laplace_cdf(scale):
    q = math.exp(-1.0 / scale)

    def cdf(k):
        k = np.floor(k)
        # P[Z <= k] for P[Z = z] = (1 - q)/(1 + q) q^|z|
        return np.where(k < 0, q ** (-k) / (1 + q), 1 - q ** (k + 1) / (1 + q))

    return cdf


def test_discrete_laplace_matches_its_pmf_exactly_on_small_scale():
    draws = discrete_laplace(3, 200_000, RandomBits(1))
    q = math.exp(-1 / 3)
    support = np.arange(-6, 7)
    expected = (1 - q) / (1 + q) * q ** np.abs(support)
    observed = np.array([(draws == k).mean() for k in support])
    assert np.allclose(observed, expected, atol=4 * np.sqrt(expected / 200_000) + 1e-4)


def test_discrete_gaussian_matches_its_pmf_on_small_sigma():
    sigma = 2
    draws = discrete_gaussian(sigma, 100_000, RandomBits(2))
    support = np.arange(-12, 13)
    weights = np.exp(-(support.astype(float) ** 2) / (2 * sigma**2))
    expected = weights / weights.sum()
    counts = np.array([(draws == k).sum() for k in support])
    # lump the far tails (|z| > 12, mass < 1e-7) into the end bins so the totals agree
    counts[0] += (draws < -12).sum()
    counts[-1] += (draws > 12).sum()
    _, pvalue = stats.chisquare(counts, expected * counts.sum())
    assert pvalue > 1e-3


def test_laplace_release_is_laplace_distributed_ks():
    rel = dp.laplace_mechanism(np.zeros(50_000), 1.0, 0.5, random_state=3)
    b = rel.noise_scale
    # sensitivity/epsilon, inflated by d * grid step to cover rounding onto the grid
    assert b == pytest.approx((1.0 + 50_000 * rel.granularity) / 0.5, rel=1e-8)
    assert rel.granularity < 2.0 * 2.0**-29
    assert stats.kstest(rel.values, stats.laplace(scale=b).cdf).pvalue > 1e-3
    # every value sits on the grid: a pure function of an integer, nothing below it leaks
    assert np.all(np.mod(rel.values / rel.granularity, 1.0) == 0)


def test_gaussian_release_is_gaussian_distributed_ks():
    rel = dp.gaussian_mechanism(np.zeros(50_000), 1.0, 0.5, 1e-5, random_state=4)
    assert rel.noise_scale == pytest.approx(dp.analytic_gaussian_sigma(0.5, 1e-5, 1.0), rel=1e-4)
    assert stats.kstest(rel.values, stats.norm(scale=rel.noise_scale).cdf).pvalue > 1e-3


def test_seeded_draws_repeat_and_secure_default_differs():
    a = dp.laplace_mechanism(np.zeros(10), 1.0, 1.0, random_state=7).values
    b = dp.laplace_mechanism(np.zeros(10), 1.0, 1.0, random_state=7).values
    c = dp.laplace_mechanism(np.zeros(10), 1.0, 1.0).values
    d = dp.laplace_mechanism(np.zeros(10), 1.0, 1.0).values
    assert np.array_equal(a, b)
    assert not np.array_equal(c, d)
    assert RandomBits(None).secure and not RandomBits(0).secure


@pytest.mark.parametrize(
    "eps,delta", [(0.1, 1e-5), (0.5, 1e-3), (1.0, 1e-5), (2.0, 0.01), (8.0, 1e-9)]
)
def test_analytic_sigma_meets_balle_wang_condition(eps, delta):
    sigma = dp.analytic_gaussian_sigma(eps, delta, 1.0)
    assert dp.gaussian_delta(sigma, eps, 1.0) <= delta
    assert dp.gaussian_delta(sigma, eps, 1.0) == pytest.approx(delta, abs=1e-9, rel=1e-9)
    # and it is the smallest such sigma: a little less noise breaks the condition
    assert dp.gaussian_delta(sigma * (1 - 1e-6), eps, 1.0) > delta
    if eps < 1:
        assert sigma < dp.classical_gaussian_sigma(eps, delta, 1.0)
    # sensitivity enters linearly
    assert dp.analytic_gaussian_sigma(eps, delta, 3.0) == pytest.approx(3 * sigma, rel=1e-12)


def test_classical_sigma_formula_and_refusal_above_one():
    assert dp.classical_gaussian_sigma(0.5, 1e-5, 2.0) == pytest.approx(
        2 * math.sqrt(2 * math.log(1.25e5)) / 0.5
    )
    with pytest.raises(ValueError, match="epsilon < 1"):
        dp.classical_gaussian_sigma(1.2, 1e-5, 1.0)
    assert dp.gaussian_sigma(1.2, 1e-5, 1.0, "paper") == dp.analytic_gaussian_sigma(1.2, 1e-5, 1.0)
    assert dp.gaussian_sigma(0.5, 1e-5, 1.0, "paper") == dp.classical_gaussian_sigma(0.5, 1e-5, 1.0)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_bad_epsilon_is_refused(bad):
    with pytest.raises(ValueError):
        dp.laplace_mechanism(np.zeros(3), 1.0, bad)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan")])
def test_bad_delta_is_refused(bad):
    with pytest.raises(ValueError):
        dp.gaussian_mechanism(np.zeros(3), 1.0, 1.0, bad)
    with pytest.raises(ValueError):
        dp.gaussian_mechanism(np.zeros(3), 1.0, 1.0, 0.0)  # Gaussian needs delta > 0


# --- privacy audit -------------------------------------------------------------------------


def _laplace_audit_epsilon(scale_divisor, n_draws=200_000):
    """Empirical max |log P[M(D) in bin] / P[M(D') in bin]| for a query at sensitivity 1."""
    eps = 1.0

    def draw(value, seed):
        rel = dp.laplace_mechanism(np.full(n_draws, value), 1.0, eps, random_state=seed)
        # the under-noised variant shrinks the calibrated noise, as a buggy mechanism would
        return value + (rel.values - value) / scale_divisor

    a, b = draw(0.0, 11), draw(1.0, 12)
    edges = np.linspace(-3, 4, 29)
    ca, _ = np.histogram(a, edges)
    cb, _ = np.histogram(b, edges)
    enough = (ca > 2000) & (cb > 2000)  # bins with small relative error only
    ratio = np.log(ca[enough] / cb[enough])
    return np.abs(ratio).max()


def test_privacy_audit_laplace_stays_within_epsilon():
    assert _laplace_audit_epsilon(1.0) <= 1.0 + 0.1


def test_privacy_audit_catches_an_under_noised_mechanism():
    assert _laplace_audit_epsilon(3.0) > 1.0 + 0.1


def _gaussian_audit_delta(scale_divisor, eps=1.0, delta=1e-2, n_draws=100_000):
    """Empirical max_t P[M(D) > t] - e^eps P[M(D') > t] over thresholds (must stay <= delta)."""

    def draw(value, seed):
        rel = dp.gaussian_mechanism(np.full(n_draws, value), 1.0, eps, delta, random_state=seed)
        return value + (rel.values - value) / scale_divisor

    a, b = np.sort(draw(1.0, 21)), np.sort(draw(0.0, 22))
    ts = np.linspace(-1, 6, 141)
    pa = 1 - np.searchsorted(a, ts, side="right") / n_draws
    pb = 1 - np.searchsorted(b, ts, side="right") / n_draws
    return np.max(pa - math.exp(eps) * pb)


def test_privacy_audit_gaussian_stays_within_delta():
    assert _gaussian_audit_delta(1.0) <= 1e-2 + 3e-3


def test_privacy_audit_gaussian_catches_an_under_noised_mechanism():
    assert _gaussian_audit_delta(3.0) > 1e-2 + 3e-3


# --- goodness of fit at several scales; calibration against a published implementation ------------


def _chisquare_pvalue(draws, cdf, n_bins=40):
    """Chi-square p-value of integer draws against an exact CDF, on bins of about equal mass."""
    lo, hi = np.percentile(draws, [0.5, 99.5])
    edges = np.unique(np.round(np.linspace(lo, hi, n_bins + 1)))  # bin k is (edges[k-1], edges[k]]
    cuts = np.concatenate([[-np.inf], edges[1:-1], [np.inf]])
    observed = np.histogram(draws, bins=np.concatenate([[-np.inf], edges[1:-1] + 0.5, [np.inf]]))[0]
    probs = np.diff(np.concatenate([[0.0], cdf(cuts[1:-1]), [1.0]]))
    return stats.chisquare(observed, probs * draws.size).pvalue


@pytest.mark.parametrize("scale", [1, 3, 40, 1000, 10**7, 2**45])
def test_discrete_laplace_fits_its_law_at_every_scale(scale):
    draws = discrete_laplace(scale, 40_000, RandomBits(scale % 1000 + 1))
    q = math.exp(-1.0 / scale)

    # P[Z <= k] for P[Z = z] = (1 - q)/(1 + q) q^|z|, written with expm1 so huge scales keep digits
    def cdf(k):
        k = np.floor(k)
        tail = np.exp(-(np.abs(k) + (k >= 0)) / scale) / (1 + q)
        return np.where(k < 0, tail, 1 - tail)

    assert _chisquare_pvalue(draws, cdf) > 1e-3
    # and the mean absolute value, in closed form 2q / (1 - q^2)
    assert np.abs(draws).mean() == pytest.approx(2 * q / (-np.expm1(-2.0 / scale)), rel=0.03)


@pytest.mark.parametrize("sigma", [1, 2, 7, 300, 2**20, 2**30])
def test_discrete_gaussian_fits_its_law_at_every_scale(sigma):
    draws = discrete_gaussian(sigma, 40_000, RandomBits(sigma % 997 + 5))
    if sigma <= 300:
        support = np.arange(-15 * sigma, 15 * sigma + 1)
        pmf = np.exp(-(support.astype(float) ** 2) / (2.0 * sigma**2))
        cum = np.cumsum(pmf / pmf.sum())
        cdf = lambda k: cum[np.clip(np.floor(k).astype(np.int64) + 15 * sigma, 0, cum.size - 1)]  # noqa: E731
    else:
        # for sigma >= 3 the discrete Gaussian's CDF is Phi((k + 1/2)/sigma) up to ~exp(-2 pi^2 sigma^2)
        cdf = lambda k: stats.norm.cdf((np.floor(k) + 0.5) / sigma)  # noqa: E731
    assert _chisquare_pvalue(draws, cdf) > 1e-3
    assert stats.kstest(draws / sigma, "norm").pvalue > 1e-3 if sigma >= 300 else True


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 7.0])
def test_laplace_release_fits_laplace_at_several_scales_ks(epsilon):
    rel = dp.laplace_mechanism(np.full(30_000, 5.0), 2.0, epsilon, random_state=int(epsilon * 10))
    # sensitivity / epsilon, inflated by d * grid step for the rounding onto the grid
    assert rel.noise_scale == pytest.approx((2.0 + 30_000 * rel.granularity) / epsilon, rel=1e-8)
    assert stats.kstest(rel.values - 5.0, stats.laplace(scale=rel.noise_scale).cdf).pvalue > 1e-3


@pytest.mark.parametrize("epsilon,delta", [(0.1, 1e-6), (1.0, 1e-5), (5.0, 1e-3)])
def test_gaussian_release_fits_normal_at_several_scales_ks(epsilon, delta):
    rel = dp.gaussian_mechanism(
        np.full(30_000, -3.0), 0.5, epsilon, delta, random_state=int(epsilon * 10)
    )
    assert stats.kstest(rel.values + 3.0, stats.norm(scale=rel.noise_scale).cdf).pvalue > 1e-3


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 1.0, 2.0, 10.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-2])
def test_analytic_sigma_matches_googles_balle_wang_implementation(epsilon, delta):
    # dp-accounting's get_sigma_gaussian is Google's implementation of Balle-Wang 2018 eq. (6)
    from dp_accounting import get_sigma_gaussian

    reference = get_sigma_gaussian(epsilon, delta, tol=1e-14)
    ours = dp.analytic_gaussian_sigma(epsilon, delta, 1.0)
    assert ours == pytest.approx(reference, rel=1e-8)
    assert dp.analytic_gaussian_sigma(epsilon, delta, 2.5) == pytest.approx(
        2.5 * reference, rel=1e-8
    )


# --- exact discrete sampling, messages that say what, not where -----------------------------------


class _ScriptedBits:
    """Uniform words fixed by the test, and every value of below_big(bound) in turn (exact enumeration)."""

    def __init__(self, word, bound):
        self.word, self.values, self.bound = word, iter(range(bound)), bound

    def words(self, n):
        return np.full(n, self.word, dtype=np.uint64)

    def below_big(self, bound):
        assert bound == self.bound
        return next(self.values)


@pytest.mark.parametrize("r,den", [(1, 7), (3, 7), (1, 6), (5, 11)])
def test_bernoulli_rational_is_exact_when_the_word_straddles_r_over_den(r, den):
    # item 10: the one 64-bit word W with W den < r 2^64 < (W + 1) den used to be decided by a fresh
    # uniform against r/den; given W the probability is (r 2^64 - W den)/den. Enumerating every value
    # the big uniform can take gives that conditional probability exactly.
    from dp.discrete import _bernoulli_rational_big

    word = (r << 64) // den
    k = (r << 64) - word * den
    assert 0 < k < den and k != r  # a straddling word, where the old rule differs
    outcomes = [
        bool(
            _bernoulli_rational_big(
                np.array([r], dtype=object), np.array([den], dtype=object), bits
            )[0]
        )
        for bits in [_ScriptedBits(word, den)]
        for _ in range(den)
    ]
    assert sum(outcomes) == k  # P[B | W] = k / den: overall P[B] = r / den exactly


def test_bernoulli_rational_big_straddle_with_a_large_denominator():
    from dp.discrete import _bernoulli_rational_big

    r, den = 2**40 + 3, 2**41 + 1
    word = (r << 64) // den
    k = (r << 64) - word * den

    class Bits:
        def words(self, n):
            return np.full(n, word, dtype=np.uint64)

        def below_big(self, bound):
            return self.value

    bits = Bits()
    for value, expected in ((k - 1, True), (k, False), (0, True), (den - 1, False)):
        bits.value = value
        assert (
            bool(
                _bernoulli_rational_big(
                    np.array([r], dtype=object), np.array([den], dtype=object), bits
                )[0]
            )
            is expected
        )


def test_mechanism_errors_never_quote_the_values():
    # item 5: laplace_mechanism([123456789012.5], 1, 1) used to print the maximum in its message
    laplace = lambda v: dp.laplace_mechanism(v, 1.0, 1.0, random_state=0)  # noqa: E731
    gaussian = lambda v: dp.gaussian_mechanism(v, 1.0, 1.0, 1e-5, random_state=0)  # noqa: E731
    for release, values in (
        (laplace, [123456789012.5]),
        (laplace, [1.5e15, 2.0]),
        (gaussian, [1.5e15, 2.0]),
        (laplace, [float("nan"), 7.25]),
        (gaussian, [7.25, float("inf")]),
    ):
        with pytest.raises(ValueError) as info:
            release(values)
        text = str(info.value)
        assert "123456789" not in text and "1.23457e+11" not in text and "1.5e+15" not in text
        assert "7.25" not in text and "nan" not in text.lower() and "inf " not in text
    # a large value inside the public limit is released, not refused
    out = dp.laplace_mechanism([1.0e9], 1.0, 1.0, random_state=0).values[0]
    assert abs(out - 1.0e9) < 100
