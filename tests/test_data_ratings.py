"""Ratings: construction from raw ids, duplicate policies, splits and summary statistics."""

import numpy as np
import pytest

from hamsi.data import Ratings
from hamsi.data.ratings import dense_index
from hamsi.errors import InputError


def test_from_ids_maps_sparse_ids_to_dense_indices():
    ratings = Ratings.from_ids([10, 3, 10, 7], [100, 5, 5, 100], [1.0, 2.0, 3.0, 4.0])
    assert ratings.shape == (3, 2)
    assert ratings.user_ids.tolist() == [3, 7, 10]
    assert ratings.item_ids.tolist() == [5, 100]
    assert ratings.user_ids[ratings.rows].tolist() == [10, 3, 10, 7]
    assert ratings.item_ids[ratings.cols].tolist() == [100, 5, 5, 100]
    assert ratings.rows.dtype == np.int32 and ratings.values.dtype == np.float64


@pytest.mark.parametrize("ids", [np.array([5, 2**40, 7, 5]), np.array([3, 1, 2, 3])])
def test_dense_index_agrees_with_numpy_unique(ids):
    # The first case is too sparse for the lookup table and takes the np.unique path.
    distinct, inverse = dense_index(ids)
    expected_distinct, expected_inverse = np.unique(ids, return_inverse=True)
    assert np.array_equal(distinct, expected_distinct)
    assert np.array_equal(inverse, expected_inverse)


def test_duplicates_error_names_the_record():
    with pytest.raises(InputError, match=r"record 2: duplicate \(user, item\) pair \(1, 2\)"):
        Ratings.from_ids([1, 1, 1], [2, 3, 2], [1.0, 2.0, 3.0])


def test_duplicates_keep_last_and_mean():
    users, items, values = [1, 1, 2, 1], [2, 3, 2, 2], [1.0, 2.0, 5.0, 4.0]
    last = Ratings.from_ids(users, items, values, duplicates="keep-last")
    assert sorted(zip(last.user_ids[last.rows], last.item_ids[last.cols], last.values)) == [
        (1, 2, 4.0),
        (1, 3, 2.0),
        (2, 2, 5.0),
    ]
    mean = Ratings.from_ids(users, items, values, duplicates="mean")
    assert sorted(zip(mean.user_ids[mean.rows], mean.item_ids[mean.cols], mean.values)) == [
        (1, 2, 2.5),
        (1, 3, 2.0),
        (2, 2, 5.0),
    ]
    assert mean.summary()["duplicates_merged"] == 1


@pytest.mark.parametrize(
    "users, items, values, message",
    [
        ([1, -2], [1, 1], [1.0, 2.0], "user id is negative: -2"),
        ([1.5, 2], [1, 1], [1.0, 2.0], "user id is not an integer: 1.5"),
        ([1, 2], [1, 1], [1.0, np.inf], "rating is not a finite number: inf"),
        ([1, 2], [1, 1], [np.nan, 1.0], "record 0: rating is not a finite number"),
    ],
)
def test_from_ids_rejects_bad_values(users, items, values, message):
    with pytest.raises(InputError, match=message):
        Ratings.from_ids(users, items, values)


def test_split_partitions_ratings_and_keeps_maps(tiny_ratings):
    train, test = tiny_ratings.split(0.25, seed=3)
    assert (train.nnz, test.nnz) == (9, 3)
    assert train.shape == test.shape == tiny_ratings.shape
    assert train.user_ids is tiny_ratings.user_ids

    def pairs(r):
        return set(zip(r.rows.tolist(), r.cols.tolist(), r.values.tolist()))

    assert pairs(train) | pairs(test) == pairs(tiny_ratings)
    assert not pairs(train) & pairs(test)
    again_train, _ = tiny_ratings.split(0.25, seed=3)
    assert np.array_equal(again_train.rows, train.rows)


def test_split_rejects_bad_fraction(tiny_ratings):
    with pytest.raises(InputError, match="test_fraction"):
        tiny_ratings.split(1.0)


def test_holdout_per_user_counts():
    rows = np.repeat([0, 1, 2], [5, 2, 1])
    ratings = Ratings(rows, np.r_[0:5, 0:2, 0:1], np.arange(8.0), (3, 5))
    train, test = ratings.holdout_per_user(2, seed=0)
    assert np.bincount(test.rows, minlength=3).tolist() == [2, 1, 0]  # keep >= 1 in train
    assert np.bincount(train.rows, minlength=3).tolist() == [3, 1, 1]
    assert sorted(np.r_[train.values, test.values].tolist()) == list(range(8))
    _, fraction_test = ratings.holdout_per_user(0.5, seed=0)
    assert np.bincount(fraction_test.rows, minlength=3).tolist() == [2, 1, 0]


def test_holdout_is_random_per_user():
    rows = np.zeros(50, dtype=int)
    ratings = Ratings(rows, np.arange(50), np.ones(50), (1, 50))
    held = {int(ratings.holdout_per_user(1, seed=s)[1].cols[0]) for s in range(10)}
    assert len(held) > 3


def test_summary_matches_brute_force(tiny_ratings):
    stats = tiny_ratings.summary()
    assert stats["ratings"] == 12 and stats["users"] == 6 and stats["items"] == 5
    assert stats["density"] == pytest.approx(12 / 30)
    values, counts = np.unique(tiny_ratings.values, return_counts=True)
    assert stats["rating_histogram"] == dict(zip(values.tolist(), counts.tolist()))
    per_user = [np.sum(tiny_ratings.rows == u) for u in range(6)]
    assert stats["user_activity"]["max"] == max(per_user)
    assert stats["user_activity"]["median"] == np.median(per_user)
    assert stats["users_without_ratings"] == per_user.count(0)


def test_summary_bins_continuous_values():
    ratings = Ratings([0, 1, 2], [0, 0, 0], [0.1, 0.25, 0.9], (3, 1))
    histogram = ratings.summary()["rating_histogram"]
    assert sum(histogram.values()) == 3 and len(histogram) == 10
