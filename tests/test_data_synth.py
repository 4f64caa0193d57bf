"""Synthetic generator, writers (atomic, every format) and the embedded sample."""

import os

import numpy as np
import pytest

from hamsi.data import writers
from hamsi.data.readers import load_ratings
from hamsi.data.sample import load_sample
from hamsi.data.synth import (
    MIN_RATINGS_PER_USER,
    PRESETS,
    ContinuousScale,
    make_ratings,
    merged,
)
from hamsi.data.writers import write_ratings
from hamsi.errors import InputError


def distinct_pairs(ratings):
    return np.unique(ratings.rows.astype(np.int64) * ratings.shape[1] + ratings.cols).size


def test_ml_1m_like_has_exactly_the_published_count():
    # its time and memory: benchmarks/bench_data.py
    ratings = make_ratings("ml-1m-like", seed=0)
    assert ratings.shape == (6040, 3706)
    assert ratings.nnz == 1_000_209 == distinct_pairs(ratings)


def test_ml_100k_like_looks_like_movielens():
    ratings = make_ratings("ml-100k-like", seed=1)
    assert ratings.shape == (943, 1682) and ratings.nnz == 100_000 == distinct_pairs(ratings)
    per_user = np.bincount(ratings.rows, minlength=943)
    per_item = np.bincount(ratings.cols, minlength=1682)
    assert per_user.min() >= MIN_RATINGS_PER_USER
    assert per_item.min() >= 1
    # heavy tails: the busiest user/item far above the typical one, as in MovieLens (>= 10x)
    assert per_user.max() > 5 * np.median(per_user)
    assert per_item.max() > 8 * np.median(per_item)
    assert set(np.unique(ratings.values)) == {1.0, 2.0, 3.0, 4.0, 5.0}
    shares = np.bincount(ratings.values.astype(int))[1:] / ratings.nnz
    assert np.argmax(shares) == 3  # four stars is the mode, as in MovieLens
    assert ratings.user_ids[0] == 1 and ratings.item_ids[-1] == 1682


# Real MovieLens-100K: star shares 1..5, mean, sd, user and item activity min/median/max.
ML100K_SHARES = np.array([0.061, 0.114, 0.271, 0.342, 0.212])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ml_100k_like_statistics_match_the_real_file(seed):
    ratings = make_ratings("ml-100k-like", seed=seed)
    values = ratings.values
    assert values.mean() == pytest.approx(3.530, abs=0.02)
    assert values.std() == pytest.approx(1.126, abs=0.02)
    shares = np.bincount(values.astype(int), minlength=6)[1:] / ratings.nnz
    np.testing.assert_allclose(shares, ML100K_SHARES, atol=0.006)
    per_user = np.bincount(ratings.rows, minlength=943)
    per_item = np.bincount(ratings.cols, minlength=1682)
    assert per_user.min() == 20 and np.median(per_user) == pytest.approx(65, rel=0.15)
    assert 0.75 * 737 <= per_user.max() <= 1.1 * 737
    assert per_item.min() == 1 and np.median(per_item) == pytest.approx(27, rel=0.15)
    assert 0.75 * 583 <= per_item.max() <= 1.1 * 583


def test_ml_100k_like_is_as_hard_as_the_real_file():
    """Global mean and regularized biases on a random 80/20 split: real 1.130 and 0.954."""
    ratings = make_ratings("ml-100k-like", seed=0)
    train, test = ratings.split(0.2, seed=0)
    mu = train.values.mean()
    assert np.sqrt(np.mean((test.values - mu) ** 2)) == pytest.approx(1.130, abs=0.02)
    user_bias, item_bias = np.zeros(943), np.zeros(1682)
    user_counts, item_counts = (
        np.bincount(train.rows, minlength=943),
        np.bincount(train.cols, minlength=1682),
    )
    for _ in range(10):  # alternating least squares, reg 15 (users) and 10 (items)
        item_bias = np.bincount(
            train.cols, train.values - mu - user_bias[train.rows], minlength=1682
        ) / (10 + item_counts)
        user_bias = np.bincount(
            train.rows, train.values - mu - item_bias[train.cols], minlength=943
        ) / (15 + user_counts)
    predicted = mu + user_bias[test.rows] + item_bias[test.cols]
    assert np.sqrt(np.mean((test.values - predicted) ** 2)) == pytest.approx(0.954, abs=0.015)


def test_ml_1m_like_statistics():
    ratings = make_ratings("ml-1m-like", seed=0)
    assert ratings.values.mean() == pytest.approx(3.58, abs=0.02)
    per_user = np.bincount(ratings.rows, minlength=6040)
    per_item = np.bincount(ratings.cols, minlength=3706)
    assert per_user.min() == 20 and np.median(per_user) == pytest.approx(96, rel=0.15)
    assert per_item.min() == 1 and np.median(per_item) == pytest.approx(123.5, rel=0.15)


