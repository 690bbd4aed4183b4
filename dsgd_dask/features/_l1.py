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

Laplacian: ``|x - l|_1 = sum_k (2 max(x_k, l_k) - x_k - l_k)``. The maximum and one
accumulation per term go to different execution ports (a subtraction, an absolute value
and an addition would share two), and the accumulation is written as a multiply-add with
a run-time one, which keeps it on the multiply-add ports. The rounding error is that of
the inputs' magnitudes, ``eps sum_k |x_k| + |l_k|``: the rows are shifted by the data's
center before they reach the sections (:meth:`~dsgd_dask.features.blocks.FeatureBlocks.prepare`).

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


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True)
def laplacian_exponents(X, L, scale, one, out):
    """``out[i, j] = -scale |X_i - L_j|_1``, the exponent of a Laplacian section, in the precision of ``X``."""
    r, d = X.shape
    m = L.shape[0]
    sx = _row_sums(X, np.empty(r, dtype=out.dtype))
    sl = _row_sums(L, np.empty(m, dtype=out.dtype))
    zero = out.dtype.type(0)
    for c0 in range(0, m, CACHE_COLUMNS):
        c1 = min(c0 + CACHE_COLUMNS, m)
        for i in range(0, r, TILE_ROWS):
            i1, i2, i3 = min(i + 1, r - 1), min(i + 2, r - 1), min(i + 3, r - 1)
            for j in range(c0, c1, TILE_COLUMNS):
                j1 = min(j + 1, m - 1)
                a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = zero
                for k in range(d):
                    x0, x1, x2, x3 = X[i, k], X[i1, k], X[i2, k], X[i3, k]
                    l0, l1 = L[j, k], L[j1, k]
                    a00 += max(x0, l0) * one
                    a01 += max(x0, l1) * one
                    a10 += max(x1, l0) * one
                    a11 += max(x1, l1) * one
                    a20 += max(x2, l0) * one
                    a21 += max(x2, l1) * one
                    a30 += max(x3, l0) * one
                    a31 += max(x3, l1) * one
                # rows and landmarks beyond the ends repeat the last one: same values, stored again
                out[i3, j1], out[i3, j], out[i2, j1], out[i2, j] = a31, a30, a21, a20
                out[i1, j1], out[i1, j], out[i, j1], out[i, j] = a11, a10, a01, a00
            for ii in range(i, min(i + TILE_ROWS, r)):
                for j in range(c0, c1):
                    out[ii, j] = -scale * max(2 * out[ii, j] - sx[ii] - sl[j], zero)
    return out


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True)
def cauchy_sections(X, L, out):
    """``out[i, j] = 1 / prod_k (1 + (X_ik - L_jk)^2)`` of scaled inputs, in the precision of ``X``."""
    r, d = X.shape
    m = L.shape[0]
    unit = out.dtype.type(1)
    for c0 in range(0, m, CACHE_COLUMNS):
        c1 = min(c0 + CACHE_COLUMNS, m)
        for i in range(0, r, TILE_ROWS):
            i1, i2, i3 = min(i + 1, r - 1), min(i + 2, r - 1), min(i + 3, r - 1)
            for j in range(c0, c1, TILE_COLUMNS):
                j1 = min(j + 1, m - 1)
                a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = unit
                for k in range(d):
                    x0, x1, x2, x3 = X[i, k], X[i1, k], X[i2, k], X[i3, k]
                    l0, l1 = L[j, k], L[j1, k]
                    t = x0 - l0
                    a00 *= t * t + unit
                    t = x0 - l1
                    a01 *= t * t + unit
                    t = x1 - l0
                    a10 *= t * t + unit
                    t = x1 - l1
                    a11 *= t * t + unit
                    t = x2 - l0
                    a20 *= t * t + unit
                    t = x2 - l1
                    a21 *= t * t + unit
                    t = x3 - l0
                    a30 *= t * t + unit
                    t = x3 - l1
                    a31 *= t * t + unit
                out[i3, j1], out[i3, j], out[i2, j1], out[i2, j] = a31, a30, a21, a20
                out[i1, j1], out[i1, j], out[i, j1], out[i, j] = a11, a10, a01, a00
            for ii in range(i, min(i + TILE_ROWS, r)):
                for j in range(c0, c1):
                    out[ii, j] = unit / out[ii, j]
    return out
