"""Full-data passes: sums over every row of features and their products, as a reduction over row chunks.

A pass multiplies the feature covariance by a block of ``p`` coefficient vectors without
forming it (``Cov(z) V``; the cross products of two views), or takes the moments of the
features (each block's ``z_b^T z_b`` and ``z^T y`` for ridge regression, the whole
``[z, 1]^T [z, 1]`` for the rca solvers). Each row chunk gives additive sums over the
features ``z`` of its rows minus a fixed shift; a dask input gets one task per row chunk
and a tree reduction of the sums, so a pass reads the data once, never gathers it, and
runs on every worker of a cluster at once. The feature set, the coefficients and the
shifts enter the graph once, as keys every chunk task depends on.

Within a chunk, rows are taken in slices fixed by the pass (never by the machine), computed
in parallel threads, each with one BLAS thread, and added in slice order; a slice's pages
of features are combined in page order: a chunk's sums, and so the pass, are the same on
any scheduler and any number of workers.

One kernel takes the sums of every pass: :func:`reduce_pass` of a :class:`PassRequest`
(per view of the stacked rows, its features and the sums asked of them), with the
requests and results of the passes the solvers take (:func:`covariance_request` and
:func:`covariance_times`, :func:`cross_request` and :func:`cross_covariances`,
:func:`moment_request` and :func:`ridge_moments`, :func:`gram_request` and
:func:`feature_covariance`). The solvers run it through the pass driver
(:mod:`dsgd_dask.engine.driver`). It replaced four kernels (``full_pass``, ``cross_pass``,
``ridge_pass``, the rca moments; frozen in ``tests/_old_kernels.py`` for the comparison):
its block moments, targets and Gram sums are theirs bit for bit; its products with
directions and their sums are taken in slices of :data:`PRODUCT_SLICE_ROWS` rows, with
the sums as the products' column of ones, so they differ from theirs by float32 rounding.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dsgd_dask._threads import imap_ordered, map_ordered, one_blas_thread, scratch
from dsgd_dask.streams.inputs import DataView, check_finite_block

#: Floats of raw features held for one slice of rows (64 MiB in float32).
SLICE_FLOATS = 1 << 24
#: Fan-in of the tree reduction over row chunks.
SPLIT_EVERY = 4
#: Rows of a row chunk of in-memory (numpy) data.
SLAB_ROWS = 1 << 15


#: Rows per slice of a pass that takes only products with directions and sums: the
#: skinny products ``u = z V`` and ``z^T [H, 1]`` run at about 1.3 times the rate on a
#: slice of 1024 rows (16 MiB of features at 4096) as on one of 4096 (64 MiB).
PRODUCT_SLICE_ROWS = 1024
#: Columns of the skinny products are padded with zeros to a multiple of this (the float32
#: lanes of an AVX-512 register): OpenBLAS's kernels take 32 columns faster than 30 or 31.
LANES = 16


def slice_rows(n_features: int, products_only: bool = False) -> int:
    """Rows per slice: the slice's raw features fit in :data:`SLICE_FLOATS`, at most 4096 rows.

    ``products_only`` (a pass that takes no block moments, targets or Gram): at most
    :data:`PRODUCT_SLICE_ROWS` rows.
    """
    return int(min(PRODUCT_SLICE_ROWS if products_only else 4096, max(128, SLICE_FLOATS // max(n_features, 1))))


def _lanes(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`LANES`."""
    return -(-int(n) // LANES) * LANES


def _transposed_products(features, n_blocks: int, buf: np.ndarray, H: np.ndarray) -> list:
    """``[(columns, buf[:, columns]^T H)]`` (``H`` in the feature precision), by pages of blocks in parallel threads."""
    m = features.block_size
    spans = _spans(features, n_blocks)

    def second(span):
        b0, b1 = span
        return buf[:, b0 * m:b1 * m].T @ H

    parts = map_ordered(second, spans, parallel=buf.shape[0] * buf.shape[1] * H.shape[1] >= (1 << 21))
    return [(slice(b0 * m, b1 * m), part) for (b0, b1), part in zip(spans, parts, strict=True)]


def _spans(features, n_blocks: int) -> list[tuple[int, int]]:
    bpp = features.blocks_per_page
    return [(b, min(b + bpp, n_blocks)) for b in range(0, n_blocks, bpp)]


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


# -- two views -------------------------------------------------------------------------------
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


# -- one reduction kernel for every pass ------------------------------------------------------------
#
# A pass asks, per view of the stacked rows, for some sums of the view's features ``z``:
# ``z^T H`` with ``H`` the rows' products with directions (``z^T z V``, and the cross
# products of two views), ``sum z``, each block's ``z_b^T z_b``, ``z^T y`` for targets and
# the whole ``[z, 1]^T [z, 1]``. One function takes them all over a chunk of rows, slice by
# slice: the same products of the same shapes in the same precision, added in the same
# order, wherever the slices are computed. Row chunks are added as a fixed tree (consecutive
# groups of ``fan_in``, level by level; numpy input as slabs of :data:`SLAB_ROWS` rows, through
# the same tree), so the totals are the same on any scheduler and any number of workers.

#: Where a view's features come from (:class:`PassView`).
SPACES = ("raw", "features", "map")
#: Rows per slice of the feature moments (:func:`gram_request`): those of the rca baselines.
GRAM_SLICE_ROWS = 2048
#: Columns per GEMM of a Gram matrix (:func:`add_gram`).
GRAM_PANEL = 2048


@dataclass(frozen=True, eq=False)
class PassView:
    """One view of a pass: how its features ``z`` are made from the rows, and which sums of them to take.

    Parameters
    ----------
    features : RandomFeatures, NystroemFeatures or callable
        A feature set, evaluated page by page of blocks; or (``space="map"``) a feature map
        ``rows -> z`` with an ``n_features`` attribute (the rca feature maps).
    n_blocks : int, default=1
        Blocks of ``features`` in use, ``M = n_blocks * block_size`` (ignored for a map).
    cols : slice, optional
        The view's columns of the stacked rows (default: all).
    space : {"raw", "features", "map"}, default="raw"
        ``"raw"``: the raw features (a Nyström set's kernel sections; its whitening, or a
        :class:`~dsgd_dask.features.whitening.JointWhitening`, is applied to coefficients by
        ``fold`` before the pass and to sums by ``unfold`` after it, never to the rows);
        ``"features"``: the features themselves; ``"map"``: ``features(rows)``.
    shift : ndarray of shape (M,), optional
        Subtracted from ``z`` in its precision (close to the mean: float32 sums without
        cancellation).
    directions : ndarray of shape (M, p), optional
        Coefficients in the view's space: the pass forms ``u = z directions`` page by page
        of blocks (pages added in float64; the columns padded with zeros to a multiple of
        :data:`LANES`). ``H`` is the ``u`` of every view, side by side.
    products : bool, default=False
        Take ``z^T H`` (``M x P``), in the features' precision per slice of rows.
    sums : bool, default=False
        Take ``sum z``: with ``products``, as their column of ones (``z^T [H, 1]``, in the
        features' precision per slice of rows); without, in float64.
    blocks : bool, default=False
        Take each block's ``z_b^T z_b`` (``n_blocks x m x m``).
    targets : slice, optional
        Columns of the stacked rows holding targets ``y``: take ``z^T y`` in float64.
    gram : bool, default=False
        Take ``[z, 1]^T [z, 1]`` (``(M + 1) x (M + 1)``, products per panel of
        :data:`GRAM_PANEL` columns in the features' precision).
    """

    features: object
    n_blocks: int = 1
    cols: slice | None = None
    space: str = "raw"
    shift: np.ndarray | None = None
    directions: np.ndarray | None = None
    products: bool = False
    sums: bool = False
    blocks: bool = False
    targets: slice | None = None
    gram: bool = False

    def __post_init__(self):
        if self.space not in SPACES:
            raise ValueError(f"space must be one of {SPACES}, got {self.space!r}")
        if self.space == "map" and (self.directions is not None or self.products or self.blocks
                                    or self.targets is not None):
            raise ValueError("a feature map (space='map') takes only sums and gram; directions, products, "
                             "blocks and targets need a feature set evaluated by blocks")
        if self.targets is not None and (self.targets.start is None or self.targets.stop is None
                                         or self.targets.step not in (None, 1)):
            raise ValueError(f"targets must be a slice with a start and a stop, got {self.targets}")

    @property
    def n_features(self) -> int:
        """``M``, the features of the view."""
        if self.space == "map":
            return int(self.features.n_features)
        return int(self.n_blocks) * int(self.features.block_size)


@dataclass(frozen=True, eq=False)
class PassRequest:
    """What one pass reduces: its views (:class:`PassView`) and how the rows are taken.

    Parameters
    ----------
    views : tuple of PassView
    chunks : tuple of int, optional
        Increasing indices into :func:`row_chunks`: the pass covers those row chunks only.
    rows_per_slice : int, optional
        Rows whose features are formed at once (default :func:`slice_rows` of all the views'
        features).
    fan_in : int, default=SPLIT_EVERY
        Row chunks (or partial sums) added per node of the reduction tree.
    name : str, default="dsgd-pass"
        Prefix of the pass's task names.
    """

    views: tuple
    chunks: tuple | None = None
    rows_per_slice: int | None = None
    fan_in: int = SPLIT_EVERY
    name: str = "dsgd-pass"

    def __post_init__(self):
        if not self.views:
            raise ValueError("a pass needs at least one view")
        if any(v.products for v in self.views) and all(v.directions is None for v in self.views):
            raise ValueError("products (z^T H) need directions in at least one view")
        if int(self.fan_in) < 2:
            raise ValueError(f"fan_in must be at least 2, got {self.fan_in}")

    def plan(self) -> _Plan:
        """The static description of the pass that every chunk task gets."""
        views = []
        for v in self.views:
            paged = v.space != "map"
            views.append(_ViewPlan(v.space, int(v.n_blocks) if paged else 0,
                                   int(v.features.block_size) if paged else 0, v.n_features, v.cols,
                                   0 if v.directions is None else int(np.shape(v.directions)[1]),
                                   bool(v.products), bool(v.sums), bool(v.blocks), v.targets, bool(v.gram)))
        products_only = not any(v.blocks or v.targets is not None or v.gram for v in views)
        rows = self.rows_per_slice or slice_rows(sum(v.M for v in views), products_only)
        return _Plan(tuple(views), int(rows))


@dataclass(frozen=True)
class _ViewPlan:
    space: str
    n_blocks: int
    block_size: int
    M: int
    cols: slice | None
    width: int
    products: bool
    sums: bool
    blocks: bool
    targets: slice | None
    gram: bool

    def shapes(self, P: int) -> list[tuple[str, tuple]]:
        out = []
        if self.products:
            out.append(("products", (self.M, P)))
        if self.sums:
            out.append(("sums", (self.M,)))
        if self.blocks:
            out.append(("blocks", (self.n_blocks, self.block_size, self.block_size)))
        if self.targets is not None:
            out.append(("targets", (self.M, self.targets.stop - self.targets.start)))
        if self.gram:
            out.append(("gram", (self.M + 1, self.M + 1)))
        return out


@dataclass(frozen=True)
class _Plan:
    views: tuple
    rows_per_slice: int

    @property
    def width(self) -> int:
        """``P``: the directions of all views."""
        return sum(v.width for v in self.views)

    @property
    def size(self) -> int:
        P = self.width
        return sum(int(np.prod(s)) for v in self.views for _, s in v.shapes(P)) + P + 1

    def unpack(self, total: np.ndarray) -> PassTotals:
        P, pos, views = self.width, 0, []
        for v in self.views:
            parts = {}
            for name, shape in v.shapes(P):
                size = int(np.prod(shape))
                parts[name] = total[pos:pos + size].reshape(shape)
                pos += size
            if "gram" in parts:  # the tiles below the diagonal were not summed: mirrored once, here
                parts["gram"] = mirror_upper(parts["gram"].copy())
            views.append(ViewTotals(**parts))
        directions = total[pos:pos + P] if P else None
        return PassTotals(round(float(total[pos + P])), tuple(views), directions)


@dataclass
class ViewTotals:
    """The sums of one view over the rows of a pass (``None`` where not asked for); see :class:`PassView`."""

    products: np.ndarray | None = None  # (M, P)
    sums: np.ndarray | None = None  # (M,)
    blocks: np.ndarray | None = None  # (n_blocks, m, m)
    targets: np.ndarray | None = None  # (M, c)
    gram: np.ndarray | None = None  # (M + 1, M + 1), symmetric


@dataclass
class PassTotals:
    """The sums of a pass over its rows: ``n`` rows, one :class:`ViewTotals` per view, ``sum H`` (``P``)."""

    n: int
    views: tuple
    directions: np.ndarray | None


def add_gram(out: np.ndarray, a: np.ndarray) -> None:
    """``out += a^T a`` on the tiles on and above the diagonal (``GRAM_PANEL`` columns each); those below unchanged.

    One GEMM per column panel, ``a[:, :j+p]^T a[:, j:j+p]``: the flops of a symmetric
    rank-k update. NumPy sends ``a.T @ a`` to BLAS ``syrk``, and OpenBLAS 0.3.31's
    threaded ``dsyrk`` crashes (SIGSEGV) from about ``2048 x 16385`` on (2 threads),
    where these GEMMs do not.
    """
    M = a.shape[1]
    for j in range(0, M, GRAM_PANEL):
        stop = min(j + GRAM_PANEL, M)
        out[:stop, j:stop] += a[:, :stop].T @ a[:, j:stop]


def mirror_upper(out: np.ndarray) -> np.ndarray:
    """Copy the tiles above the diagonal (``GRAM_PANEL`` columns each) to those below, in place."""
    M = out.shape[0]
    for j in range(0, M, GRAM_PANEL):
        stop = min(j + GRAM_PANEL, M)
        out[stop:, j:stop] = out[j:stop, stop:].T
        block = out[j:stop, j:stop]
        block[...] = np.triu(block) + np.triu(block, 1).T
    return out


def _view_features(v: _ViewPlan, f, x: np.ndarray, coef, shift, index: int = 0):
    """The features of one slice of rows (``rows x M``, a last column of ones for a Gram) and ``u = z coef``.

    The features of a feature set are formed in this thread's buffer ``pass-features-<index>``
    (valid until the thread's next slice).
    """
    M = v.M
    if v.space == "map":
        z = f(x)
        if shift is None and not v.gram:
            return z, None
        out = np.empty((z.shape[0], M + v.gram), dtype=z.dtype)
        if shift is None:
            out[:, :M] = z
        else:
            np.subtract(z, shift.astype(z.dtype, copy=False), out=out[:, :M])
        if v.gram:
            out[:, M] = 1
        return out, None
    Xp = f.prepare(x)
    m, rows = v.block_size, Xp.shape[0]
    z = scratch(f"pass-features-{index}", (rows, M + v.gram), f.dtype)
    evaluate = f.raw if v.space == "raw" else f.apply

    def page(b0, b1, pg):
        r = evaluate(Xp, pg, out=z[:, b0 * m:b1 * m])
        if shift is not None:
            r -= shift[b0 * m:b1 * m]
        return None if coef is None else r @ coef[b0 * m:b1 * m]

    ups = f.map_pages(0, v.n_blocks, page, n_rows=rows)
    u = None
    if coef is not None:
        u = np.zeros((rows, v.width))
        for up in ups:
            u += up[:, :v.width]
    if v.gram:
        z[:, M] = 1
    return z, u


def _add(target: np.ndarray, index, value) -> None:
    target[index] += value


def _view_terms(v: _ViewPlan, f, z: np.ndarray, H, part: np.ndarray, acc: dict, add=_add, index: int = 0) -> None:
    """One slice's sums of one view: each ``acc[name][index] += value`` done as ``add(acc[name], index, value)``.

    With products, the sums are those of the products' column of ones: ``z^T [H, 1, 0...]``
    in the features' precision, ``H``'s columns padded to :func:`_lanes`.
    """
    M = v.M
    if v.products:
        rows, P = H.shape
        Hs = scratch(f"pass-directions-{index}", (rows, _lanes(P + 1)), f.dtype)
        Hs[:, :P] = H
        Hs[:, P] = 1
        Hs[:, P + 1:] = 0
        for cols, prod in _transposed_products(f, v.n_blocks, z, Hs):
            add(acc["products"], cols, prod[:, :P])
            if v.sums:
                add(acc["sums"], cols, prod[:, P])
    elif v.sums:
        add(acc["sums"], slice(None), z[:, :M].sum(axis=0, dtype=np.float64))
    if v.blocks or v.targets is not None:
        m, rows = v.block_size, z.shape[0]
        if v.targets is not None:
            # float64 copies at a fixed alignment: the same BLAS path (and bits) in any process;
            # block by block of features, so the copy is rows x m, not rows x M
            yd = scratch("pass-y", (rows, v.targets.stop - v.targets.start), np.float64)
            np.copyto(yd, part[:, v.targets])
            zd = scratch("pass-z", (rows, m), np.float64)
        for b in range(v.n_blocks):
            zb = z[:, b * m:(b + 1) * m]
            if v.blocks:
                add(acc["blocks"], b, zb.T @ zb)
            if v.targets is not None:
                np.copyto(zd, zb)
                add(acc["targets"], slice(b * m, (b + 1) * m), zd.T @ yd)
    if v.gram:
        add_gram(acc["gram"], z)


def request_sums(S: np.ndarray, plan: _Plan, *operands) -> np.ndarray:
    """The sums a pass asks of one chunk of stacked rows ``S``, packed flat (float64, ``plan.size``).

    ``operands`` holds, per view, its feature set, its directions (in the features'
    precision) and its shift (or ``None``). Rows are taken in slices of
    ``plan.rows_per_slice``, fixed by the plan. The slices are computed in parallel
    threads, each with one BLAS thread, and their sums added to the totals in slice
    order: each slice's terms are the same products of the same shapes wherever they
    are computed, and they are added in the same order, so the totals are those of the
    slices taken one after the other, on any number of threads. A pass with a Gram
    matrix (whose terms per slice are as large as its totals) takes its slices one after
    the other, its pages in parallel threads.
    """
    P = plan.width
    acc = [{name: np.zeros(shape) for name, shape in v.shapes(P)} for v in plan.views]
    groups = [operands[3 * i:3 * i + 3] for i in range(len(plan.views))]
    hsum = np.zeros(P)
    step = plan.rows_per_slice
    in_order = any(v.gram for v in plan.views)

    def one_slice(r0: int) -> list:
        terms = []
        add = _add if in_order else (lambda target, index, value: terms.append((target, index, value)))
        part = S[r0:r0 + step]
        zs, us = [], []
        for i, (v, (f, coef, shift)) in enumerate(zip(plan.views, groups, strict=True)):
            z, u = _view_features(v, f, part if v.cols is None else part[:, v.cols], coef, shift, i)
            zs.append(z)
            if u is not None:
                us.append(u)
        H = None if not us else us[0] if len(us) == 1 else np.hstack(us)
        for i, (v, (f, _, _), z, a) in enumerate(zip(plan.views, groups, zs, acc, strict=True)):
            _view_terms(v, f, z, H, part, a, add, i)
        if H is not None:
            add(hsum, slice(None), H.sum(axis=0))
        return terms

    with one_blas_thread():
        for terms in imap_ordered(one_slice, range(0, S.shape[0], step), parallel=not in_order):
            for target, index, value in terms:
                target[index] += value
    flat = [a[name].ravel() for v, a in zip(plan.views, acc, strict=True) for name, _ in v.shapes(P)]
    return np.concatenate([*flat, hsum, [float(S.shape[0])]])


def _chunk_request_sums(block, plan, *operands, block_info=None):
    loc = block_info[0]["chunk-location"][0] if block_info else "?"
    check_finite_block(block, f"row chunk {loc}")
    return request_sums(block, plan, *operands)[None]


def _sum_in_order(*parts) -> np.ndarray:
    """``((p0 + p1) + p2) + ...``: the order of ``numpy.sum`` over a stack of them (dask's tree sum)."""
    out = np.array(parts[0], dtype=np.float64, copy=True)
    for p in parts[1:]:
        out += p
    return out


def _delayed_tree(leaves: list, fan_in: int, prefix: str):
    """The sum of delayed arrays as a tree: consecutive groups of ``fan_in``, level by level (a lone one passes up)."""
    nodes, level = leaves, 0
    while len(nodes) > 1:
        level += 1
        nodes = [nodes[i] if i + 1 == min(i + fan_in, len(nodes)) else
                 dask.delayed(_sum_in_order, pure=True)(*nodes[i:i + fan_in],
                                                         dask_key_name=f"{prefix}-{level}-{i // fan_in}")
                 for i in range(0, len(nodes), fan_in)]
    return nodes[0]


def _eager_tree(items: list, fan_in: int, leaf) -> np.ndarray:
    """The tree of :func:`_delayed_tree` over ``leaf(item)``, depth first: ``fan_in`` partial sums per level alive."""
    if len(items) == 1:
        return leaf(items[0])
    span = 1
    while span * fan_in < len(items):
        span *= fan_in
    out = None
    for i in range(0, len(items), span):
        part = _eager_tree(items[i:i + span], fan_in, leaf)
        if out is None:
            out = part
        else:
            out += part
    return out


def _array_key(a, what: str):
    return None if a is None else dask.delayed(a, name=f"dsgd-{what}-{tokenize(a)}", traverse=False)


def reduce_pass(view: DataView, request: PassRequest, feature_key=None, salt: str = "") -> PassTotals:
    """The sums ``request`` asks for, over the rows of ``view`` (or of its row chunks ``request.chunks``).

    A dask input gets one task per row chunk (named ``request.name``, NaN/inf checked when
    the chunk is read) and a tree of additions (:func:`_delayed_tree`), computed with one
    ``dask.compute`` on the active scheduler; numpy input is taken in slabs of
    :data:`SLAB_ROWS` rows (its :func:`row_chunks`) added by the same tree, so it gives the
    totals of a dask array chunked by :data:`SLAB_ROWS` rows. ``feature_key(features)``
    gives the graph key of a feature set (a ``distributed`` future scattered once per fit,
    or a delayed value); by default each feature set enters the graph once per pass. The
    directions and shifts enter it once, as keys every chunk task depends on. ``salt``
    renames the pass's tasks (a pass run again after a lost worker).
    """
    plan = request.plan()
    operands = []
    for v in request.views:
        f = v.features
        paged = v.space != "map"
        coef = None
        if v.directions is not None:  # its columns padded with zeros (:data:`LANES`)
            D = np.asarray(v.directions)
            coef = np.zeros((D.shape[0], _lanes(D.shape[1])), dtype=f.dtype)
            coef[:, :D.shape[1]] = D
        shift = None
        if v.shift is not None:
            shift = np.asarray(v.shift, dtype=f.dtype) if paged else np.asarray(v.shift, dtype=np.float64)
        operands.append((f, coef, shift))
    X = view.data
    if not isinstance(X, da.Array):
        flat = [a for ops in operands for a in ops]
        index = range(len(row_chunks(view))) if request.chunks is None else [int(i) for i in request.chunks]

        def leaf(i):
            return request_sums(X[i * SLAB_ROWS:(i + 1) * SLAB_ROWS], plan, *flat)

        return plan.unpack(_eager_tree(list(index), int(request.fan_in), leaf))
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    if request.chunks is not None:
        X = da.concatenate([X.blocks[int(i)] for i in request.chunks])
    keys, args = {}, []
    for f, coef, shift in operands:
        if id(f) not in keys:
            keys[id(f)] = (feature_key(f) if feature_key is not None else
                           dask.delayed(f, name=f"dsgd-features-{uuid.uuid4().hex}", traverse=False))
        args += [keys[id(f)], _array_key(coef, "coef"), _array_key(shift, "shift")]
    tok = tokenize(X.name, request.name, plan, [getattr(a, "key", None) for a in args], salt)
    parts = da.map_blocks(_chunk_request_sums, X, plan, *args, dtype=np.float64,
                          chunks=((1,) * X.numblocks[0], (plan.size,)), meta=np.empty((0, 0), dtype=np.float64),
                          name=f"{request.name}-{tok}")
    root = _delayed_tree(parts.to_delayed(optimize_graph=False).ravel().tolist(), int(request.fan_in),
                         f"{request.name}-sum-{tok}")
    # unoptimised: the pass tasks keep their names on a dashboard
    (total,) = dask.compute(root, optimize_graph=False)
    return plan.unpack(np.asarray(total).reshape(-1))


# -- the requests and results of the passes the solvers take ------------------------------------
def covariance_request(features, n_blocks: int, V: np.ndarray, shift: np.ndarray, whitening=None, chunks=None,
                       cols: slice | None = None, name: str = "dsgd-pass") -> PassRequest:
    """The pass of :func:`covariance_times`: ``z^T z V`` over the raw features, ``V`` folded by the features' map.

    ``whitening`` (a :class:`~dsgd_dask.features.whitening.JointWhitening`) replaces the
    features' own map between coefficients and raw features; ``chunks`` restricts the pass
    to those row chunks; ``cols`` are the columns of the stacked rows the features take.
    """
    linear = features if whitening is None else whitening
    view = PassView(features, n_blocks, cols=cols, space="raw", shift=shift, directions=linear.fold(V),
                    products=True, sums=True)
    return PassRequest((view,), chunks=None if chunks is None else tuple(int(c) for c in chunks), name=name)


def covariance_times(totals: PassTotals, features, V: np.ndarray, shift: np.ndarray, center: bool,
                     whitening=None) -> PassSums:
    """``Cov(z) V`` (``center``) or ``E[z z^T] V`` and the mean of ``z`` from a :func:`covariance_request`.

    The arithmetic of the old ``full_pass`` on the sums.
    """
    linear = features if whitening is None else whitening
    t, n, p = totals.views[0], totals.n, V.shape[1]
    shift = np.asarray(shift, dtype=features.dtype)
    # one solve for all three when the map is a triangular solve
    unfolded = linear.unfold(np.hstack([t.products, t.sums[:, None], shift.astype(np.float64)[:, None]]))
    cov_times = unfolded[:, :p] / n
    delta = unfolded[:, p] / n
    mean_raw_shift = unfolded[:, p + 1]
    ubar = totals.directions / n
    if center:
        cov_times -= np.outer(delta, ubar)
    else:
        # E[z z^T] V from the shifted sums: add back the shift's contributions
        sV = mean_raw_shift @ V
        cov_times += np.outer(mean_raw_shift, ubar) + np.outer(delta, sV) + np.outer(mean_raw_shift, sV)
    return PassSums(n, cov_times, mean_raw_shift + delta)


def cross_request(features: tuple, n_blocks: int, A: np.ndarray, B: np.ndarray, shifts: tuple,
                  cols: tuple[slice, slice], name: str = "dsgd-cross-pass") -> PassRequest:
    """The pass of :func:`cross_covariances`: both views' raw features times ``H = [z_x A, z_y B]``."""
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"A and B must have the same number of columns, got {A.shape[1]} and {B.shape[1]}")
    views = tuple(PassView(f, n_blocks, cols=c, space="raw", shift=s, directions=f.fold(D), products=True,
                           sums=True)
                  for f, c, s, D in zip(features, cols, shifts, (A, B), strict=True))
    return PassRequest(views, name=name)


