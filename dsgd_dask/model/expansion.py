"""A function ``h(x) = sum_j z_j(x) A_j - offset`` kept as seeds plus coefficients."""

from __future__ import annotations

import numpy as np

from dsgd_dask._threads import scratch
from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.transform.lazy import ROW_SLICE, in_row_slices

#: Rows evaluated at once, at fixed places (:func:`~dsgd_dask.transform.lazy.in_row_slices`):
#: bounds the temporaries to rows x PAGE_COLUMNS features.
EVAL_ROWS = ROW_SLICE

#: Bytes of the random features :func:`evaluate_blocks` makes at once per page (a tile of
#: rows of the page's columns): small enough to stay in a core's share of the cache between
#: the features' product, their sines and cosines and their product with the coefficients.
TILE_BYTES = 4 << 20


def tile_rows(width: int, itemsize: int) -> int:
    """Rows of a tile of ``width`` features: a multiple of 64, at least 64, about :data:`TILE_BYTES`."""
    return max(64, TILE_BYTES // (width * itemsize) // 64 * 64)


class KernelExpansion:
    """Random-feature expansion of ``k`` functions: the model every estimator fits.

    Parameters
    ----------
    features : RandomFeatures
        The seeded feature blocks (only seeds and kernel are stored).
    coef : ndarray of shape (n_blocks * block_size, k)
        Coefficients of the active blocks, float64.
    offset : ndarray of shape (k,), optional
        Subtracted from every evaluation (the centring of kernel PCA).
    """

    def __init__(self, features: RandomFeatures, coef: np.ndarray, offset: np.ndarray | None = None):
        # C order whatever the source (a solve, a store): float32 GEMMs round by layout
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        if coef.ndim != 2 or coef.shape[0] % features.block_size:
            raise ValueError(
                f"coef must be 2-D with a multiple of block_size={features.block_size} rows, got {coef.shape}"
            )
        self.features = features
        self.coef = coef
        self.offset = np.zeros(coef.shape[1]) if offset is None else np.asarray(offset, dtype=np.float64)
        self._raw_coef = None  # coef folded through the features' linear map, made at the first evaluation

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_raw_coef"] = None  # remade where the model is used (a pickled model stays its own size)
        return state

    def __setstate__(self, state):
        state.setdefault("_raw_coef", None)  # pickles of before the cache
        self.__dict__.update(state)

    @property
    def n_blocks(self) -> int:
        return self.coef.shape[0] // self.features.block_size

    @property
    def n_outputs(self) -> int:
        return self.coef.shape[1]

    def evaluate(self, X: np.ndarray) -> np.ndarray:
        """``h(X) - offset`` as float64 ``(n, k)``, in bounded memory for any ``n``.

        The rows are evaluated in slices of exactly :data:`EVAL_ROWS` rows, row ``i`` at
        place ``i % EVAL_ROWS`` (the last slice padded): a row's value depends on the row
        and its place alone, never on the rows around it. Through
        :func:`~dsgd_dask.transform.lazy.apply_rows`, which keeps the places of the whole
        input, numpy, dask and xarray inputs give the same values whatever the chunks.
        """
        out = in_row_slices(self._evaluate_slice, X, self.n_outputs)
        out -= self.offset
        return out

    def _evaluate_slice(self, X: np.ndarray) -> np.ndarray:
        if self._raw_coef is None:  # folded once per model, not once per slice (coef is never modified in place)
            self._raw_coef = self.features.fold(self.coef)
        return evaluate_blocks(self.features, self.coef, X, raw_coef=self._raw_coef)[0]


def evaluate_blocks(features: RandomFeatures, coef: np.ndarray, X: np.ndarray, keep_block: int | None = None,
                    raw_coef: np.ndarray | None = None):
    """Raw ``sum_j z_j(X) coef_j`` over the active blocks of ``coef``.

    Returns ``(h, z)`` where ``z`` holds the features of block ``keep_block`` on ``X``
    (computed on the way when the block is active, separately otherwise), or ``None``.
    The pages are evaluated in parallel threads, one GEMM in the feature precision each,
    and accumulated in float64 in page order (the same sum on any number of threads).
    The raw features of a page are multiplied by the coefficients folded through the
    features' linear map (Nyström whitening), which costs nothing per row (``raw_coef``:
    ``features.fold(coef)`` if the caller has it already).
    """
    m = features.block_size
    n_blocks = coef.shape[0] // m
    Xp = features.prepare(X)
    if raw_coef is None:
        raw_coef = features.fold(coef)
    from_page = features.raw_are_features  # the kept block can be read off the page
    if from_page and keep_block is not None and keep_block == n_blocks and n_blocks > 0:
        # the next block (a step that adds one) is evaluated as one more page, with zero
        # coefficients, so that it runs in parallel with the active blocks' pages
        raw_coef = np.concatenate([raw_coef, np.zeros((m, raw_coef.shape[1]), raw_coef.dtype)])
        n_blocks += 1

    def page(b0, b1, payload):
        rows, width = Xp.shape[0], (b1 - b0) * m
        coef_p = raw_coef[b0 * m:b1 * m].astype(features.dtype, copy=False)
        if from_page and keep_block is not None and b0 <= keep_block < b1:
            r = features.raw(Xp, payload, out=np.empty((rows, width), dtype=features.dtype))
            kept = r if width == m else r[:, (keep_block - b0) * m:(keep_block - b0 + 1) * m].copy()
            return r @ coef_p, kept
        if not features.raw_are_features:
            r = features.raw(Xp, payload, out=scratch("page-z", (rows, width), features.dtype))
            return r @ coef_p, None
        # random features: in tiles of rows that stay in cache, each one's features made and
        # multiplied by the coefficients at once; the tiles depend on the model alone
        tile = tile_rows(width, features.dtype.itemsize)
        r = scratch("page-z", (min(tile, rows), width), features.dtype)
        hp = np.empty((rows, coef_p.shape[1]), dtype=features.dtype)
        for r0 in range(0, rows, tile):
            r1 = min(rows, r0 + tile)
            np.matmul(features.raw(Xp[r0:r1], payload, out=r[:r1 - r0]), coef_p, out=hp[r0:r1])
        return hp, None

    h = np.zeros((Xp.shape[0], coef.shape[1]), dtype=np.float64)
    kept = None
    for hp, z in features.map_pages(0, n_blocks, page, n_rows=Xp.shape[0]):
        h += hp
        kept = z if z is not None else kept
    if keep_block is not None and kept is None:
        kept = features.transform(X, keep_block, keep_block + 1)
    return h, kept
