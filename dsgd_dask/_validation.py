"""Checks of function arguments, and the root seed of a fit.

Each ``check_*`` gives a clean value back, or a ``TypeError``/``ValueError`` naming the
problem. The estimators declare the constraints of their parameters instead
(:mod:`dsgd_dask.estimators._constraints`).
"""

from __future__ import annotations

import numbers

import numpy as np


def check_int(value, name: str, minimum: int = 1) -> int:
    """An integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_float(value, name: str, minimum: float = 0.0, strict: bool = True) -> float:
    """A finite real number ``> minimum`` (``>=`` when ``strict`` is false)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    bad = value <= minimum if strict else value < minimum
    if not np.isfinite(value) or bad:
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be a finite number {op} {minimum}, got {value}")
    return value


def root_seed(random_state) -> int:
    """The root seed of a fit from a validated ``random_state``.

    The integer itself, fresh entropy for ``None``, or a draw from a ``RandomState`` or ``Generator``.
    """
    if random_state is None:
        return int(np.random.SeedSequence().entropy % (2**63))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    return int(random_state)

