"""What a model fitted on ratings kept on the workers keeps there: seen lists and test pairs.

Such a model holds no O(ratings) array in the client (cluster.dataset). Two uses of the ratings
after the fit run where the ratings are:

- Seen items (recommend leaves them out). Each row shard's training pairs become a CSR list of
  the items every user of the shard rated (`SeenLists`: 4 bytes per rating and 8 per user, on the
  shard's host); the shards themselves are released with the fit. recommend(user) fetches one
  user's list by a task; cluster.scoring.recommend_all ranks each shard's users beside its lists.
  Validation pairs are not in them, as the in-memory model's lists hold only its training ratings.
- The test split (cluster.sources.TestSplit: the pairs whose TEST_STREAM hash falls below the
  fraction, hamsi.data.ratings.heldout_mask). Each partition's test pairs stay, indexed, on the
  worker that read them (`TestPairs`); they are never trained or validated on. `test_rmse` sums
  the squared errors of the model's clipped predictions there: two numbers per partition reach
  the client.

Both live as long as the fitted model and its client; a model saved and loaded has neither, and
says what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hamsi.errors import InputError
from hamsi.recommender import pair_scores, seen_lists

# what a model without its workers' lists tells the user (InputError)
NO_WORKERS = (
    "this model was fitted on ratings that stayed on the Dask workers{why}, so it holds no list "
    "of the items each user rated; rank all items (exclude_seen=False; hamsi recommend "
    "--include-seen), or recommend with the fitted DaskMatrixFactorizer while its client is open "
    "(cluster.scoring.recommend_all leaves the seen items out on the workers)"
)


@dataclass
class TestPairs:
    """One partition's test pairs: dense rows and cols of the model (int32) and their ratings."""

    __test__ = False  # a name pytest would collect where a test module imports it

    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray


@dataclass
class SeenLists:
    """Row shard rows row_lo..row_hi-1: the items model row r rated are items[indptr[r - row_lo]:indptr[r - row_lo + 1]]."""

    row_lo: int
    row_hi: int
    indptr: np.ndarray
    items: np.ndarray

    def of(self, row: int) -> np.ndarray:
        """Return the item positions model row `row` rated in training."""
        at = int(row) - self.row_lo
        return self.items[self.indptr[at] : self.indptr[at + 1]]

    def block(self, lo: int, hi: int) -> tuple:
        """Return (indptr from 0, items) of model rows lo..hi-1 (cluster.scoring's `_top_block` form)."""
        ptr = self.indptr[lo - self.row_lo : hi - self.row_lo + 1]
        return ptr - ptr[0], self.items[ptr[0] : ptr[-1]]


def seen_of_shard(data) -> SeenLists:
    """Return the SeenLists of a ShardRatings (cluster.routing): its training pairs, per user (a task on its host)."""
    indptr, items = seen_lists(data.rows, data.cols, data.row_hi - data.row_lo)
    return SeenLists(int(data.row_lo), int(data.row_hi), indptr, items)


def seen_rows(seen: SeenLists) -> tuple:
    """Return (row_lo, row_hi) of a shard's lists (two numbers for the client)."""
    return seen.row_lo, seen.row_hi


def user_items(seen: SeenLists, row: int) -> np.ndarray:
    """Return model row `row`'s seen items (one user's list: what recommend(user) fetches)."""
    return seen.of(row)


def squared_errors(pairs: TestPairs, arrays, low: float, high: float) -> tuple:
    """Return (sum of squared errors of the clipped predictions, pairs) of one partition's test pairs."""
    scores, _ = pair_scores(arrays, pairs.rows, pairs.cols)
    errors = np.clip(scores, low, high) - pairs.vals
    return float(np.dot(errors, errors)), int(errors.size)


@dataclass(eq=False)
class KeptRatings:
    """The futures a model fitted on worker data keeps: SeenLists per row shard (row order), TestPairs per partition."""

    client: object
    row_bounds: np.ndarray  # shard s holds model rows row_bounds[s]:row_bounds[s + 1]
    seen: list
    test: list
    n_test: int

    @classmethod
    def of(cls, client, shards: list, test: list, n_test: int) -> KeptRatings:
        """Return the KeptRatings of routed shards (their SeenLists built on their hosts) and test pairs."""
        seen = client.map(seen_of_shard, shards, pure=False)
        ranges = client.gather(client.map(seen_rows, seen, pure=False))
        order = np.argsort([lo for lo, _ in ranges], kind="stable")
        bounds = [ranges[s][0] for s in order] + [max((hi for _, hi in ranges), default=0)]
        return cls(client, np.asarray(bounds, np.int64), [seen[s] for s in order], test, n_test)

    def check_open(self) -> None:
        """Raise InputError when the client holding the futures is closed."""
        if getattr(self.client, "status", "running") != "running":
            raise InputError(NO_WORKERS.format(why=" and its Dask client is closed"))

    def shard_of(self, row: int) -> int:
        """Return the row shard holding model row `row`."""
        return int(np.searchsorted(self.row_bounds, row, side="right") - 1)

    def seen_items(self, row: int) -> np.ndarray:
        """Return the item positions model row `row` rated in training, fetched from its shard by a task."""
        self.check_open()
        return self.client.submit(user_items, self.seen[self.shard_of(row)], int(row)).result()

    def test_rmse(self, arrays, low: float, high: float) -> float:
        """Return the RMSE of the predictions clipped to [low, high] on the test pairs, summed on the workers."""
        if not self.test:
            raise InputError(
                "the model was fitted without a test split (cluster.sources.TestSplit)"
            )
        self.check_open()
        shared = self.client.scatter(arrays, broadcast=False, hash=False)
        parts = self.client.gather(
            self.client.map(squared_errors, self.test, arrays=shared, low=low, high=high)
        )
        total, count = sum(p[0] for p in parts), sum(p[1] for p in parts)
        if count == 0:
            raise InputError("the test split holds no ratings: raise the test fraction")
        return float(np.sqrt(total / count))
