"""Fast seeded draws for the frequencies of the feature blocks.

Regenerating the frequencies of every block is the cost of a step when nothing is
cached (``d x M`` draws against ``2 B d M`` flops), so the draws are made from uniform
numbers with vectorised transcendental functions, several times faster than numpy's
ziggurat samplers:

* normal: Box-Muller, ``sqrt(-2 log u1) (cos, sin)(2 pi u2)``, a pair from two uniforms;
* Cauchy: ``tan(pi (u - 1/2))``;
* Laplace: ``log u2 - log u1`` (the difference of two standard exponentials).

The uniforms have the resolution of the output precision (``2^-24`` in float32, ``2^-53``
in float64) and lie in ``(0, 1]`` where a logarithm is taken, so every draw is finite: the
normal's tails are cut at ``sqrt(-2 log 2^-24) = 5.8`` standard deviations in float32
(8.6 in float64), a probability of ``6e-8`` per pair, far below the Monte Carlo error of
any feature count; Cauchy draws are at most ``2^25 / pi`` in magnitude. The feature
blocks draw in float32 whatever their precision (float64 trigonometry is several times
slower; see :func:`dsgd_dask.features.kernels.sample_frequencies`).
"""

from __future__ import annotations

import numpy as np


def _uniform_open_closed(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` with uniforms in ``(0, 1]``."""
    rng.random(out=out, dtype=out.dtype)
    np.subtract(out.dtype.type(1.0), out, out=out)
    return out


def standard_normal(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """Fill the C-contiguous float array ``out`` with standard normal draws (Box-Muller)."""
    flat = out.reshape(-1)
    dtype = flat.dtype.type
    n = flat.size
    half = n // 2
    if half:
        rng.random(out=flat[: 2 * half], dtype=flat.dtype)
        r = flat[:half]
        np.subtract(dtype(1.0), r, out=r)  # (0, 1] for the logarithm; the angle keeps [0, 1)
        np.log(r, out=r)
        r *= dtype(-2.0)
        np.sqrt(r, out=r)
        theta = flat[half: 2 * half]
        theta *= dtype(2.0 * np.pi)
        s = np.sin(theta)
        np.cos(theta, out=theta)
        theta *= r
        np.multiply(r, s, out=r)
    if n % 2:
        u = np.empty(2, dtype=flat.dtype)
        _uniform_open_closed(rng, u)
        flat[-1] = np.sqrt(dtype(-2.0) * np.log(u[0])) * np.cos(dtype(2.0 * np.pi) * u[1])
    return out


def standard_cauchy(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` with standard Cauchy draws: ``tan(pi (u - 1/2))``, ``u`` in ``(0, 1)``."""
    dtype = out.dtype.type
    rng.random(out=out, dtype=out.dtype)  # [0, 1 - eps/2]
    out += dtype(np.finfo(out.dtype).epsneg / 2 - 0.5)  # centred, symmetric, never +-1/2
    out *= dtype(np.pi)
    np.tan(out, out=out)
    return out


def standard_laplace(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` with standard Laplace draws: ``log u2 - log u1`` with ``u`` in ``(0, 1]``."""
    _uniform_open_closed(rng, out)
    np.log(out, out=out)
    other = _uniform_open_closed(rng, np.empty_like(out))
    np.log(other, out=other)
    out -= other
    return out