def test_ratings_follow_the_planted_model():
    ratings = make_ratings(users=300, items=200, ratings=12_000, rank=3, seed=5, noise=0.1)
    notes = ratings.notes
    planted = (
        notes["planted_user_bias"][ratings.rows]
        + notes["planted_item_bias"][ratings.cols]
        + np.einsum(
            "ij,ij->i",
            notes["planted_user_factors"][ratings.rows],
            notes["planted_item_factors"][ratings.cols],
        )
    )
    assert np.corrcoef(planted, ratings.values)[0, 1] > 0.8
    assert notes["planted_user_factors"].shape == (300, 3)


def test_seed_determines_the_matrix_and_half_stars():
    first = make_ratings(users=50, items=40, ratings=900, seed=7, half_stars=True)
    second = make_ratings(users=50, items=40, ratings=900, seed=7, half_stars=True)
    other = make_ratings(users=50, items=40, ratings=900, seed=8, half_stars=True)
    assert np.array_equal(first.rows, second.rows) and np.array_equal(first.values, second.values)
    assert not np.array_equal(first.cols, other.cols)
    assert set(np.unique(first.values)) <= set(np.arange(1.0, 5.01, 0.5))
    assert 3.5 in set(first.values)


@pytest.mark.parametrize(
    "users, items, ratings", [(5, 4, 20), (30, 20, 599), (1, 1, 1), (100, 3, 250)]
)
def test_exact_count_even_when_nearly_full(users, items, ratings):
    generated = make_ratings(users=users, items=items, ratings=ratings, seed=0)
    assert generated.nnz == ratings == distinct_pairs(generated)
    assert generated.rows.max() < users and generated.cols.max() < items


def test_signature_used_by_other_packages_and_bad_arguments():
    assert make_ratings("ml-100k-like", seed=1).nnz == PRESETS["ml-100k-like"].ratings
    users, items, count = PRESETS[
        "ml-1m-like"
    ]  # unpacks like the (users, items, ratings) tuple it was
    assert (users, items, count) == (6040, 3706, 1_000_209)
    with pytest.raises(InputError, match="unknown preset"):
        make_ratings("ml-5m-like")
    with pytest.raises(InputError, match="do not fit"):
        make_ratings(users=3, items=3, ratings=10)
    with pytest.raises(InputError, match="give a preset"):
        make_ratings(users=3)


@pytest.mark.parametrize(
    "name", ["r.csv", "r.dat", "u.data", "r.tsv", "r.parquet", "r.txt", "r.hamsi", "r.csv.gz"]
)
def test_every_written_format_round_trips(tmp_path, name):
    original = make_ratings(users=60, items=80, ratings=1500, seed=2, half_stars=True)
    loaded = load_ratings(write_ratings(original, tmp_path / name))
    assert loaded.shape == original.shape
    order = np.lexsort((loaded.item_ids[loaded.cols], loaded.user_ids[loaded.rows]))
    assert np.array_equal(loaded.user_ids[loaded.rows][order], original.user_ids[original.rows])
    assert np.array_equal(loaded.item_ids[loaded.cols][order], original.item_ids[original.cols])
    assert np.array_equal(loaded.values[order], original.values)


def test_write_is_atomic(tmp_path, monkeypatch):
    original = make_ratings(users=30, items=30, ratings=700, seed=0)
    target = write_ratings(original, tmp_path / "r.csv")
    before = target.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(writers, "_write_text", broken)
    with pytest.raises(OSError, match="disk full"):
        write_ratings(make_ratings(users=30, items=30, ratings=100, seed=1), target)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["r.csv"]  # no temporary file left behind
    with pytest.raises(InputError, match="cannot tell the format"):
        write_ratings(original, tmp_path / "r.xlsx")


def test_embedded_sample_is_the_seeded_generator_output():
    sample = load_sample()
    assert sample.shape == (943, 1682) and sample.nnz == 100_000
    from hamsi.data.sample import SAMPLE_FILE, SAMPLE_SEED

    assert SAMPLE_FILE.stat().st_size < 1_000_000
    regenerated = make_ratings("ml-100k-like", seed=SAMPLE_SEED)
    assert np.array_equal(sample.values, regenerated.values)
    assert np.array_equal(sample.user_ids[sample.rows], regenerated.user_ids[regenerated.rows])


def test_long_tail_preset_reproduces_the_second_real_set_through_data_info(tmp_path, capsys):
    # real MovieLens latest-small: 672 x 9,066, 100,020 half stars 0.5..5, mean 3.54, sd 1.06, users
    # min 16 / median 71 / max 2,391, items min 1 / median 3, 47 % of the items with <= 2 ratings
    from hamsi.cli import main

    path = tmp_path / "long-tail.csv"
    assert (
        main(["data", "synth", "--preset", "long-tail-like", "--seed", "2", "--out", str(path)])
        == 0
    )
    capsys.readouterr()
    assert main(["data", "info", str(path)]) == 0
    field, shares, user, item = parsed_info(capsys.readouterr().out)
    assert field["users"] == ["672"] and field["items"] == ["9,066"]
    assert field["ratings"] == ["100,020"]
    mean, sd = float(field["rating"][1]), float(field["rating"][3])
    assert mean == pytest.approx(3.54, abs=0.02) and sd == pytest.approx(1.06, abs=0.02)
    assert field["rating"][5] == "0.5..5"
    np.testing.assert_allclose(
        shares, [1.1, 3.3, 1.7, 7.3, 4.4, 20.1, 10.5, 28.8, 7.7, 15.1], atol=0.3
    )
    assert user[0] == 16 and user[3] == pytest.approx(71, rel=0.1)
    assert user[6] == pytest.approx(2391, rel=0.12)
    assert item[0] == 1 and item[3] == 3
    ratings = load_ratings(path)
    per_item = np.bincount(ratings.cols, minlength=9066)
    assert np.mean(per_item <= 2) == pytest.approx(0.47, abs=0.02)


