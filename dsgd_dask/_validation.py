"""Small ``check_*`` helpers: a clean value back, or a ``TypeError``/``ValueError`` naming the problem."""

from __future__ import annotations

import numbers

import numpy as np


def check_int(value, name: str, minimum: int = 1, allow: tuple = ()) -> int:
    """An integer ``>= minimum`` (or one of the sentinels in ``allow``, returned as is)."""
    if isinstance(value, str) and value in allow:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        extra = f" or one of {allow}" if allow else ""
        raise TypeError(f"{name} must be an integer{extra}, got {value!r}")
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


def check_choice(value, name: str, choices) -> object:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_seed(random_state) -> int:
    """The root seed of a fit: the integer itself, fresh entropy for ``None``, or a draw."""
    if random_state is None:
        return int(np.random.SeedSequence().entropy % (2**63))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be a non-negative integer, got {random_state}")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    raise TypeError(f"random_state must be None, an int, a RandomState or a Generator, got {random_state!r}")
