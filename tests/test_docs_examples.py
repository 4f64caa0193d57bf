"""Every ```python example of README.md, docs/api.md and docs/accuracy.md runs, on small files made here.

Each block runs with exec in a fresh directory holding the files it names (MovieLens-shaped
ratings written by hamsi's own writers, small enough to fit in seconds); a block that needs a
running Dask scheduler on another host or a download says so and is skipped.
"""

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/api.md", "docs/accuracy.md")
# Blocks that cannot run here, by a phrase in them, and why.
SKIPPED = {
    "tcp://head:8786": "needs a running Dask scheduler at a named host (not loopback)",
    "DaskMatrixFactorizer": "starts Dask clusters and needs a scheduler host; the Dask estimator is tested in "
    "tests/test_recommender_dask.py and tests/test_search.py",
}


def python_blocks():
    """Return [(page, index, code)] of every ```python block of PAGES."""
    blocks = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for index, code in enumerate(re.findall(r"```python\n(.*?)```", text, flags=re.S)):
            blocks.append(pytest.param(page, code, id=f"{page}#{index}"))
    return blocks


def small_ratings_frame(user_col="user", item_col="item", seed=0) -> pd.DataFrame:
    """Return 40 x 60 ratings (1,200) whose ids include the ones the examples name (196, 242, 302)."""
    from hamsi.data.synth import make_ratings

    ratings = make_ratings(users=40, items=60, ratings=1200, rank=3, seed=seed)
    users = np.where(ratings.rows == 0, 196, ratings.rows + 1)
    items = np.select([ratings.cols == 0, ratings.cols == 1], [242, 302], ratings.cols + 1)
    return pd.DataFrame(
        {
            user_col: users,
            item_col: items,
            "rating": ratings.values,
            "timestamp": np.arange(ratings.nnz),
        }
    )


def write_example_files(directory: Path) -> None:
    """Write the files the examples read: ratings.csv, ml-latest-small/ratings.csv, ml-1m/ratings.dat."""
    small_ratings_frame().drop(columns="timestamp").to_csv(directory / "ratings.csv", index=False)
    (directory / "ml-latest-small").mkdir()
    small_ratings_frame("userId", "movieId").to_csv(
        directory / "ml-latest-small" / "ratings.csv", index=False
    )
    (directory / "ml-1m").mkdir()
    frame = small_ratings_frame()
    lines = [f"{u}::{i}::{int(r)}::{t}" for u, i, r, t in frame.itertuples(index=False)]
    (directory / "ml-1m" / "ratings.dat").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("page,code", python_blocks())
def test_example_runs(page, code, tmp_path, monkeypatch):
    for phrase, reason in SKIPPED.items():
        if phrase in code:
            pytest.skip(f"{page}: {reason}")
    write_example_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs_example__"}
    if "train" in code and "train =" not in code and "train," not in code:
        # a block that continues the page's previous one gets what that one defined
        import hamsi

        namespace["hamsi"] = hamsi
        from sklearn.model_selection import train_test_split

        frame = pd.read_csv("ratings.csv")
        namespace["train"], namespace["test"] = train_test_split(
            frame, test_size=0.2, random_state=0
        )
    exec(compile(code, f"{page} example", "exec"), namespace)
    assert os.listdir(tmp_path)  # ran in the example directory


def test_every_page_has_its_examples_collected():
    ids = [param.id for param in python_blocks()]
    assert any(i.startswith("README.md") for i in ids) and any(
        i.startswith("docs/api.md") for i in ids
    )
