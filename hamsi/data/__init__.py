"""Rating matrices: the container, readers, download, synthetic generator, embedded sample."""

from hamsi.data.ratings import Ratings

__all__ = ["Ratings"]