def parsed_info(out: str):
    """Return `hamsi data info`'s fields, its rating shares (%), and its per-user and per-item quantiles."""
    lines = out.splitlines()
    field = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    shares = [
        float(line.split()[2].rstrip("%"))
        for line in lines
        if line.startswith("  ") and line.split()[0].replace(".", "").isdigit() and "%" in line
    ]
    user = [float(v) for v in next(line for line in lines if "per user" in line).split()[2:]]
    item = [float(v) for v in next(line for line in lines if "per item" in line).split()[2:]]
    return field, shares, user, item


def activity(ratings):
    """Return (min, median, max) of the ratings per user and per item."""
    per_user = np.bincount(ratings.rows, minlength=ratings.shape[0])
    per_item = np.bincount(ratings.cols, minlength=ratings.shape[1])
    return [(a.min(), np.median(a), a.max()) for a in (per_user, per_item)]


def test_merged_is_the_sorted_union():
    rng = np.random.default_rng(0)
    union = rng.choice(10_000, size=3000, replace=False).astype(np.int64)
    keys, fresh = np.sort(union[:2000]), np.sort(union[2000:])
    assert np.array_equal(merged(keys, fresh), np.sort(union))
    assert np.array_equal(merged(keys, fresh[:0]), keys)
    assert np.array_equal(merged(keys[:0], fresh), fresh)


def test_continuous_scale_has_the_requested_mean_sd_and_grid():
    shares = ContinuousScale(-10.0, 10.0, 0.01, mean=0.88, sd=5.24).shares()
    levels, mass = np.array(list(shares)), np.array(list(shares.values()))
    assert levels.size == 2001 and levels[0] == -10.0 and levels[-1] == 10.0
    assert np.array_equal(levels, np.round(levels, 2)) and mass.sum() == pytest.approx(1.0)
    mean = levels @ mass
    assert mean == pytest.approx(0.88, abs=1e-4)
    assert np.sqrt((levels - mean) ** 2 @ mass) == pytest.approx(5.24, abs=1e-4)
    with pytest.raises(InputError, match="sd 9.0 is impossible"):
        ContinuousScale(0.0, 10.0, 0.01, mean=5.0, sd=9.0)
    with pytest.raises(InputError, match="mean 11.0 is not inside"):
        ContinuousScale(0.0, 10.0, 0.01, mean=11.0, sd=1.0)
    with pytest.raises(InputError, match="step must divide 1"):
        ContinuousScale(0.0, 10.0, 0.3, mean=5.0, sd=1.0)


@pytest.mark.slow
def test_joke_like_has_the_jester_shape():
    # real Jester (first release): 24,983 x 100, 1.81M ratings, every user 36-100 jokes (median
    # 72), values multiples of 0.01 in [-10, 10], mean 0.88, sd 5.24
    ratings = make_ratings("joke-like", seed=0)
    assert ratings.shape == (25_000, 100)
    assert ratings.nnz == 1_800_000 == distinct_pairs(ratings)
    (user_min, user_median, user_max), _ = activity(ratings)
    assert user_min == 36 and user_max == 100
    assert user_median == pytest.approx(72, rel=0.15)
    values = ratings.values
    assert values.min() >= -10.0 and values.max() <= 10.0
    assert np.array_equal(values, np.round(values, 2))
    assert np.unique(values).size > 1900  # continuous: nearly every point of the grid is used
    assert values.mean() == pytest.approx(0.88, abs=0.05)
    assert values.std() == pytest.approx(5.24, abs=0.1)


def test_book_like_has_the_long_tail_of_a_book_set():
    # real: 2,212 x 95,872, 227k ratings 1..5 (mean 3.90, sd 0.95), users 1 / 35 / 2,802 and items
    # 1 / 1 / 359 ratings (min / median / max)
    ratings = make_ratings("book-like", seed=0)
    assert ratings.shape == (2212, 95_872)
    assert ratings.nnz == 227_000 == distinct_pairs(ratings)
    (user_min, user_median, user_max), (item_min, item_median, item_max) = activity(ratings)
    assert user_min == 1 and user_median == pytest.approx(35, rel=0.15)
    assert 0.75 * 2802 <= user_max <= 1.1 * 2802
    assert item_min == 1 and item_median == 1
    assert 0.75 * 359 <= item_max <= 1.1 * 359
    assert set(np.unique(ratings.values)) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert ratings.values.mean() == pytest.approx(3.90, abs=0.05)
    assert ratings.values.std() == pytest.approx(0.95, abs=0.1)
