"""The rule interface: what one doubly stochastic step of any method computes.

Every method fitted by steps keeps one or more *function sets* (one for kernel PCA and
kernel SIR, two for kernel SVD and CCA, one per output for the kernel machines), each
a sum of feature blocks ``h_i(x) = sum_j z_j(x) A_ij`` on the features of one input
view. A step on a mini-batch of ``B`` rows updates every set the same way::

    A_ij <- A_ij S_i          (every active block: a k x k right factor)
    A_it <- A_it + D_i        (the block ``t`` of the step: m x k)

A rule says how ``S_i`` and ``D_i`` follow from the batch, through *sums*: additive
statistics of the rows (:class:`Sums`), so a mini-batch split over parts that live on
different workers reduces exactly to the statistics of the whole batch. The engine
evaluates the functions and the step's block on the rows, asks the rule for the sums,
adds them up and asks the rule for the update; it knows nothing else of the method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgd_dask._threads import scratch
from dsgd_dask.model.expansion import tile_rows


class DivergenceError(FloatingPointError):
    """An update produced non-finite or exploding statistics."""


class Sums(dict):
    """Named float64 arrays summed over rows; ``a + b`` adds them key by key (``"n"`` counts rows)."""

    def __add__(self, other: Sums) -> Sums:
        if set(self) != set(other):
            raise ValueError(f"cannot add sums with different statistics: {sorted(self)} and {sorted(other)}")
        return Sums({key: self[key] + other[key] for key in self})

    @property
    def n(self) -> int:
        return round(float(self["n"]))


def covariance(total: Sums, ab: str, a: str, b: str, center: bool) -> np.ndarray:
    """``Cov(a, b)`` (centred) or ``E[a b^T]`` from the sums ``ab = sum a^T b``, ``a = sum a``, ``b = sum b``."""
    n = max(float(total["n"]), 1.0)
    out = total[ab] / n
    if center:
        out = out - np.outer(total[a] / n, total[b] / n)
    return out


@dataclass(frozen=True)
class Update:
    """The update of one function set: right factor ``shrink`` (k x k) and new-block term ``delta`` (m x k)."""

    shrink: np.ndarray
    delta: np.ndarray


def apply_update(coef: np.ndarray, update: Update, target: int, growing: bool, block_size: int) -> np.ndarray:
    """``coef S`` with ``D`` added to block ``target`` (appended as a new block while growing)."""
    if growing:
        return np.concatenate([coef @ update.shrink, update.delta])
    out = coef @ update.shrink
    out[target * block_size:(target + 1) * block_size] += update.delta
    return out


def updated_variances_exact(h: np.ndarray, z: np.ndarray, update: Update, center: bool) -> np.ndarray:
    """Variances on the batch of the updated functions ``h S + z D``, evaluated row by row."""
    h_new = h @ update.shrink + z @ update.delta.astype(z.dtype, copy=False)
    if center:
        h_new -= h_new.mean(axis=0)
    return np.einsum("ij,ij->j", h_new, h_new) / max(len(h_new), 1)


def updated_variances_from_moments(C_hh: np.ndarray, C_zh: np.ndarray, C_zz: np.ndarray,
                                   update: Update) -> np.ndarray:
    """The same variances from the batch moments alone (``Cov(h)``, ``Cov(z, h)``, ``Cov(z)``)."""
    S, D = update.shrink, update.delta
    cross = S.T @ C_zh.T @ D
    cov = S.T @ C_hh @ S + cross + cross.T + D.T @ C_zz @ D
    return np.diag(cov)


def check_variances(variances: np.ndarray, deltas, limit: float, t: int) -> None:
    """Raise :class:`DivergenceError` when a variance is non-finite or above ``limit``."""
    top = float(np.max(variances)) if len(variances) else 0.0
    if not (np.isfinite(top) and all(np.isfinite(d).all() for d in deltas)) or top > limit:
        raise DivergenceError(f"update step {t} diverged (largest component variance {top:.3g})")


def column_products(z: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(z.sum(axis=0), z^T a)`` in float64 for features ``z`` of any float precision.

    A float32 ``z`` is converted a tile of rows (:func:`~dsgd_dask.model.expansion.tile_rows`)
    at a time into the thread's float64 scratch buffer, the tiles added in row order: no
    float64 copy of the whole batch, the same sums on any number of threads.
    """
    if z.dtype == np.float64:
        return z.sum(axis=0), z.T @ a
    rows = tile_rows(z.shape[1], 8)
    buf = scratch("column-products", (min(rows, len(z)), z.shape[1]), np.float64)
    total, prod = np.zeros(z.shape[1]), np.zeros((z.shape[1], a.shape[1]))
    for r0 in range(0, len(z), rows):
        tile = buf[:min(rows, len(z) - r0)]
        np.copyto(tile, z[r0:r0 + rows])
        total += tile.sum(axis=0)
        prod += tile.T @ a[r0:r0 + rows]
    return total, prod


