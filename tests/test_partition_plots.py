"""Partition pictures (thesis Figs. 3.3-3.4) are written as PNG files for every scheme."""

import pytest

import partition
from partition.plots import plot_color_sets
from partition.testing import power_law_ratings


@pytest.mark.parametrize("scheme", partition.SCHEMES)
def test_plot_writes_a_png(tmp_path, scheme):
    ratings = power_law_ratings(60, 80, 1500, seed=0)
    path = partition.make(
        scheme, ratings, blocks=3, subsets=None if scheme.startswith("strata") else 5
    ).plot(tmp_path / f"{scheme}.png")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_color_sets_side_by_side(tmp_path):
    ratings = power_law_ratings(60, 80, 1500, seed=0)
    pair = [partition.make(s, ratings, blocks=2) for s in ("color", "color-b")]
    path = plot_color_sets(pair, tmp_path / "fig33.png")
    assert (tmp_path / "fig33.png").stat().st_size > 1000 and path.endswith("fig33.png")
