"""A function ``h(x) = sum_j z_j(x) A_j - offset`` kept as seeds plus coefficients."""

from __future__ import annotations

import numpy as np

from dsgd_dask._threads import scratch
from dsgd_dask.features.blocks import RandomFeatures

#: Rows evaluated at once: bounds the temporaries to rows x PAGE_COLUMNS features.
EVAL_ROWS = 1024


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

    @property
    def n_blocks(self) -> int:
        return self.coef.shape[0] // self.features.block_size

    @property
    def n_outputs(self) -> int:
        return self.coef.shape[1]

    def evaluate(self, X: np.ndarray) -> np.ndarray:
        """``h(X) - offset`` as float64 ``(n, k)``, in bounded memory for any ``n``."""
        X = np.asarray(X)
        out = np.empty((X.shape[0], self.n_outputs), dtype=np.float64)
        for r in range(0, X.shape[0], EVAL_ROWS):
            out[r:r + EVAL_ROWS] = evaluate_blocks(self.features, self.coef, X[r:r + EVAL_ROWS])[0]
        out -= self.offset
        return out


def evaluate_blocks(features: RandomFeatures, coef: np.ndarray, X: np.ndarray, keep_block: int | None = None):
    """Raw ``sum_j z_j(X) coef_j`` over the active blocks of ``coef``.

    Returns ``(h, z)`` where ``z`` holds the features of block ``keep_block`` on ``X``
    (computed on the way when the block is active, separately otherwise), or ``None``.
    The pages are evaluated in parallel threads, one GEMM in the feature precision each,
    and accumulated in float64 in page order (the same sum on any number of threads).
    The raw features of a page are multiplied by the coefficients folded through the
    features' linear map (Nyström whitening), which costs nothing per row.
    """
    m = features.block_size
    n_blocks = coef.shape[0] // m
    Xp = features.prepare(X)
    raw_coef = features.fold(coef)
    from_page = features.raw_are_features  # the kept block can be read off the page

    def page(b0, b1, payload):
        r = features.raw(Xp, payload, out=scratch("page-z", (Xp.shape[0], (b1 - b0) * m), features.dtype))
        hp = r @ raw_coef[b0 * m:b1 * m].astype(r.dtype, copy=False)
        kept = None
        if from_page and keep_block is not None and b0 <= keep_block < b1:
            kept = r[:, (keep_block - b0) * m:(keep_block - b0 + 1) * m].copy()
        return hp, kept

    h = np.zeros((Xp.shape[0], coef.shape[1]), dtype=np.float64)
    kept = None
    for hp, z in features.map_pages(0, n_blocks, page, n_rows=Xp.shape[0]):
        h += hp
        kept = z if z is not None else kept
    if keep_block is not None and kept is None:
        kept = features.transform(X, keep_block, keep_block + 1)
    return h, kept