def set_sums(i: int, h: np.ndarray, z: np.ndarray, for_parts: bool, products: tuple | None = None) -> dict:
    """The sums every rule keeps of set ``i``: row sums of ``h`` and ``z``, ``h^T h``, ``z^T h``.

    With ``for_parts``, also ``z^T z`` (the divergence check of data-parallel steps).
    ``products``: ``(z's row sum, z^T h)`` when the rule has them already (:func:`column_products`).
    """
    s = f"{i}"
    z_sum, zh = column_products(z, h) if products is None else products
    out = {"h" + s: h.sum(axis=0), "z" + s: z_sum, "hh" + s: h.T @ h, "zh" + s: zh}
    if for_parts:
        z64 = z.astype(np.float64, copy=False)
        out["zz" + s] = z64.T @ z64
    return out


class StepRule:
    """One method's doubly stochastic step, as statistics and an update (see the module docstring).

    Subclasses set :attr:`set_views` and implement :meth:`sums` and :meth:`updates`.

    Attributes
    ----------
    set_views : tuple of int
        For each function set, the input view its features act on (an index into the
        engine's feature sets and :attr:`columns`).
    columns : tuple of slice
        For each input view, its columns in a batch of stacked rows ``[X | Y | ...]``.
    center : bool
        Centre the statistics on the batch (the covariance operators, not the
        uncentred second moments).
    guard_limit : float
        Largest variance of an updated function on the batch before the step counts as
        diverged.
    """

    set_views: tuple[int, ...] = (0,)

    def __init__(self, columns: tuple[slice, ...], center: bool, guard_limit: float):
        self.columns = tuple(columns)
        self.center = bool(center)
        self.guard_limit = float(guard_limit)

    @property
    def n_sets(self) -> int:
        return len(self.set_views)

    def rows(self, slab: np.ndarray, set_index: int) -> np.ndarray:
        """The columns of ``slab`` that function set ``set_index`` reads."""
        cols = self.columns[self.set_views[set_index]]
        return slab if cols == slice(None) else slab[:, cols]

    def extra(self, slab: np.ndarray) -> dict:
        """Per-row inputs of a batch that are not features (e.g. slice labels); none by default."""
        return {}

    def sums(self, h: tuple, z: tuple, extra: dict, for_parts: bool) -> Sums:
        """The additive statistics of a batch (or part of one).

        ``h[i]`` holds the current functions of set ``i`` on the rows (float64, rows x k)
        and ``z[i]`` the features of the step's block of set ``i`` (rows x m). With
        ``for_parts``, also what :meth:`updates` needs to check divergence without the
        rows (the moments of ``z``).
        """
        raise NotImplementedError

    def updates(self, total: Sums, eta: float, block: int = 0) -> tuple[Update, ...]:
        """One :class:`Update` per function set from the reduced sums, step size ``eta``.

        ``block`` is the index of the block the step feeds (for a preconditioner kept per block).
        """
        raise NotImplementedError

    def moments(self, total: Sums, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``Cov(h_i)``, ``Cov(z_i, h_i)``, ``Cov(z_i)`` of set ``i``, from sums made ``for_parts``."""
        s = f"{i}"
        c = self.center
        return (covariance(total, "hh" + s, "h" + s, "h" + s, c), covariance(total, "zh" + s, "z" + s, "h" + s, c),
                covariance(total, "zz" + s, "z" + s, "z" + s, c))

    def check(self, updates: tuple[Update, ...], t: int, total: Sums, local=None) -> None:
        """Raise :class:`DivergenceError` if the updated functions explode on the batch.

        Exact on the rows when ``local = (h, z)`` is given, else from the moments in
        ``total`` (data-parallel steps).
        """
        variances = []
        for i, up in enumerate(updates):
            if local is not None:
                variances.append(updated_variances_exact(local[0][i], local[1][i], up, self.center))
            else:
                variances.append(updated_variances_from_moments(*self.moments(total, i), up))
        check_variances(np.concatenate(variances), [up.delta for up in updates], self.guard_limit, t)

