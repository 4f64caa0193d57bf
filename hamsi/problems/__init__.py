"""Partially separable objectives the HAMSI engine can minimize: one module per problem."""

from hamsi.problems.base import BlockLayout, PartiallySeparableProblem, block_layout
from hamsi.problems.least_squares import SparseLeastSquares
from hamsi.problems.matrix_factorization import MatrixFactorization

__all__ = [
    "BlockLayout",
    "PartiallySeparableProblem",
    "block_layout",
    "MatrixFactorization",
    "SparseLeastSquares",
]
