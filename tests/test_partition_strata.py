"""STRATA and STRATA-B: grid structure, balance on skewed data (thesis Fig. 3.4)."""

import numpy as np
import pytest

import partition
from partition.strata import balanced_bounds, equal_length_bounds
from partition.testing import power_law_ratings, random_ratings


def test_equal_length_bounds_cover_the_range():
    assert equal_length_bounds(10, 3).tolist() == [0, 3, 6, 10]


def test_balanced_bounds_hold_about_a_fair_share_each():
    index = np.repeat(np.arange(8), [5, 5, 5, 5, 1, 1, 1, 17])  # 40 entries
    bounds = balanced_bounds(index, 8, 4)
    counts = np.add.reduceat(np.bincount(index, minlength=8), bounds[:-1])
    assert bounds[0] == 0 and bounds[-1] == 8
    assert counts.tolist() == [10, 10, 3, 17]


def test_balanced_bounds_keep_every_interval_nonempty():
    index = np.zeros(100, dtype=np.int64)  # everything in the first row
    bounds = balanced_bounds(index, 5, 5)
    assert np.all(np.diff(bounds) >= 1)


@pytest.mark.parametrize("scheme", ["strata", "strata-b"])
def test_subset_k_holds_the_diagonal_shifted_by_k(scheme):
    ratings = random_ratings(40, 30, 300, seed=3)
    p = partition.make(scheme, ratings, blocks=3).validate()
    assert p.n_subsets == 3
    row_of = np.searchsorted(p.row_bounds, ratings.rows, side="right") - 1
    col_of = np.searchsorted(p.col_bounds, ratings.cols, side="right") - 1
    for k, subset in enumerate(p.subsets):
        for b, block in enumerate(subset):
            assert p.block_intervals[k][b] == (b, (b + k) % 3)
            assert np.all(row_of[block] == b) and np.all(col_of[block] == (b + k) % 3)


def test_strata_b_balances_power_law_data_and_strata_does_not():
    ratings = power_law_ratings(2000, 1500, 100_000, seed=1)
    plain = partition.make("strata", ratings, blocks=4).stats()
    balanced = partition.make("strata-b", ratings, blocks=4).stats()
    assert plain["imbalance"] > 1.5
    assert balanced["imbalance"] < 1.2
    assert max(balanced["block_imbalance"]) < 1.25
    assert balanced["imbalance"] < plain["imbalance"]
