"""Ridges chosen by the data: a held-out part of the row chunks, and the default grid.

A ridge of ``"auto"`` is chosen during ``fit`` by fitting on some row chunks and scoring
on the others. The rows are cut into :data:`N_GROUPS` groups of consecutive rows, of a
size set by the number of rows alone, and every :data:`HELD_OUT_EVERY`-th group (by
index) is held out. The row chunks of the split are those of the input cut again at the
groups' edges (nothing moves between chunks), so the held-out rows are the same for a
numpy input and for any chunking of a dask input, on any machine and scheduler.
Interleaved groups keep the held-out rows spread over the whole input: ordered data
(sorted by class or by time) are held out from every part of the order.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import scipy.linalg

from dsgd_dask.engine.passes import row_chunks
from dsgd_dask.streams.inputs import DataView

#: Groups of consecutive rows that the split holds out or keeps.
N_GROUPS = 50
#: One group in this many is held out (a fifth of the rows).
HELD_OUT_EVERY = 5
#: Fewest rows a held-out choice is made on; with fewer, ``"auto"`` takes :data:`FALLBACK`.
MIN_ROWS = 50
#: The ridge ``"auto"`` gives data of fewer than :data:`MIN_ROWS` rows (not scored).
FALLBACK = 1e-3


def group_rows(n_samples: int, n_groups: int = N_GROUPS) -> int:
    """Rows per group of the split: ``ceil(n / n_groups)`` (the last group may be shorter)."""
    return max(1, -(-int(n_samples) // int(n_groups)))


def split_chunks(chunks: tuple[int, ...], size: int) -> tuple[int, ...]:
    """The row chunks ``chunks`` cut again at every multiple of ``size`` rows."""
    edges = np.union1d(np.cumsum((0, *chunks)), np.arange(0, int(sum(chunks)), int(size)))
    return tuple(int(c) for c in np.diff(edges) if c > 0)


def held_out_mask(chunks: tuple[int, ...], size: int, every: int = HELD_OUT_EVERY) -> np.ndarray:
    """Boolean mask of the held-out chunks of :func:`split_chunks`: in a group ``g`` with ``g % every == every // 2``.

    The group of a chunk is that of its first row, ``row // size``. At least one chunk is
    held out and one kept (the last chunk is held out when no group is).
    """
    if len(chunks) < 2:
        raise ValueError(f"a held-out split needs at least 2 row chunks, got {len(chunks)}")
    starts = np.cumsum((0, *chunks))[:-1]
    mask = (starts // int(size)) % every == every // 2
    if not mask.any():
        mask[-1] = True
    if mask.all():
        mask[0] = False
    return mask


def held_out_view(view: DataView, n_groups: int = N_GROUPS) -> tuple[DataView, np.ndarray, np.ndarray]:
    """``(chunked, fit_chunks, held_chunks)``: ``view`` as a dask array cut for the held-out split.

    ``fit_chunks`` and ``held_chunks`` are the indices of its row chunks that fit and that
    score (:func:`held_out_mask`); a numpy input is wrapped without a copy. At least
    :data:`MIN_ROWS` rows (a ``ValueError`` otherwise: callers take :data:`FALLBACK`).
    """
    n = view.n_samples
    if n < MIN_ROWS:
        raise ValueError(f"choosing the ridge on held-out rows needs at least {MIN_ROWS} rows, got {n}")
    size = group_rows(n, n_groups)
    chunks = split_chunks(row_chunks(view), size)
    data = view.data
    if isinstance(data, da.Array):
        data = data.rechunk({0: chunks, 1: -1})
    else:
        data = da.from_array(data, chunks=(chunks, -1), name=False)
    mask = held_out_mask(chunks, size)
    chunked = DataView(data, view.dims, view.feature_coords, view.source)
    return chunked, np.flatnonzero(~mask), np.flatnonzero(mask)


def log_grid(low: float = 1e-8, high: float = 1.0, per_decade: int = 2) -> np.ndarray:
    """Log-spaced values from ``low`` to ``high`` (both included), ``per_decade`` per factor of ten, increasing."""
    if not 0 < low <= high:
        raise ValueError(f"a log grid needs 0 < low <= high, got low={low}, high={high}")
    steps = round(float(np.log10(high / low)) * per_decade)
    return np.logspace(np.log10(low), np.log10(high), steps + 1)


def best_index(scores: np.ndarray) -> int:
    """Index of the highest finite score; of equal highest scores, the last (the grid's largest value).

    A grid is increasing in the ridge, so ties go to the stronger regularisation. Raises a
    ``ValueError`` when no score is finite.
    """
    scores = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(scores)
    if not finite.any():
        raise ValueError("no value of the grid gave a finite held-out score")
    best = np.max(scores[finite])
    return int(np.flatnonzero(finite & (scores == best))[-1])


def covariance_eigen(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (increasing, clipped at 0) and eigenvectors of a covariance (symmetrised first).

    With ``cov = V diag(w) V^T`` once, ``(cov + reg I)^{-1/2} = V diag((w + reg)^{-1/2}) V^T``
    for every ridge of a grid.
    """
    w, V = scipy.linalg.eigh(0.5 * (cov + cov.T), check_finite=False)
    return np.maximum(w, 0.0), V


class ChosenRidge:
    """``reg`` of an estimator that chooses it with ``"auto"``: records ``reg_``, ``reg_grid_`` and ``reg_scores_``.

    A numeric ``reg`` is recorded as itself, with a grid of one value and a NaN score.
    """

    def _reg_is_auto(self) -> bool:
        """Whether the ridge is chosen during :meth:`fit` (``reg="auto"``)."""
        return isinstance(self.reg, str)

    def _begin_reg(self) -> None:
        """Forget an earlier fit's choice of the ridge; record a numeric one."""
        self.__dict__.pop("_chosen_reg", None)
        if not self._reg_is_auto():
            reg = float(self.reg)
            self._set_reg(reg, np.array([reg]), np.array([np.nan]))

    def _set_reg(self, reg: float, grid: np.ndarray, scores: np.ndarray) -> None:
        self.reg_ = float(reg)
        self.reg_grid_ = np.asarray(grid, dtype=np.float64)
        self.reg_scores_ = np.asarray(scores, dtype=np.float64)
        if isinstance(self.__dict__.get("_params"), dict):
            self._params["reg"] = self.reg_


#: ``preconditioner_jitter="auto"``: the block preconditioner's relative jitters it chooses
#: from, ``1e-4`` to ``10``, two per decade (11 values).
JITTER_GRID = log_grid(1e-4, 10.0)


def held_out_jitter(z: np.ndarray, targets: np.ndarray, n_fit: int, grid: np.ndarray = JITTER_GRID):
    """``(jitter, scores)``: the block ridge whose least-squares fit of ``targets`` by one block generalises best.

    ``z`` (rows x m) holds one feature block on the rows, ``targets`` (rows x c) what its
    first step fits; the first ``n_fit`` rows are fitted, the others scored. For every
    relative jitter ``j`` of ``grid``, ``A = (C + j tr(C)/m I)^{-1} z_f^T t_f / n_f`` with
    ``C = z_f^T z_f / n_f`` (the block preconditioner's solve at ``eta = 1``, from one
    eigendecomposition of ``C``), scored by the held-out rows' negated mean squared error.
    Ties go to the larger jitter (:func:`best_index`).
    """
    from dsgd_dask.rules.machines import block_moment

    zf, zh = z[:n_fit], z[n_fit:]
    targets = np.asarray(targets, dtype=np.float64).reshape(len(z), -1)
    tf, th = targets[:n_fit], targets[n_fit:]
    m = z.shape[1]
    C = block_moment(zf) / n_fit
    b = (zf.T.astype(np.float64) @ tf) / n_fit
    lam, V = scipy.linalg.eigh(C, check_finite=False)
    scale = max(float(np.trace(C)), np.finfo(np.float64).tiny) / m
    Vb, HV = V.T @ b, zh.astype(np.float64) @ V
    scores = np.array([-float(np.mean((HV @ (Vb / (np.maximum(lam, 0.0) + j * scale)[:, None]) - th) ** 2))
                       for j in grid])
    return float(grid[best_index(scores)]), scores
