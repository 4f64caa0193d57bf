"""A small embedded rating sample, so demos and tests need no download.

``ml-100k-like.data.gz`` was written by ``make_ratings("ml-100k-like", seed=SAMPLE_SEED)`` in the
MovieLens 100K ``u.data`` layout (943 users, 1682 items, 100,000 ratings on 1..5 stars); rebuild
it with ``hamsi.data.sample.rebuild_sample()``.
"""

from __future__ import annotations

from pathlib import Path

from hamsi.data.ratings import Ratings
from hamsi.data.readers import load_ratings
from hamsi.data.writers import write_ratings

SAMPLE_FILE = Path(__file__).with_name("ml-100k-like.data.gz")
SAMPLE_SEED = 2024


def load_sample() -> Ratings:
    """Return the embedded ml-100k-like sample (943 x 1682, 100,000 ratings)."""
    return load_ratings(SAMPLE_FILE, format="ml-100k")


def rebuild_sample() -> Path:
    """Return the path of the sample file after regenerating it from the seeded generator."""
    # why lazy: hamsi.data.synth loads scipy.stats, only to rebuild the sample
    from hamsi.data.synth import make_ratings

    return write_ratings(make_ratings("ml-100k-like", seed=SAMPLE_SEED), SAMPLE_FILE)
