"""Factor graph (thesis sec. 3.1, Example 3.0.1 and Fig. 3.2), Partition methods and input errors."""

from types import SimpleNamespace

import numpy as np
import pytest

import partition
from partition import FactorGraph, Partition, PartitionError
from partition.testing import random_ratings


def thesis_example():
    """The 3 x 2 matrix of Example 3.0.1: f_1..f_6 on (row, col) in row-major order."""
    rows, cols = np.divmod(np.arange(6), 2)
    return SimpleNamespace(rows=rows, cols=cols, shape=(3, 2))


def test_matrix_graph_matches_the_thesis_index_sets():
    graph = FactorGraph.from_ratings(thesis_example())
    indptr, indices = graph.csr()
    # alpha_1 = {1, 4}, ..., alpha_6 = {3, 5} in 1-based thesis numbering
    expected = [{1, 4}, {1, 5}, {2, 4}, {2, 5}, {3, 4}, {3, 5}]
    assert [set((indices[indptr[i] : indptr[i + 1]] + 1).tolist()) for i in range(6)] == expected


def test_block_parameters_is_the_union_of_alphas():
    graph = FactorGraph.from_ratings(thesis_example())
    # Fig. 3.2 middle: S_{1,2} = {4, 6} has alpha_{1,2} = {2, 3, 5}
    assert (graph.block_parameters(np.array([3, 5])) + 1).tolist() == [2, 3, 5]


def test_general_index_sets_agree_with_the_matrix_fast_path():
    example = thesis_example()
    fast = FactorGraph.from_ratings(example)
    general = FactorGraph.from_index_sets(
        [[r, 3 + c] for r, c in zip(example.rows, example.cols)], 5
    )
    for block in ([0, 5], [1, 2, 3], [4]):
        assert np.array_equal(
            fast.block_parameters(np.array(block)), general.block_parameters(np.array(block))
        )
    assert general.shared_parameters([np.array([0]), np.array([1, 4])]).tolist() == [0, 3]


def test_validate_rejects_a_broken_cover():
    ratings = thesis_example()
    good = partition.make("strata", ratings, blocks=2)
    missing = Partition("strata", (3, 2), [[good.subsets[0][0]], [good.subsets[1][0]]])
    with pytest.raises(PartitionError, match="no block"):
        missing.validate(ratings)
    clash = Partition(
        "color",
        (3, 2),
        [[np.array([0], dtype=np.int64), np.array([1, 2, 3, 4, 5], dtype=np.int64)]],
    )
    with pytest.raises(PartitionError, match="shared"):
        clash.validate(ratings)


def test_block_parameters_of_a_made_partition():
    p = partition.make("strata", thesis_example(), blocks=2)
    for k in range(2):
        for b in range(2):
            block = p.subsets[k][b]
            expected = sorted(
                set(thesis_example().rows[block].tolist())
                | {3 + c for c in thesis_example().cols[block]}
            )
            assert p.block_parameters(k, b).tolist() == expected


def test_schemes_are_listed():
    assert partition.SCHEMES == ("color", "color-b", "hogwild", "strata", "strata-b")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scheme": "colour", "blocks": 2}, "unknown partition scheme 'colour'"),
        ({"scheme": "strata", "blocks": 0}, "blocks must be a positive integer; got 0"),
        ({"scheme": "color", "blocks": 11}, "blocks=11 is larger than a dimension"),
        ({"scheme": "strata-b", "blocks": 3, "subsets": 4}, "got subsets=4 with blocks=3"),
        (
            {"scheme": "hogwild", "blocks": 2, "subsets": 0},
            "subsets must be a positive integer; got 0",
        ),
        (
            {"scheme": "hogwild", "blocks": 2, "subsets": 10_000},
            "subsets=10000 is larger than the number of ratings",
        ),
    ],
)
def test_bad_requests_name_the_offending_value(kwargs, message):
    ratings = random_ratings(10, 12, 50)
    scheme = kwargs.pop("scheme")
    with pytest.raises(ValueError, match=message):
        partition.make(scheme, ratings, **kwargs)


def test_bad_ratings_are_rejected():
    with pytest.raises(PartitionError, match="empty ratings"):
        partition.make(
            "strata",
            SimpleNamespace(rows=np.zeros(0, int), cols=np.zeros(0, int), shape=(3, 3)),
            blocks=1,
        )
    with pytest.raises(PartitionError, match=r"ratings.cols must lie in \[0, 3\)"):
        partition.make(
            "strata",
            SimpleNamespace(rows=np.array([0]), cols=np.array([5]), shape=(3, 3)),
            blocks=1,
        )
    with pytest.raises(PartitionError, match="must have .rows"):
        partition.make("strata", [1, 2, 3], blocks=1)
