"""Full-data passes: ``Cov(z) V`` over every row, as a reduction over row chunks.

One pass multiplies the feature covariance by a block of ``p`` coefficient vectors
without forming it. Each row chunk gives additive sums (packed in one
``(M + 1) x (p + 1)`` float64 array: ``sum r^T (r B)``, ``sum r``, ``sum r B`` and the row
count, over the raw features ``r`` of the chunk minus a fixed shift, with ``B`` the
coefficients folded into raw-feature space); a dask input gets one task per row chunk and
a tree reduction of the sums, so a pass reads the data once, never gathers it, and runs
on every worker of a cluster at once. The feature set and the coefficients enter the
graph once, as keys every chunk task depends on.

Within a chunk, rows are taken in slices and the pages of features of a slice are
evaluated in parallel threads, each with one BLAS thread, and combined in page order: a
chunk's sums, and so the pass, are the same on any scheduler and any number of workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dsgd_dask._threads import map_ordered, one_blas_thread
from dsgd_dask.streams.inputs import DataView, check_finite_block

#: Floats of raw features held for one slice of rows (64 MiB in float32).
SLICE_FLOATS = 1 << 24
#: Fan-in of the tree reduction over row chunks.
SPLIT_EVERY = 4
#: Rows of a row chunk of in-memory (numpy) data.
SLAB_ROWS = 1 << 15


def slice_rows(n_features: int) -> int:
    """Rows per slice: the slice's raw features fit in :data:`SLICE_FLOATS`."""
    return int(min(4096, max(128, SLICE_FLOATS // max(n_features, 1))))


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


def _transposed_products(features, n_blocks: int, buf: np.ndarray, H: np.ndarray, out: np.ndarray) -> None:
    """``out[:M] += buf^T H`` (``H`` in the feature precision), page by page of blocks in parallel threads."""
    m = features.block_size
    spans = _spans(features, n_blocks)

    def second(span):
        b0, b1 = span
        return buf[:, b0 * m:b1 * m].T @ H

    parts = map_ordered(second, spans, parallel=buf.shape[0] * buf.shape[1] * H.shape[1] >= (1 << 21))
    for (b0, b1), part in zip(spans, parts, strict=True):
        out[b0 * m:b1 * m] += part


def slab_sums(X: np.ndarray, features, n_blocks: int, raw_coef: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """The packed sums of one slab of rows (see the module docstring).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Rows (any real dtype; converted to the feature precision).
    features : RandomFeatures or NystroemFeatures
    n_blocks : int
        Blocks of features in use.
    raw_coef : ndarray of shape (n_blocks * m, p)
        Coefficients in raw-feature space (``features.fold``), in the feature precision.
    shift : ndarray of shape (n_blocks * m,)
        Subtracted from the raw features (near their mean: no cancellation in float32).
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


def _spans(features, n_blocks: int) -> list[tuple[int, int]]:
    bpp = features.blocks_per_page
    return [(b, min(b + bpp, n_blocks)) for b in range(0, n_blocks, bpp)]


def _flat_slab_sums(X, features, n_blocks, raw_coef, shift) -> np.ndarray:
    return slab_sums(X, features, n_blocks, raw_coef, shift).ravel()


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
        (total,) = dask.compute(parts.sum(axis=0, split_every=SPLIT_EVERY), optimize_graph=False)
        return total
    total = np.zeros(size)
    for i in range(-(-X.shape[0] // SLAB_ROWS)) if chunks is None else chunks:
        r0 = int(i) * SLAB_ROWS
        total += slab_fn(X[r0:r0 + SLAB_ROWS], *args)
    return total


@dataclass
class PassSums:
    """The sums of one pass, in the space of the (whitened) features.

    ``cov_times`` is ``Cov(z) V`` (centred) or ``E[z z^T] V``; ``mean`` the mean feature
    vector; ``n`` the rows seen.
    """

    n: int
    cov_times: np.ndarray  # (M, p)
    mean: np.ndarray  # (M,)


def row_chunks(view: DataView) -> tuple[int, ...]:
    """Rows of each row chunk of ``view``: its dask chunks, or slabs of :data:`SLAB_ROWS` rows."""
    if view.is_dask:
        return tuple(int(c) for c in view.data.chunks[0])
    n = view.n_samples
    return tuple(min(SLAB_ROWS, n - r0) for r0 in range(0, n, SLAB_ROWS))


def full_pass(view: DataView, features, n_blocks: int, V: np.ndarray, shift: np.ndarray, center: bool,
              token: str = "", features_ref=None, chunks=None, whitening=None) -> PassSums:
    """``Cov(z) V`` and the mean of ``z`` over every row of ``view``, in one pass.

    ``V`` holds ``p`` coefficient vectors of the features of the first ``n_blocks``
    blocks; ``shift`` is the raw features' mean on a sample. A dask input gets one task
    per row chunk and a tree reduction (computed on the active scheduler); numpy input is
    summed slab by slab. ``features_ref`` may be a ``distributed`` future of
    ``features`` already on the workers (sent once per fit, not once per pass).
    ``chunks``, increasing indices into :func:`row_chunks`, restricts the pass to
    those row chunks (the sums are then over their rows only). ``whitening`` (a
    :class:`~dsgd_dask.features.whitening.JointWhitening` of kernel-section features)
    replaces the features' own map between coefficients and raw features: it is applied
    here, on the coefficients and the sums, and never enters the graph.
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
    return PassSums(round(n), cov_times, mean_raw_shift + delta)


# -- two views -------------------------------------------------------------------------------
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


@dataclass
class CrossSums:
    """The centred products of one two-view pass, in the space of the (whitened) features.

    ``xx = Cov(z_x) A``, ``xy = Cov(z_x, z_y) B``, ``yy = Cov(z_y) B``, ``yx = Cov(z_y, z_x) A``;
    ``mean_x``, ``mean_y`` the mean feature vectors; ``n`` the rows seen.
    """

    n: int
    xx: np.ndarray
    xy: np.ndarray
    yy: np.ndarray
    yx: np.ndarray
    mean_x: np.ndarray
    mean_y: np.ndarray


def cross_pass(view: DataView, features: tuple, n_blocks: int, A: np.ndarray, B: np.ndarray, shifts: tuple,
               cols: tuple[slice, slice], token: str = "", features_refs=None) -> CrossSums:
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
    return CrossSums(round(n), px[:, :q], px[:, q:], py[:, q:], py[:, :q], mean_x, mean_y)
