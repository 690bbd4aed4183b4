"""Seeded random-feature blocks, regenerated anywhere from ``(seed, block index)``.

Block ``j`` holds ``m`` features ``z_j(x) = sqrt(2/m) cos((x - c) W_j + b_j)`` (arc-cosine:
``sqrt(2/m) max(0, x W_j)^n``), so that ``z_j(x) . z_j(y)`` is an unbiased estimate of
``k(x, y)``. ``W_j`` and ``b_j`` come from their own counter-based stream
``SeedSequence(seed, spawn_key=(j,))``: the same bytes in any process, on any worker,
independently of every other block.

Blocks are grouped in *pages* of consecutive blocks stored contiguously (as ``W^T``,
one contiguous ``m x d`` slab per block, filled in place by its generator), so that a
batch meets one GEMM per page. Pages are the unit of parallel work: the pages of an
evaluation are generated (or taken from the cache) and applied in parallel threads,
each with one BLAS thread (:mod:`dsgd_dask._threads`), and combined in page order, so
results never depend on the number of threads. Pages are cached up to a byte budget and
regenerated beyond it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

from dsgd_dask._threads import map_ordered, one_blas_thread, scratch
from dsgd_dask.features.bandwidth import check_scale
from dsgd_dask.features.kernels import KernelSpec, sample_frequencies

#: Columns of one page: wide enough for an efficient single-threaded GEMM, small enough
#: that a step has several pages to spread over threads and that the temporaries of an
#: evaluation (rows x page columns) stay small.
PAGE_COLUMNS = 1024
#: Below this many multiply-adds per page (rows x d x columns) the pages of an
#: evaluation run in the calling thread: handing them to threads would cost more.
PARALLEL_MIN_WORK = 1 << 21


def default_cache_bytes() -> int:
    """A quarter of the memory available now, at most 4 GiB."""
    try:
        import psutil

        avail = psutil.virtual_memory().available
    except Exception:  # pragma: no cover - psutil ships with distributed
        avail = 4 << 30
    return int(min(avail // 4, 4 << 30))


def block_rng(seed: int, block: int) -> np.random.Generator:
    """The random stream of one feature block."""
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(int(block),))))


def fill_block(spec: KernelSpec, seed: int, block: int, wt: np.ndarray, b: np.ndarray, pairs: bool = False) -> None:
    """Regenerate block ``block`` in place: ``W^T`` into ``wt`` (m x d) and phases into ``b`` (m,).

    ``pairs``: ``m / 2`` frequencies, written twice (rows ``j`` and ``m/2 + j``), no phases.
    """
    rng = block_rng(seed, block)
    if pairs:
        half = wt.shape[0] // 2
        sample_frequencies(spec, rng, wt[:half])
        wt[half:] = wt[:half]
        b[:] = 0
        return
    sample_frequencies(spec, rng, wt)
    if spec.shift_invariant:
        b[:] = rng.uniform(0.0, 2.0 * np.pi, size=b.shape[0])
    else:
        b[:] = 0


def generate_block(spec: KernelSpec, d: int, m: int, seed: int, block: int, dtype="float32", pairs: bool = False):
    """Regenerate block ``block``: frequencies ``W`` (d x m, a view of a C-contiguous ``W^T``) and phases ``b``."""
    dtype = np.dtype(dtype)
    wt = np.empty((m, d), dtype=dtype)
    b = np.empty(m, dtype=dtype)
    fill_block(spec, seed, block, wt, b, pairs)
    return wt.T, b


class _Page:
    """A cached page: ``W^T`` and phases of its blocks, of which the first ``filled`` are generated."""

    def __init__(self, rows: int, d: int, dtype):
        self.lock = threading.Lock()
        self.wt = np.empty((rows, d), dtype=dtype)
        self.b = np.empty(rows, dtype=dtype)
        self.filled = 0


class _PageCache:
    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        self.pages: dict[int, _Page] = {}
        self.nbytes = 0


#: Page caches of the feature sets used recently in this process (least recent evicted).
_SHARED_CACHES: OrderedDict = OrderedDict()
_SHARED_LOCK = threading.Lock()
MAX_SHARED_CACHES = 4


def _shared_cache(key) -> _PageCache:
    with _SHARED_LOCK:
        cache = _SHARED_CACHES.get(key)
        if cache is None:
            cache = _SHARED_CACHES[key] = _PageCache()
            while len(_SHARED_CACHES) > MAX_SHARED_CACHES:
                _SHARED_CACHES.popitem(last=False)
        _SHARED_CACHES.move_to_end(key)
        return cache


class FeatureBlocks:
    """What every feature set shares: inputs, blocks grouped in pages, their evaluation.

    A subclass supplies ``_page(p, lo, hi, stop_block)``, the payload of blocks ``lo`` to
    ``hi`` of page ``p`` that its ``apply`` and ``raw`` evaluate, and ``_column_cost``,
    the multiply-adds per row and feature column of a page (to decide whether pages go
    to threads).
    """

    def __init__(self, kernel: KernelSpec, n_features_in: int, block_size: int, seed: int, dtype, center):
        self.kernel = kernel
        self.n_features_in = int(n_features_in)
        self.block_size = int(block_size)
        self.seed = int(seed)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"feature dtype must be float32 or float64, got {self.dtype}")
        if center is not None and kernel.shift_invariant:
            # float64 whatever the features' precision: the inputs are shifted before they are
            # rounded to it, so an offset of the data costs no precision
            center = np.asarray(center, dtype=np.float64).reshape(-1)
            if center.shape != (self.n_features_in,):
                raise ValueError(f"center must have shape ({self.n_features_in},), got {center.shape}")
        else:
            center = None
        self.center = center
        self.blocks_per_page = max(1, PAGE_COLUMNS // self.block_size)

    def prepare(self, X) -> np.ndarray:
        """Inputs shifted by ``center`` (in float64), then in the feature dtype."""
        X = np.asarray(X)
        if self.center is not None:
            return np.subtract(X, self.center, dtype=np.float64).astype(self.dtype, copy=False)
        return X.astype(self.dtype, copy=False)

    def map_pages(self, start_block: int, stop_block: int, fn, n_rows: int = 0) -> list:
        """``fn(block0, block1, page)`` for every page covering ``[start_block, stop_block)``.

        ``page`` is the payload of blocks ``[block0, block1)``, to pass to :meth:`apply` or
        :meth:`raw`. The pages are made (generated, taken from a cache or prepared) and
        passed to ``fn`` in parallel threads when ``n_rows`` rows make it worth it, each
        with one BLAS thread; the results come back in page order. A payload may live in
        a per-thread scratch buffer: ``fn`` must not keep it.
        """
        bpp = self.blocks_per_page
        if stop_block <= start_block:
            return []
        spans = []
        for p in range(start_block // bpp, (stop_block - 1) // bpp + 1):
            first = p * bpp
            spans.append((p, max(start_block, first) - first, min(stop_block, first + bpp) - first))

        def one(span):
            p, lo, hi = span
            first = p * bpp
            return fn(first + lo, first + hi, self._page(p, lo, hi, stop_block))

        work = n_rows * self._column_cost * bpp * self.block_size
        with one_blas_thread():
            return map_ordered(one, spans, parallel=work >= PARALLEL_MIN_WORK)

    def _columns(self, apply, X, start_block: int, stop_block: int) -> np.ndarray:
        """``apply(Xp, page, out)`` of every page of blocks ``[start_block, stop_block)``, side by side."""
        Xp = self.prepare(X)
        m = self.block_size
        out = np.empty((Xp.shape[0], (stop_block - start_block) * m), dtype=self.dtype)

        def fill(b0, b1, page):
            apply(Xp, page, out=out[:, (b0 - start_block) * m:(b1 - start_block) * m])

        self.map_pages(start_block, stop_block, fill, n_rows=Xp.shape[0])
        return out

    def transform(self, X, start_block: int, stop_block: int) -> np.ndarray:
        """Features of blocks ``[start_block, stop_block)`` on ``X``: ``(n, (stop-start) m)``."""
        return self._columns(self.apply, X, start_block, stop_block)

    def raw_transform(self, X, start_block: int, stop_block: int) -> np.ndarray:
        """Raw features (before any linear map) of blocks ``[start_block, stop_block)``."""
        return self._columns(self.raw, X, start_block, stop_block)


class RandomFeatures(FeatureBlocks):
    """A stream of seeded random-feature blocks for one kernel.

    Parameters
    ----------
    kernel : KernelSpec
        Kernel with its bandwidth.
    n_features_in : int
        Input dimension ``d``.
    block_size : int
        Features per block ``m``.
    seed : int
        Root seed; block ``j`` uses ``SeedSequence(seed, spawn_key=(j,))``.
    dtype : {"float32", "float64"}
        Precision of the features (GEMM and cosine). Coefficients stay float64.
    center : ndarray of shape (d,), optional
        A point subtracted from the inputs before the features of a shift-invariant
        kernel (exactly equivalent to shifting the phases; it keeps ``x W`` small, which
        float32 needs), in float64 before the inputs are rounded to ``dtype``.
    cache_bytes : int, optional
        Budget for cached pages; ``None`` takes :func:`default_cache_bytes`, 0 disables.

    Raises
    ------
    ValueError
        If ``1 / bandwidth`` overflows or underflows ``dtype``
        (:func:`~dsgd_dask.features.bandwidth.check_scale`).
    """

    def __init__(self, kernel: KernelSpec, n_features_in: int, block_size: int, seed: int,
                 dtype="float32", center=None, cache_bytes: int | None = None):
        super().__init__(kernel, n_features_in, block_size, seed, dtype, center)
        # the frequencies omega / bandwidth in the features' precision (the data's scale is
        # checked against the bandwidth where a sample of it is at hand)
        check_scale(None, kernel.bandwidth, self.dtype, power=1)
        self.cache_bytes = default_cache_bytes() if cache_bytes is None else int(cache_bytes)
        self._init_cache()

    # -- cache handling -------------------------------------------------------------
    def _cache_key(self) -> tuple:
        center = None if self.center is None else hashlib.sha1(self.center.tobytes()).hexdigest()
        return (tuple(sorted(self.kernel.to_dict().items())), self.n_features_in, self.block_size, self.seed,
                self.dtype.str, center, self.cache_bytes, self.pairs)

    def _init_cache(self) -> None:
        # Identical feature sets in one process (e.g. models unpickled into many tasks on a
        # worker) share one page cache.
        self._cache = _shared_cache(self._cache_key())

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_cache", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_cache()

    def clear_cache(self) -> None:
        self._cache.clear()

    @property
    def page_bytes(self) -> int:
        return (self.n_features_in + 1) * self.blocks_per_page * self.block_size * self.dtype.itemsize

    def block(self, j: int):
        """Frequencies and phases of block ``j`` (regenerated, never cached)."""
        return generate_block(self.kernel, self.n_features_in, self.block_size, self.seed, j, self.dtype,
                              pairs=self.pairs)

    def page(self, p: int, n_blocks: int):
        """Frequencies ``(d, nb*m)`` and phases of the blocks of page ``p`` below ``n_blocks``.

        A page beyond the cache budget is regenerated into this thread's scratch buffer:
        use it before asking this thread for another page.
        """
        first = p * self.blocks_per_page
        nb = min(self.blocks_per_page, n_blocks - first)
        if nb <= 0:
            raise IndexError(f"page {p} is empty for {n_blocks} blocks")
        m = self.block_size
        cache = self._cache
        with cache.lock:
            entry = cache.pages.get(p)
            if entry is None and cache.nbytes + self.page_bytes <= self.cache_bytes:
                entry = cache.pages[p] = _Page(self.blocks_per_page * m, self.n_features_in, self.dtype)
                cache.nbytes += self.page_bytes
        if entry is not None:
            # pages are generated outside the cache lock: other threads fill other pages meanwhile
            with entry.lock:
                if entry.filled < nb:
                    self._fill(first, entry.filled, nb, entry.wt, entry.b)
                    entry.filled = nb
            return entry.wt[: nb * m].T, entry.b[: nb * m]
        wt = scratch("page-wt", (nb * m, self.n_features_in), self.dtype)
        b = scratch("page-b", (nb * m,), self.dtype)
        self._fill(first, 0, nb, wt, b)
        return wt.T, b

    #: ``[cos, sin]`` pairs of each frequency in place of ``cos`` with a random phase.
    pairs = False

    def _fill(self, first: int, lo: int, hi: int, wt: np.ndarray, b: np.ndarray) -> None:
        """Generate blocks ``first + lo .. first + hi - 1`` into their rows of ``wt``, ``b``."""
        m = self.block_size
        for i in range(lo, hi):
            fill_block(self.kernel, self.seed, first + i, wt[i * m:(i + 1) * m], b[i * m:(i + 1) * m], self.pairs)

    @property
    def _column_cost(self) -> int:
        return self.n_features_in

    def _page(self, p: int, lo: int, hi: int, stop_block: int):
        """``(W, b)`` of blocks ``lo`` to ``hi`` of page ``p`` (generated or cached)."""
        m = self.block_size
        w, b = self.page(p, stop_block)
        return w[:, lo * m:hi * m], b[lo * m:hi * m]

    # -- feature evaluation -----------------------------------------------------------
    def apply(self, Xp: np.ndarray, page, out=None) -> np.ndarray:
        """Features of prepared inputs for a page ``(W, b)`` of frequencies and phases (in place in ``out``)."""
        w, b = page
        if Xp.shape[1] == 1:  # one input feature: its products alone, the same numbers without a BLAS call's cost
            z = np.multiply(Xp, w, out=out)
        else:
            z = np.matmul(Xp, w, out=out)
        scale = self.dtype.type(np.sqrt(2.0 / self.block_size))
        if self.kernel.shift_invariant:
            z += b
            np.cos(z, out=z)
            z *= scale
        else:
            order = self.kernel.order
            if order == 0:
                np.greater(z, 0, out=z)
                z *= scale
            else:
                np.maximum(z, 0, out=z)
                if order == 2:
                    np.square(z, out=z)
                z *= scale
        return z

    # -- the raw features of the full-data passes -----------------------------------------
    # Random Fourier features are used as they are: the raw features are the features.
    raw = apply
    raw_are_features = True

    def fold(self, coef: np.ndarray) -> np.ndarray:
        """Coefficients of the features as coefficients of the raw features (the same here)."""
        return coef

    def unfold(self, grad: np.ndarray) -> np.ndarray:
        """Sums over raw features as sums over the features (the same here)."""
        return grad

    @property
    def max_blocks(self) -> int | None:
        """Number of blocks available (``None``: any number, regenerated from seeds)."""
        return None

    def to_dict(self) -> dict:
        return {
            "kind": "fourier",
            "kernel": self.kernel.to_dict(),
            "n_features_in": self.n_features_in,
            "block_size": self.block_size,
            "seed": self.seed,
            "dtype": self.dtype.name,
        }


class FourierPairs(RandomFeatures):
    """Random Fourier features as ``[cos, sin]`` pairs of each frequency, without phases.

    Block ``j`` holds ``m / 2`` frequencies ``W_j`` and the ``m`` features
    ``sqrt(2/m) [cos((x - c) W_j), sin((x - c) W_j)]`` (Rahimi and Recht's first map; Dai
    et al.'s code): ``z_j(x) . z_j(y)`` is the mean of ``cos((x - y) w)`` over the block's
    frequencies, an unbiased estimate of a shift-invariant kernel with a smaller variance
    than as many cosines with random phases (Sutherland and Schneider 2015) and half their
    matrix products. The parameters are those of :class:`RandomFeatures`; ``block_size``
    must be even and the kernel shift-invariant.
    """

    pairs = True

    def __init__(self, kernel: KernelSpec, n_features_in: int, block_size: int, seed: int,
                 dtype="float32", center=None, cache_bytes: int | None = None):
        if not kernel.shift_invariant:
            raise ValueError(f"[cos, sin] pairs are features of shift-invariant kernels, not of {kernel.name!r}")
        if int(block_size) % 2:
            raise ValueError(f"[cos, sin] pairs need an even block_size, got {block_size}")
        super().__init__(kernel, n_features_in, block_size, seed, dtype, center, cache_bytes)

    def apply(self, Xp: np.ndarray, page, out=None) -> np.ndarray:
        """Features of prepared inputs for a page ``(W, b)`` (each block's frequencies twice; in place in ``out``)."""
        w, _ = page
        m, half = self.block_size, self.block_size // 2
        z = np.empty((Xp.shape[0], w.shape[1]), dtype=self.dtype) if out is None else out
        scale = self.dtype.type(np.sqrt(2.0 / m))
        for lo in range(0, w.shape[1], m):
            # the products go to the sines' columns and are overwritten there: no temporary
            # of rows x m / 2 is allocated (and page-faulted) per block
            u = np.matmul(Xp, w[:, lo:lo + half], out=z[:, lo + half:lo + m])
            np.cos(u, out=z[:, lo:lo + half])
            np.sin(u, out=u)
        z *= scale
        return z

    raw = apply

    def to_dict(self) -> dict:
        return {**super().to_dict(), "kind": "fourier_pairs"}