def cross_covariances(totals: PassTotals, features: tuple, shifts: tuple) -> CrossSums:
    """The four covariance products of a :func:`cross_request` (the old ``cross_pass``'s arithmetic on the sums)."""
    fx, fy = features
    n = totals.n
    q = totals.directions.shape[0] // 2
    hbar = totals.directions / n
    out = []
    for f, t in zip(features, totals.views, strict=True):
        o = np.hstack([t.products, t.sums[:, None]])
        prod = f.unfold(o[:, :2 * q]) / n
        delta = f.unfold(o[:, 2 * q:])[:, 0] / n
        prod -= np.outer(delta, hbar)
        out.append((prod, delta))
    (px, dx), (py, dy) = out
    sx = np.asarray(shifts[0], dtype=fx.dtype)
    sy = np.asarray(shifts[1], dtype=fy.dtype)
    mean_x = fx.unfold(sx.astype(np.float64)[:, None])[:, 0] + dx
    mean_y = fy.unfold(sy.astype(np.float64)[:, None])[:, 0] + dy
    return CrossSums(n, px[:, :q], px[:, q:], py[:, q:], py[:, :q], mean_x, mean_y)


def moment_request(features, n_blocks: int, x_cols: slice, y_cols: slice, with_blocks: bool = True,
                   name: str = "dsgd-ridge-pass", sums: bool = False) -> PassRequest:
    """The pass of :func:`ridge_moments`: ``z^T y`` and (``with_blocks``) each block's ``z_b^T z_b``.

    Without ``with_blocks`` the cross sums are over the raw features (the rows skip the
    whitening products), unfolded once by :func:`ridge_moments`. ``sums``: ``sum z`` too
    (for targets shifted by a constant).
    """
    view = PassView(features, n_blocks, cols=x_cols, space="features" if with_blocks else "raw",
                    blocks=with_blocks, targets=y_cols, sums=sums)
    return PassRequest((view,), name=name)


