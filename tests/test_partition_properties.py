"""Property tests: every scheme yields a cover whose blocks touch disjoint parameters (thesis eq. 3.3)."""

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import partition


@st.composite
def sparse_matrices(draw):
    n_rows = draw(st.integers(1, 9))
    n_cols = draw(st.integers(1, 9))
    cells = draw(
        st.lists(st.integers(0, n_rows * n_cols - 1), min_size=1, max_size=40, unique=True)
    )
    rows, cols = np.divmod(np.array(cells, dtype=np.int64), n_cols)
    return SimpleNamespace(
        rows=rows.astype(np.int32), cols=cols.astype(np.int32), shape=(n_rows, n_cols)
    )


@st.composite
def requests(draw):
    ratings = draw(sparse_matrices())
    scheme = draw(st.sampled_from(partition.SCHEMES))
    blocks = draw(st.integers(1, min(ratings.shape)))
    subsets = None if scheme.startswith("strata") else draw(st.integers(1, ratings.rows.size))
    return ratings, scheme, blocks, subsets, draw(st.integers(0, 3))


def touched(ratings, block):
    return set(ratings.rows[block].tolist()), set(ratings.cols[block].tolist())


@settings(max_examples=150, deadline=None)
@given(requests())
def test_every_scheme_gives_a_valid_cover(request):
    ratings, scheme, blocks, subsets, seed = request
    p = partition.make(scheme, ratings, blocks=blocks, subsets=subsets, seed=seed)
    p.validate()
    assert p.n_subsets == (blocks if scheme.startswith("strata") else subsets)
    assert all(len(subset) == blocks for subset in p.subsets)
    seen = sorted(i for subset in p.subsets for block in subset for i in block.tolist())
    assert seen == list(range(ratings.rows.size))  # every entry in exactly one block
    for k, subset in enumerate(p.subsets):
        shared = shared_parameters(ratings, subset)
        if scheme == "hogwild":
            assert p.info["overlaps"][k] == shared
            assert p.stats()["overlaps"][k] == shared
        else:
            assert shared == 0


def shared_parameters(ratings, subset) -> int:
    """Return how many rows and columns more than one block of `subset` touches."""
    row_owner, col_owner = {}, {}
    for b, block in enumerate(subset):
        for r in set(ratings.rows[block].tolist()):
            row_owner.setdefault(r, set()).add(b)
        for c in set(ratings.cols[block].tolist()):
            col_owner.setdefault(c, set()).add(b)
    return sum(len(o) > 1 for o in row_owner.values()) + sum(len(o) > 1 for o in col_owner.values())


@settings(max_examples=60, deadline=None)
@given(sparse_matrices(), st.booleans(), st.integers(0, 5))
def test_coloring_is_valid_and_follows_its_rule(ratings, balanced, seed):
    """COLOR takes the smallest free color; COLOR-B opens a new color only when no used one is free."""
    from partition.color import color_functions
    from partition.graph import FactorGraph

    colors, n_colors = color_functions(FactorGraph.from_ratings(ratings), balanced, seed)
    assert n_colors == colors.max() + 1
    used = 0
    for i in range(ratings.rows.size):
        earlier = [
            t
            for t in range(i)
            if ratings.rows[t] == ratings.rows[i] or ratings.cols[t] == ratings.cols[i]
        ]
        forbidden = {int(colors[t]) for t in earlier}
        assert colors[i] not in forbidden
        if balanced:
            free_used = set(range(used)) - forbidden
            assert (colors[i] in free_used) if free_used else colors[i] == used
        else:
            assert colors[i] == min(set(range(len(forbidden) + 1)) - forbidden)
        used = max(used, int(colors[i]) + 1)
