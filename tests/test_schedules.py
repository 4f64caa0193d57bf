"""SETSCHEDULE (thesis sec. 3.4): det and stoc subset orders, checked against the thesis' K = 5 table."""

import numpy as np
import pytest

from hamsi.schedules import hamsi_cycle, mbgd_epoch


def one_based(cycle):
    return [int(k) + 1 for k in cycle]


def test_det_matches_the_thesis_table():
    rng = np.random.default_rng(0)
    assert one_based(hamsi_cycle("det", 5, 3, rng)) == [3, 4, 5, 1, 2, 3]
    assert one_based(hamsi_cycle("det", 5, 4, rng)) == [4, 5, 1, 2, 3, 4]
    # The table prints [5, 1, 2, 3, 4, 1]; Alg. 3 and the text repeat the first subset last.
    assert one_based(hamsi_cycle("det", 5, 5, rng)) == [5, 1, 2, 3, 4, 5]
    assert one_based(hamsi_cycle("det", 5, 6, rng)) == [1, 2, 3, 4, 5, 1]
    assert one_based(hamsi_cycle("det", 5, 1, rng)) == [
        1,
        2,
        3,
        4,
        5,
        1,
    ]  # Alg. 3's [K, 1..K] shifted once


def test_stoc_is_a_fresh_shuffle_with_first_repeated_last():
    rng = np.random.default_rng(7)
    cycles = [hamsi_cycle("stoc", 5, t, rng) for t in range(1, 30)]
    for cycle in cycles:
        assert cycle.size == 6 and cycle[0] == cycle[-1]
        assert sorted(cycle[:-1]) == [0, 1, 2, 3, 4]
    assert len({tuple(c) for c in cycles}) > 10  # reshuffled each cycle


def test_stoc_is_reproducible_from_the_rng():
    first = [hamsi_cycle("stoc", 7, t, np.random.default_rng(3)) for t in (1, 2)]
    second = [hamsi_cycle("stoc", 7, t, np.random.default_rng(3)) for t in (1, 2)]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_mbgd_epochs_visit_each_subset_once():
    rng = np.random.default_rng(1)
    assert one_based(mbgd_epoch("det", 5, 3, rng)) == [3, 4, 5, 1, 2]
    assert sorted(mbgd_epoch("stoc", 5, 1, rng)) == [0, 1, 2, 3, 4]


def test_unknown_schedule():
    with pytest.raises(ValueError, match="unknown schedule"):
        hamsi_cycle("random", 3, 1, np.random.default_rng(0))