def ridge_moments(totals: PassTotals, features, with_blocks: bool = True, target_shift: np.ndarray | None = None):
    """``E[z_b z_b^T]`` per block and ``E[z (y - target_shift)^T]`` from a :func:`moment_request`.

    Without ``target_shift``, old ``ridge_pass``'s sums bit for bit; with it, the request
    must have taken ``sum z`` (``sums=True``).
    """
    from dsgd_dask.engine.ridge import RidgeSums  # ridge builds on this module

    t, n = totals.views[0], totals.n
    blocks = t.blocks / n if with_blocks else None
    cross = t.targets / n
    if target_shift is not None:
        cross = cross - np.outer(t.sums / n, np.asarray(target_shift, dtype=np.float64))
    if not with_blocks:
        cross = features.unfold(cross)
    return RidgeSums(n, blocks, cross)


def gram_request(fmap, shift: np.ndarray, name: str = "feature-moments") -> PassRequest:
    """The pass of :func:`feature_covariance`: ``[z - shift, 1]^T [z - shift, 1]`` of a feature map.

    Rows in slices of :data:`GRAM_SLICE_ROWS`, chunks added pairwise (``fan_in=2``: at most
    about three ``(M + 1)^2`` partial sums alive per running addition).
    """
    view = PassView(fmap, space="map", shift=np.asarray(shift, dtype=np.float64), gram=True)
    return PassRequest((view,), rows_per_slice=GRAM_SLICE_ROWS, fan_in=2, name=name)


def feature_covariance(totals: PassTotals, shift: np.ndarray, center: bool = True):
    """``(n, mean, cov)`` of the features from a :func:`gram_request`: covariance (``center``) or second moment.

    The arithmetic of the rca baselines' moments on the same sums; ``mean`` is zeros
    without ``center``.
    """
    total = totals.views[0].gram
    M = total.shape[0] - 1
    shift = np.asarray(shift, dtype=np.float64)
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
