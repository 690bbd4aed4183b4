"""Compiled L1-family kernel sections: Laplacian and Cauchy kernels of rows against landmarks.

Neither kernel is a function of an inner product, so no GEMM forms them. The loops here
are compiled by Numba for the machine they run on and release the GIL, so the pass's
threads run them side by side. Each takes a micro tile of :data:`TILE_ROWS` rows by
:data:`TILE_COLUMNS` landmarks with one vector accumulator per pair over the input
features (in the L1 cache), and tiles of :data:`CACHE_COLUMNS` landmarks (in the L2
cache). Rows and landmarks beyond a multiple of the micro tile repeat the last one, so
every entry goes through the same code in the same order: a section does not depend on
where its row sits in a chunk or a slice, nor on which other landmarks are evaluated with
it.

Laplacian: ``|x - l|_1 = sum_k (2 max(x_k, l_k) - x_k - l_k)``: one maximum and one
accumulation per term, where a subtraction, an absolute value and an addition take three.
The accumulation is written as a multiply-add by a run-time one, which the compiler
cannot drop: timed on an AVX2 processor, the maximum and the multiply-add then overlap
(they take different execution ports), where a maximum and an addition do not. The
rounding error is that of the inputs' magnitudes, ``eps sum_k |x_k| + |l_k|``: the rows
are shifted by the data's center before they reach the sections
(:meth:`~dsgd_dask.features.blocks.FeatureBlocks.prepare`).

Cauchy: ``1 / prod_k (1 + (x_k - l_k)^2)`` of inputs scaled by ``1 / sigma``; a product
that overflows is a kernel value below the smallest normal float, and gives 0.
"""

from __future__ import annotations

import numba
import numpy as np

#: Rows and landmarks of a micro tile: 8 accumulators, 4 + 2 operands in the 16 vector registers.
TILE_ROWS, TILE_COLUMNS = 4, 2

#: Landmarks per cache tile: 48 landmarks of 784 float32 features take 150 KiB of a core's L2 cache.
CACHE_COLUMNS = 48

# reassociation vectorises the sums over the input features and contraction makes the
# multiply-adds; no assumption about infinities, which the Cauchy products may reach
_FLAGS = {"reassoc", "contract", "nsz"}


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True)
def _row_sums(A, out):
    n, d = A.shape
    for i in range(n):
        s = out.dtype.type(0)
        for k in range(d):
            s += A[i, k]
        out[i] = s
    return out


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True, inline="always")
def _term(acc, x, y, one, product):
    """One input feature's term of an entry: ``acc (1 + (x - y)^2)`` or ``acc + max(x, y)``."""
    if product:
        t = x - y
        return acc * (t * t + one)
    return acc + max(x, y) * one


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True)
def _tiles(X, L, start, one, product, out):
    """``out[i, j]``: the terms of :func:`_term` folded over the input features from ``start``, tile by tile.

    ``product`` is compiled as a constant (one loop for each value), not tested per term.
    """
    numba.literally(product)
    r, d = X.shape
    m = L.shape[0]
    for c0 in range(0, m, CACHE_COLUMNS):
        c1 = min(c0 + CACHE_COLUMNS, m)
        for i in range(0, r, TILE_ROWS):
            i1, i2, i3 = min(i + 1, r - 1), min(i + 2, r - 1), min(i + 3, r - 1)
            for j in range(c0, c1, TILE_COLUMNS):
                j1 = min(j + 1, m - 1)
                a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = start
                for k in range(d):
                    x0, x1, x2, x3 = X[i, k], X[i1, k], X[i2, k], X[i3, k]
                    l0, l1 = L[j, k], L[j1, k]
                    a00 = _term(a00, x0, l0, one, product)
                    a01 = _term(a01, x0, l1, one, product)
                    a10 = _term(a10, x1, l0, one, product)
                    a11 = _term(a11, x1, l1, one, product)
                    a20 = _term(a20, x2, l0, one, product)
                    a21 = _term(a21, x2, l1, one, product)
                    a30 = _term(a30, x3, l0, one, product)
                    a31 = _term(a31, x3, l1, one, product)
                # rows and landmarks beyond the ends repeat the last one: same values, stored again
                out[i3, j1], out[i3, j], out[i2, j1], out[i2, j] = a31, a30, a21, a20
                out[i1, j1], out[i1, j], out[i, j1], out[i, j] = a11, a10, a01, a00
    return out


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True)
def laplacian_exponents(X, L, scale, one, out):
    """``out[i, j] = -scale |X_i - L_j|_1``, the exponent of a Laplacian section, in the precision of ``X``.

    ``one`` is 1, passed at run time so that the compiler keeps the multiply-adds.
    """
    zero = out.dtype.type(0)
    _tiles(X, L, zero, one, False, out)
    sx = _row_sums(X, np.empty(X.shape[0], dtype=out.dtype))
    sl = _row_sums(L, np.empty(L.shape[0], dtype=out.dtype))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = -scale * max(2 * out[i, j] - sx[i] - sl[j], zero)
    return out


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True)
def cauchy_sections(X, L, out):
    """``out[i, j] = 1 / prod_k (1 + (X_ik - L_jk)^2)`` of scaled inputs, in the precision of ``X``."""
    unit = out.dtype.type(1)
    _tiles(X, L, unit, unit, True, out)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = unit / out[i, j]
    return out
