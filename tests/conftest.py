"""Shared fixtures: small rating data built in code."""

import numpy as np
import pytest

from hamsi.data import Ratings


@pytest.fixture
def tiny_ratings():
    """A 6 x 5 matrix with 12 distinct ratings."""
    rng = np.random.default_rng(0)
    flat = rng.choice(30, size=12, replace=False)
    rows, cols = np.divmod(flat, 5)
    values = rng.integers(1, 6, size=12).astype(float)
    return Ratings(rows, cols, values, (6, 5))
