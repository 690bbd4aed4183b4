"""Old pass kernels, frozen from ``git show 7640c38:...`` for the tests that compare the new kernel with them.

The estimators run on :func:`dsgd_dask.engine.passes.reduce_pass` now; these are the
kernels it replaced, kept here (unchanged but for the module prefixes) so that
``tests/test_pass_driver.py`` still shows the new kernel gives their sums bit for bit.

* ``features_in_graph``, ``_chunk_sums``, ``reduce_row_chunks``: ``dsgd_dask/engine/passes.py``
  (the reduction the old kernels shared; ``SLAB_ROWS`` and ``SPLIT_EVERY`` are read from
  the package, so a test that patches them patches both kernels);
* ``slab_ridge_sums``, ``ridge_pass``: ``dsgd_dask/engine/ridge.py`` (kernel ridge's first pass);
* ``_sections``, ``slab_cross_sums``, ``cross_pass``: ``dsgd_dask/engine/passes.py`` (kernel CCA's
  two-view pass; ``CrossSums``, which the package keeps, is read from it; ``slice_rows`` and
  ``_transposed_products`` as they were before the passes' slices and products changed);
* ``slab_sums``, ``_flat_slab_sums``, ``full_pass``: ``dsgd_dask/engine/passes.py`` (the pass of
  KernelPCA's subspace solver and of kernel ridge's conjugate gradients; ``PassSums`` is read
  from the package);
* ``slice_moments``, ``add_gram``, ``mirror_upper``, ``_chunk_moments``, ``pairwise_sum``,
  ``feature_moments``: ``dsgd_dask/baselines/_moments.py`` (the moments of the rca solvers;
  ``SLICE_ROWS`` is read from that module, ``GRAM_PANEL`` from ``passes``, whose value it had).
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dsgd_dask._threads import one_blas_thread, scratch
from dsgd_dask.baselines import _moments
from dsgd_dask.engine import passes
from dsgd_dask.engine.ridge import RidgeSums
from dsgd_dask.streams.inputs import DataView, check_finite_block


# -- dsgd_dask/engine/passes.py -------------------------------------------------------------------
def slice_rows(n_features: int) -> int:
    """Rows per slice: the slice's raw features fit in :data:`SLICE_FLOATS`."""
    return int(min(4096, max(128, passes.SLICE_FLOATS // max(n_features, 1))))


def _transposed_products(features, n_blocks: int, buf: np.ndarray, H: np.ndarray, out: np.ndarray) -> None:
    """``out[:M] += buf^T H`` (``H`` in the feature precision), page by page of blocks."""
    m = features.block_size
    bpp = features.blocks_per_page
    for b0 in range(0, n_blocks, bpp):
        b1 = min(b0 + bpp, n_blocks)
        out[b0 * m:b1 * m] += buf[:, b0 * m:b1 * m].T @ H


def _chunk_sums(block, slab_fn, *args, block_info=None):
    loc = block_info[0]["chunk-location"][0] if block_info else "?"
    check_finite_block(block, f"row chunk {loc}")
    return slab_fn(block, *args)[None]


def features_in_graph(features, token: str, ref=None, tag: str = ""):
    """The feature set as one key of a pass's graph: ``ref`` (a ``distributed`` future of it) or a delayed value."""
    if ref is not None:
        return ref
    return dask.delayed(features, name=f"dsgd-features-{tag}{tokenize(token)}", traverse=False)


def reduce_row_chunks(view: DataView, slab_fn, args: tuple, size: int, name: str, chunks=None) -> np.ndarray:
    """The sum over the row chunks of ``view`` of ``slab_fn(rows, *args)``, a flat float64 array of ``size``.

    A dask input gets one task per row chunk (named ``name-<token>``, its NaN/inf checked
    when it is read) and a tree reduction, computed on the active scheduler; numpy input
    is summed slab by slab of :data:`SLAB_ROWS` rows. ``chunks``, increasing indices into
    :func:`row_chunks`, restricts the sum to those row chunks. ``args`` may hold
    ``dask.delayed`` keys or ``distributed`` futures (the feature set, coefficients),
    which then enter the graph once, not with every task.
    """
    X = view.data
    if isinstance(X, da.Array):
        if X.numblocks[1] != 1:
            X = X.rechunk({1: -1})
        if chunks is not None:
            X = da.concatenate([X.blocks[int(i)] for i in chunks])
        parts = da.map_blocks(
            _chunk_sums, X, slab_fn, *args,
            dtype=np.float64,
            chunks=((1,) * X.numblocks[0], (size,)),
            meta=np.empty((0, 0), dtype=np.float64),
            name=f"{name}-{tokenize(X.name, name, args)}",
        )
        # unoptimised: the pass tasks keep their names on a dashboard
        (total,) = dask.compute(parts.sum(axis=0, split_every=passes.SPLIT_EVERY), optimize_graph=False)
        return total
    total = np.zeros(size)
    slab = passes.SLAB_ROWS
    for i in range(-(-X.shape[0] // slab)) if chunks is None else chunks:
        r0 = int(i) * slab
        total += slab_fn(X[r0:r0 + slab], *args)
    return total


# -- dsgd_dask/engine/ridge.py --------------------------------------------------------------------
def slab_ridge_sums(S: np.ndarray, features, n_blocks: int, x_cols: slice, y_cols: slice,
                    with_blocks: bool = True) -> np.ndarray:
    """Packed sums ``[sum z_b^T z_b (all blocks, with_blocks), sum z y^T, rows]`` of one slab of stacked rows.

    Without ``with_blocks`` the cross sums are over the raw features ``r`` (``sum r y^T``,
    whitened once by :func:`ridge_pass`): the rows skip the whitening products.
    """
    m = features.block_size
    M = n_blocks * m
    c = y_cols.stop - y_cols.start
    blocks = np.zeros((n_blocks if with_blocks else 0, m, m))
    cross = np.zeros((M, c))
    step = slice_rows(M)
    with one_blas_thread():
        for r0 in range(0, S.shape[0], step):
            part = S[r0:r0 + step]
            x = part[:, x_cols]
            Z = features.transform(x, 0, n_blocks) if with_blocks else features.raw_transform(x, 0, n_blocks)
            # float64 copies at a fixed alignment: the same BLAS path (and bits) in any process;
            # block by block of features, so the copy is rows x m, not rows x M
            yd = scratch("ridge-y", (Z.shape[0], c), np.float64)
            np.copyto(yd, part[:, y_cols])
            Zd = scratch("ridge-z", (Z.shape[0], m), np.float64)
            for b in range(n_blocks):
                zb = Z[:, b * m:(b + 1) * m]
                if with_blocks:
                    blocks[b] += zb.T @ zb
                np.copyto(Zd, zb)
                cross[b * m:(b + 1) * m] += Zd.T @ yd
    return np.concatenate([blocks.ravel(), cross.ravel(), [S.shape[0]]])


def ridge_pass(view: DataView, features, n_blocks: int, x_cols: slice, y_cols: slice, token: str = "",
               features_ref=None, with_blocks: bool = True) -> RidgeSums:
    """One pass over the stacked rows of ``view`` (inputs in ``x_cols``, targets in ``y_cols``).

    Without ``with_blocks`` only the right-hand side, ``E[z y^T] = N^T E[r y^T]`` from the
    raw features ``r`` (the blocks' moments and the rows' whitening are skipped: ``2 n M m``
    fewer multiply-adds).
    """
    m = features.block_size
    M = n_blocks * m
    c = y_cols.stop - y_cols.start
    nb = n_blocks * m * m if with_blocks else 0
    fkey = features
    if view.is_dask:
        fkey = features_in_graph(features, token, features_ref)
    total = reduce_row_chunks(view, slab_ridge_sums, (fkey, n_blocks, x_cols, y_cols, with_blocks), nb + M * c + 1,
                              "dsgd-ridge-pass")
    n = total[-1]
    blocks = total[:nb].reshape(n_blocks, m, m) / n if with_blocks else None
    cross = total[nb:-1].reshape(M, c) / n
    if not with_blocks:
        cross = features.unfold(cross)
    return RidgeSums(round(n), blocks, cross)


# -- dsgd_dask/engine/passes.py: the two-view pass of kernel CCA ------------------------------------
def _sections(features, Xp: np.ndarray, n_blocks: int, raw_coef: np.ndarray, shift: np.ndarray):
    """The raw features of prepared rows minus ``shift`` (``rows x M``) and their product with ``raw_coef``."""
    m = features.block_size
    rows = Xp.shape[0]
    buf = np.empty((rows, n_blocks * m), dtype=features.dtype)

    def first(b0, b1, page):
        r = features.raw(Xp, page, out=buf[:, b0 * m:b1 * m])
        r -= shift[b0 * m:b1 * m]
        return r @ raw_coef[b0 * m:b1 * m]

    u = np.zeros((rows, raw_coef.shape[1]))
    for up in features.map_pages(0, n_blocks, first, n_rows=rows):
        u += up
    return buf, u


def slab_cross_sums(S: np.ndarray, fx, fy, n_blocks: int, x_cols: slice, y_cols: slice, raw_a: np.ndarray,
                    raw_b: np.ndarray, shift_x: np.ndarray, shift_y: np.ndarray) -> np.ndarray:
    """Packed sums of one slab of stacked rows for :func:`cross_pass` (flat float64).

    With ``r``, ``s`` the raw features of the two views minus their shifts and
    ``H = [r raw_a, s raw_b]`` (``rows x 2q``): ``r^T H`` and ``sum r`` (``Mx x (2q + 1)``),
    ``s^T H`` and ``sum s`` (``My x (2q + 1)``), then ``sum H`` and the row count.
    """
    Mx, My, q = raw_a.shape[0], raw_b.shape[0], raw_a.shape[1]
    ox = np.zeros((Mx, 2 * q + 1))
    oy = np.zeros((My, 2 * q + 1))
    tail = np.zeros(2 * q + 1)
    step = slice_rows(Mx + My)
    with one_blas_thread():
        for r0 in range(0, S.shape[0], step):
            part = S[r0:r0 + step]
            bx, u = _sections(fx, fx.prepare(part[:, x_cols]), n_blocks, raw_a, shift_x)
            by, v = _sections(fy, fy.prepare(part[:, y_cols]), n_blocks, raw_b, shift_y)
            H = np.hstack([u, v])
            _transposed_products(fx, n_blocks, bx, H.astype(fx.dtype), ox[:, :2 * q])
            _transposed_products(fy, n_blocks, by, H.astype(fy.dtype), oy[:, :2 * q])
            ox[:, 2 * q] += bx.sum(axis=0, dtype=np.float64)
            oy[:, 2 * q] += by.sum(axis=0, dtype=np.float64)
            tail[:2 * q] += H.sum(axis=0)
            tail[2 * q] += part.shape[0]
    return np.concatenate([ox.ravel(), oy.ravel(), tail])




def cross_pass(view: DataView, features: tuple, n_blocks: int, A: np.ndarray, B: np.ndarray, shifts: tuple,
               cols: tuple[slice, slice], token: str = "", features_refs=None) -> passes.CrossSums:
    """The four covariance products of two views with ``q`` directions each, in one pass over the stacked rows.

    ``view`` stacks the rows of both views (columns ``cols``); ``A`` (``Mx x q``) and ``B``
    (``My x q``) are coefficients of the first ``n_blocks`` blocks of each view's
    ``features``; ``shifts`` the raw features' means on a sample. As :func:`full_pass`:
    one task per row chunk and a tree reduction for dask input, slabs for numpy, the
    feature sets (or their ``distributed`` futures, ``features_refs``) and the
    coefficients entering the graph once.
    """
    fx, fy = features
    q = A.shape[1]
    if B.shape[1] != q:
        raise ValueError(f"A and B must have the same number of columns, got {q} and {B.shape[1]}")
    raw_a = fx.fold(A).astype(fx.dtype)
    raw_b = fy.fold(B).astype(fy.dtype)
    sx = np.asarray(shifts[0], dtype=fx.dtype)
    sy = np.asarray(shifts[1], dtype=fy.dtype)
    Mx, My = raw_a.shape[0], raw_b.shape[0]
    args = (fx, fy, n_blocks, cols[0], cols[1], raw_a, raw_b, sx, sy)
    if view.is_dask:
        tok = tokenize(token, raw_a, raw_b, sx, sy, n_blocks)
        refs = tuple(features_in_graph(f, token, None if features_refs is None else features_refs[v], tag=f"{v}-")
                     for v, f in enumerate(features))
        args = (refs[0], refs[1], n_blocks, cols[0], cols[1],
                *(dask.delayed(a, name=f"dsgd-{name}-{tok}", traverse=False)
                  for name, a in (("coef-x", raw_a), ("coef-y", raw_b), ("shift-x", sx), ("shift-y", sy))))
    w = 2 * q + 1
    total = reduce_row_chunks(view, slab_cross_sums, args, (Mx + My) * w + w, "dsgd-cross-pass")
    ox = total[:Mx * w].reshape(Mx, w)
    oy = total[Mx * w:(Mx + My) * w].reshape(My, w)
    tail = total[(Mx + My) * w:]
    n = tail[2 * q]
    hbar = tail[:2 * q] / n
    out = []
    for f, o in ((fx, ox), (fy, oy)):
        prod = f.unfold(o[:, :2 * q]) / n
        delta = f.unfold(o[:, 2 * q:])[:, 0] / n
        prod -= np.outer(delta, hbar)
        out.append((prod, delta))
    (px, dx), (py, dy) = out
    mean_x = fx.unfold(sx.astype(np.float64)[:, None])[:, 0] + dx
    mean_y = fy.unfold(sy.astype(np.float64)[:, None])[:, 0] + dy
    return passes.CrossSums(round(n), px[:, :q], px[:, q:], py[:, q:], py[:, :q], mean_x, mean_y)


# -- dsgd_dask/engine/passes.py: the one-view pass of KernelPCA's subspace solver (full_pass) ----------
def slab_sums(X: np.ndarray, features, n_blocks: int, raw_coef: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """The packed sums of one slab of rows for :func:`full_pass`: ``(M + 1) x (p + 1)`` float64.

    With ``r`` the raw features minus ``shift`` and ``u = r raw_coef``: ``r^T u`` and
    ``sum r`` (first ``M`` rows), ``sum u`` and the row count (last row).
    """
    M, p = raw_coef.shape
    out = np.zeros((M + 1, p + 1))
    step = slice_rows(M)
    with one_blas_thread():
        for r0 in range(0, X.shape[0], step):
            buf, u = _sections(features, features.prepare(X[r0:r0 + step]), n_blocks, raw_coef, shift)
            _transposed_products(features, n_blocks, buf, u.astype(features.dtype), out[:M, :p])
            out[:M, p] += buf.sum(axis=0, dtype=np.float64)
            out[M, :p] += u.sum(axis=0)
            out[M, p] += buf.shape[0]
    return out


def _flat_slab_sums(X, features, n_blocks, raw_coef, shift) -> np.ndarray:
    return slab_sums(X, features, n_blocks, raw_coef, shift).ravel()


def full_pass(view: DataView, features, n_blocks: int, V: np.ndarray, shift: np.ndarray, center: bool,
              token: str = "", features_ref=None, chunks=None, whitening=None) -> passes.PassSums:
    """``Cov(z) V`` and the mean of ``z`` over every row of ``view``, in one pass.

    ``V`` holds ``p`` coefficient vectors of the features of the first ``n_blocks``
    blocks; ``shift`` is the raw features' mean on a sample. ``features_ref`` may be a
    ``distributed`` future of ``features``; ``chunks`` restricts the pass to those row
    chunks; ``whitening`` (a ``JointWhitening``) replaces the features' own map between
    coefficients and raw features.
    """
    M = n_blocks * features.block_size
    linear = features if whitening is None else whitening
    raw_coef = linear.fold(V).astype(features.dtype)
    shift = np.asarray(shift, dtype=features.dtype)
    p = V.shape[1]
    args = (features, n_blocks, raw_coef, shift)
    if view.is_dask:
        tok = tokenize(token, raw_coef, shift, n_blocks)
        # the feature set and the coefficients enter the graph once, not with every task
        args = (features_in_graph(features, token, features_ref), n_blocks,
                dask.delayed(raw_coef, name=f"dsgd-coef-{tok}", traverse=False),
                dask.delayed(shift, name=f"dsgd-shift-{tok}", traverse=False))
    total = reduce_row_chunks(view, _flat_slab_sums, args, (M + 1) * (p + 1), "dsgd-pass",
                              chunks=chunks).reshape(M + 1, p + 1)
    n = total[M, p]
    # one solve for all three when the map is a triangular solve
    unfolded = linear.unfold(np.hstack([total[:M, :p + 1], shift.astype(np.float64)[:, None]]))
    cov_times = unfolded[:, :p] / n
    delta = unfolded[:, p] / n
    mean_raw_shift = unfolded[:, p + 1]
    ubar = total[M, :p] / n
    if center:
        cov_times -= np.outer(delta, ubar)
    else:
        # E[z z^T] V from the shifted sums: add back the shift's contributions
        sV = mean_raw_shift @ V
        cov_times += np.outer(mean_raw_shift, ubar) + np.outer(delta, sV) + np.outer(mean_raw_shift, sV)
    return passes.PassSums(round(n), cov_times, mean_raw_shift + delta)


# -- dsgd_dask/baselines/_moments.py: the moments of the rca solvers ----------------------------------
def slice_moments(X: np.ndarray, fmap, shift: np.ndarray) -> np.ndarray:
    """Sums over the rows of ``X`` of ``[z - shift, 1]^T [z - shift, 1]``, float64 ``(M+1, M+1)``.

    Products in the features' precision over slices of ``_moments.SLICE_ROWS`` rows, added
    up in float64.
    """
    M = fmap.n_features
    out = np.zeros((M + 1, M + 1))
    for r in range(0, X.shape[0], _moments.SLICE_ROWS):
        z = fmap(X[r:r + _moments.SLICE_ROWS])
        za = np.empty((z.shape[0], M + 1), dtype=z.dtype)
        np.subtract(z, shift.astype(z.dtype, copy=False), out=za[:, :M])
        za[:, M] = 1
        add_gram(out, za)
    return mirror_upper(out)


def add_gram(out: np.ndarray, a: np.ndarray) -> None:
    """``out += a^T a`` on the tiles on and above the diagonal (``GRAM_PANEL`` columns each)."""
    M = a.shape[1]
    for j in range(0, M, passes.GRAM_PANEL):
        stop = min(j + passes.GRAM_PANEL, M)
        out[:stop, j:stop] += a[:, :stop].T @ a[:, j:stop]


def mirror_upper(out: np.ndarray) -> np.ndarray:
    """Copy the tiles above the diagonal (``GRAM_PANEL`` columns each) to those below, in place."""
    M = out.shape[0]
    for j in range(0, M, passes.GRAM_PANEL):
        stop = min(j + passes.GRAM_PANEL, M)
        out[stop:, j:stop] = out[j:stop, stop:].T
        block = out[j:stop, j:stop]
        block[...] = np.triu(block) + np.triu(block, 1).T
    return out


def _chunk_moments(block: np.ndarray, fmap, shift: np.ndarray, block_info=None) -> np.ndarray:
    loc = block_info[0]["chunk-location"][0] if block_info else "?"
    check_finite_block(block, f"row chunk {loc}")
    with one_blas_thread():
        return slice_moments(block, fmap, shift)[None]


def pairwise_sum(parts: list):
    """The sum of delayed arrays as a binary tree of additions, in a fixed order."""
    while len(parts) > 1:
        parts = [dask.delayed(np.add, pure=True)(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def feature_moments(view: DataView, fmap, shift: np.ndarray, center: bool = True, token: str = ""):
    """``(n, mean, cov)``: the mean and covariance (``center``) or second moment of the features, in one pass.

    Numpy input is summed as one slab; a dask input gets one task per row chunk and a
    binary tree of additions (:func:`pairwise_sum`).
    """
    M = fmap.n_features
    shift = np.asarray(shift, dtype=np.float64)
    X = view.data
    if isinstance(X, da.Array):
        parts = X.map_blocks(
            _chunk_moments, fmap, shift,
            dtype=np.float64,
            chunks=((1,) * X.numblocks[0], (M + 1,), (M + 1,)),
            new_axis=2,
            meta=np.empty((0, 0, 0), dtype=np.float64),
            name=f"feature-moments-{tokenize(X.name, token, shift)}",
        )
        (total,) = dask.compute(pairwise_sum(parts.to_delayed().ravel().tolist()))
        total = total[0]
    else:
        # on one BLAS thread, as the dask path and the new kernel: the multi-threaded product's
        # rounding depends on the thread count and the BLAS kernel, which is not what is compared
        with one_blas_thread():
            total = slice_moments(X, fmap, shift)
    n = total[M, M]
    delta = total[:M, M] / n
    second = total[:M, :M] / n
    if center:
        mean = shift + delta
        cov = second - np.outer(delta, delta)
    else:
        mean = np.zeros(M)
        cov = second + np.outer(shift, delta) + np.outer(delta, shift) + np.outer(shift, shift)
    cov = 0.5 * (cov + cov.T)
    return round(n), mean, cov
