"""COLOR, COLOR-B and HOGWILD: color-set balance (thesis Fig. 3.3), packing, blocks, reproducibility."""

import numpy as np
import pytest

import partition
from partition.color import color_partition, pack_first_fit, split_into_units
from partition.graph import FactorGraph
from partition.testing import power_law_ratings, random_ratings


@pytest.fixture(scope="module")
def skewed():
    return power_law_ratings(943, 1682, 100_000, seed=1)


def test_color_b_color_sets_are_much_smaller_than_first_fit(skewed):
    first_fit = partition.make("color", skewed, blocks=4).validate()
    balanced = partition.make("color-b", skewed, blocks=4, seed=1).validate()
    assert first_fit.stats()["largest_color"] > 2 * balanced.stats()["largest_color"]
    # first fit front-loads its colors; COLOR-B spreads functions evenly over the colors it uses
    sizes = np.asarray(balanced.info["color_sizes"])
    assert sizes.max() / sizes.mean() < 5
    assert first_fit.info["color_sizes"][0] == first_fit.stats()["largest_color"]


def test_color_subsets_hold_about_a_kth_of_the_ratings(skewed):
    stats = partition.make("color-b", skewed, blocks=4, subsets=20).stats()
    assert stats["subset_imbalance"] < 1.05


def test_color_b_is_reproducible_from_its_seed():
    ratings = random_ratings(50, 40, 600, seed=2)
    one = partition.make("color-b", ratings, blocks=3, seed=7)
    two = partition.make("color-b", ratings, blocks=3, seed=7)
    assert all(
        np.array_equal(a, b) for sa, sb in zip(one.subsets, two.subsets) for a, b in zip(sa, sb)
    )
    other = partition.make("color-b", ratings, blocks=3, seed=8)
    assert not np.array_equal(one.info["colors"], other.info["colors"])


def test_pack_first_fit_follows_the_thesis_rule():
    # capacity 10/2 = 5: the 4 opens bin 0, the next 1 still fits there, the 3 and 2 do not
    assert pack_first_fit(np.array([4, 1, 3, 2]), 2).tolist() == [0, 0, 1, 1]


def test_pack_first_fit_leaves_no_bin_empty():
    bins = pack_first_fit(np.array([7, 1, 1, 1]), 4)
    assert sorted(bins.tolist()) == [0, 1, 2, 3]


def test_fewer_colors_than_subsets_splits_the_largest_classes():
    colors = np.array([0, 0, 0, 0, 1, 1])
    units, sizes = split_into_units(colors, np.array([4, 2]), 4)
    assert sizes.sum() == 6 and sizes.size == 4 and sizes.max() == 2
    assert np.all(np.bincount(units) == sizes)


def test_single_color_subsets_are_split_evenly():
    # a permutation matrix has one color class: each subset is a matching, blocks are balanced
    n = 64
    ratings = partition.testing.CoordinateRatings(np.arange(n), np.roll(np.arange(n), 3), (n, n))
    p = partition.make("color", ratings, blocks=4, subsets=2).validate()
    assert p.block_sizes() == [[8, 8, 8, 8], [8, 8, 8, 8]]


def test_coloring_works_on_a_three_way_tensor():
    rng = np.random.default_rng(0)
    coords = [rng.integers(0, s, 300) for s in (6, 7, 8)]
    graph = FactorGraph.from_coordinates(coords, (6, 7, 8))
    p = color_partition(graph, (6, 7, 8), n_blocks=2, n_subsets=5, balanced=True, seed=0)
    p.graph = graph
    p.validate()
    colors = p.info["colors"]
    for c in range(p.info["n_colors"]):
        members = np.flatnonzero(colors == c)
        for mode in coords:  # one color touches each slice at most once
            assert np.unique(mode[members]).size == members.size


def test_hogwild_subsets_and_blocks_have_almost_equal_size():
    ratings = random_ratings(30, 30, 503, seed=4)
    p = partition.make("hogwild", ratings, blocks=3, subsets=7, seed=5).validate()
    sizes = np.array(p.block_sizes())
    assert sizes.max() - sizes.min() <= 1 + 1  # subsets differ by one, their thirds by one more
    assert p.stats()["subset_imbalance"] < 1.02
    assert len(p.info["overlaps"]) == 7
    assert p.info["overlaps"] == [
        r + c for r, c in zip(p.info["overlap_rows"], p.info["overlap_cols"])
    ]
