"""The unit ratings are fitted in: 1-5 stars as they are, a far wider or narrower scale rescaled.

Every default (the search's grid of regs, the steps, the bias start) was measured on star
ratings; `rating_unit` maps another scale onto their span, and `in_units` maps a trace row back.
"""

from __future__ import annotations

import numpy as np

# The span of 1-5 stars, the scale every default (reg, the search's grid, the steps) was measured on.
STAR_SPAN = 4.0


def rating_unit(values) -> float:
    """Return the unit the ratings are fitted in: 1, or span / STAR_SPAN for a span far from 1-5 stars.

    The factor part of the objective is scale-equivariant with a reg proportional to the scale, its
    bias part is not, and the count-weighted regs are absolute: a -10..+10 scale fitted as it is
    shrinks the biases 5x too hard. Ratings whose span (max - min) is more than 1.5x away from
    STAR_SPAN (1-10, -10..+10, 0-100, 0-1) are divided by span / STAR_SPAN for the fit and the
    model is scaled back; 1-5 and 0.5-5 stars are fitted as they are.
    """
    span = float(np.max(values) - np.min(values)) if len(values) else 0.0
    if span <= 0.0 or STAR_SPAN / 1.5 <= span <= STAR_SPAN * 1.5:
        return 1.0
    return span / STAR_SPAN


def in_units(callback, unit: float):
    """Return a function of a trace row (a TraceRow, or its dict for `callback`) in rating units."""

    def scaled(row):
        values = row._asdict() if hasattr(row, "_asdict") else dict(row)
        values.update(
            train_rmse=values["train_rmse"] * unit,
            validation_rmse=values["validation_rmse"] * unit,
            objective=values["objective"] * unit * unit,
        )
        return type(row)(**values) if hasattr(row, "_asdict") else type(row)(values)

    if callback is None:
        return scaled
    return lambda row: callback(scaled(row))
