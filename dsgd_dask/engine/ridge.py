"""Kernel ridge regression by full-data passes: preconditioned conjugate gradients.

The coefficients ``A`` (``M x c``) of ``f(x) = z(x) A`` minimise
``E[|f(x) - y|^2] / 2 + alpha/2 |A|^2``, i.e. solve ``(E[z z^T] + alpha I) A = E[z y^T]``.
A first pass over the rows gives the right-hand side (and, for the block-Jacobi
preconditioner, the diagonal blocks ``E[z_b z_b^T]`` of every feature block: ``M m``
numbers, bounded like the features); each later pass multiplies the full matrix by the
search directions without forming it (:func:`~dsgd_dask.engine.passes.full_pass`, a tree
reduction over row chunks that runs on every worker at once). Preconditioned, conjugate
gradients converge geometrically where stochastic steps converge as ``O(1/t)``.

Two preconditioners:

* :class:`BlockJacobi`, the inverse of each block's own second moment (any features).
  Nyström blocks are redundant (each alone approximates the same kernel), so
  ``E[z z^T]`` has a large near-null space that only ``alpha`` regularises, and the
  block-diagonal part does not see it: with many blocks the preconditioned spectrum
  spans ``alpha`` to ``J`` and conjugate gradients slow down.
* :class:`LandmarkPreconditioner` (Nyström features), after FALKON (Rudi et al. 2017):
  the landmarks are rows drawn uniformly from the data, so the second moment of the
  features over the landmarks themselves estimates the one over the data,
  ``E[z z^T] ~ W^T K_LL^2 W / M`` (``K_LL`` the kernel matrix of all ``M`` landmarks,
  ``W`` the block-diagonal whitening), coupling the blocks. Its inverse (plus
  ``alpha``) by one Cholesky factorisation: no data pass, ``M^2`` float64 of memory
  (made in place), ``O(M^3)`` time once, ``O(M^2 c)`` per pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from dsgd_dask._threads import map_ordered, one_blas_thread, scratch
from dsgd_dask.engine.passes import features_in_graph, reduce_row_chunks, slice_rows
from dsgd_dask.streams.inputs import DataView


@dataclass
class RidgeSums:
    """``E[z_b z_b^T]`` per block (``(J, m, m)``, or ``None``), ``E[z y^T]`` (``(M, c)``) and the rows seen."""

    n: int
    blocks: np.ndarray | None
    cross: np.ndarray


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


class BlockJacobi:
    """The preconditioner ``diag_b(E[z_b z_b^T] + P_b + alpha I)^{-1}``, one Cholesky factor per block.

    ``penalty``: the diagonal blocks ``P_b`` of a penalty's matrix (``(J, m, m)``, e.g.
    :meth:`RKHSPenalty.block_diagonal`), else none. Factored and applied on one BLAS
    thread, as :class:`LandmarkPreconditioner` is: OpenBLAS 0.3.31's threaded ``dpotrf``
    crashes (SIGSEGV) on matrices of 16,384 rows.
    """

    def __init__(self, blocks: np.ndarray, alpha: float, penalty: np.ndarray | None = None):
        m = blocks.shape[1]
        # a floor under alpha keeps blocks of linearly dependent features invertible
        floor = max(alpha, 1e-10 * max(float(np.trace(b)) / m for b in blocks))
        self.m = m
        if penalty is not None:
            blocks = blocks + penalty
        with one_blas_thread():
            self.factors = [cho_factor(b + floor * np.eye(m)) for b in blocks]

    def __call__(self, R: np.ndarray) -> np.ndarray:
        m = self.m
        with one_blas_thread():
            return np.concatenate([cho_solve(f, R[i * m:(i + 1) * m]) for i, f in enumerate(self.factors)])


def landmark_moment(features, n_blocks: int) -> np.ndarray:
    """``W^T K_LL^2 W / M`` of Nyström features: their second moment over their own ``M`` landmark rows.

    Only the tiles on and above the diagonal (of the C-ordered float64 result) are
    filled, tile by tile of the feature blocks; those below are zero. ``G = W^T K_LL``
    (``M x M``) is made block row by block row (the landmarks' kernel sections,
    whitened) and rounded to the features' precision, in which the products ``G G^T`` are computed (float32 features:
    half the time of float64; :class:`LandmarkPreconditioner` floors the result above
    that round-off). Row block ``i`` of the result needs the rows of ``G`` from ``i`` on;
    ``G`` is kept in the same buffer as the result (in its second half when it is
    float32), so writing row ``i`` only overwrites rows of ``G`` already used. Peak
    memory ``M^2`` float64 (and a few ``m x m`` float64 per thread). The tiles go to parallel threads,
    each one BLAS call of a shape fixed by the model: the same numbers on any machine.
    """
    m = features.block_size
    M = n_blocks * m
    out = np.empty((M, M))
    dtype = np.dtype(features.dtype)
    if dtype == np.float64:
        G = out
    else:  # float32 row block j at byte 4 M (M + j m): before the result's row block i for every j >= i
        G = out.reshape(-1).view(dtype)[M * M:].reshape(M, M)

    def whitened(j):  # tile by tile: m x m float64 temporaries per thread
        Nj = features.normalization[j].T
        for i in range(n_blocks):
            cols = slice(i * m, (i + 1) * m)
            G[j * m:(j + 1) * m, cols] = Nj @ features.landmark_kernel(j * m, (j + 1) * m, n_blocks, columns=cols)

    def tile(ij):
        i, j = ij
        t = (G[i * m:(i + 1) * m] @ G[j * m:(j + 1) * m].T).astype(np.float64, copy=False)
        t /= M
        return t

    with one_blas_thread():
        map_ordered(whitened, range(n_blocks))
        for i in range(n_blocks):
            tiles = map_ordered(tile, [(i, j) for j in range(i, n_blocks)])
            out[i * m:(i + 1) * m, :i * m] = 0.0
            for j, t in enumerate(tiles, start=i):
                out[i * m:(i + 1) * m, j * m:(j + 1) * m] = t
    return out


class SymmetricTiles:
    """A symmetric ``M x M`` matrix kept as its ``J (J + 1) / 2`` tiles (``m x m``) on and above the diagonal.

    Parameters
    ----------
    n_blocks, block_size : int
        ``J`` and ``m``: ``M = J m``.
    dtype : dtype
        The tiles' precision.
    host : ndarray, optional
        A C-ordered float64 ``M x M`` array whose tiles strictly below the diagonal are
        free (those of :class:`LandmarkPreconditioner`'s factor, which holds the upper
        ones). float32 tiles are kept there, two to a float64 tile, where they fit
        (``J >= 3``): no memory beyond the host's. Otherwise the tiles have a buffer of
        their own, ``M (M + m) / 2`` numbers.
    """

    def __init__(self, n_blocks: int, block_size: int, dtype, host: np.ndarray | None = None):
        J, m = int(n_blocks), int(block_size)
        self.n_blocks, self.block_size, self.dtype = J, m, np.dtype(dtype)
        count = J * (J + 1) // 2
        per_host_tile = 8 // self.dtype.itemsize
        self.hosted = host is not None and per_host_tile * (J * (J - 1) // 2) >= count
        if self.hosted:
            slots = []
            for p in range(1, J):
                for q in range(p):
                    pair = host[p * m:(p + 1) * m, q * m:(q + 1) * m].view(self.dtype)
                    slots.extend(pair[:, s * m:(s + 1) * m] for s in range(per_host_tile))
        else:
            slots = list(np.empty((count, m, m), dtype=self.dtype))
        slots = iter(slots)
        self._tiles = {(i, j): next(slots) for i in range(J) for j in range(i, J)}

    @property
    def shape(self) -> tuple[int, int]:
        M = self.n_blocks * self.block_size
        return M, M

    def tile(self, i: int, j: int) -> np.ndarray:
        """Tile ``(i, j)``: a view (of the stored tile ``(j, i)``, transposed, below the diagonal)."""
        return self._tiles[i, j] if i <= j else self._tiles[j, i].T

    def row_product(self, i: int, A: np.ndarray) -> np.ndarray:
        """Block row ``i`` times ``A`` (``M x c``, in :attr:`dtype`): the sum over ``j`` of tile ``(i, j)`` ``A_j``."""
        m = self.block_size
        out = self.tile(i, 0) @ A[:m]
        for j in range(1, self.n_blocks):
            out += self.tile(i, j) @ A[j * m:(j + 1) * m]
        return out

    def dense(self) -> np.ndarray:
        """The full ``M x M`` matrix (a copy)."""
        m = self.block_size
        out = np.empty(self.shape, dtype=self.dtype)
        for i in range(self.n_blocks):
            for j in range(self.n_blocks):
                out[i * m:(i + 1) * m, j * m:(j + 1) * m] = self.tile(i, j)
        return out


def whitened_landmark_tile(features, n_blocks: int, i: int, j: int) -> np.ndarray:
    """Tile ``(i, j)`` of ``W^T K_LL W`` in float64: ``N_i^T k(L_i, L_j) N_j`` (``m x m`` temporaries)."""
    m = features.block_size
    K = features.landmark_kernel(i * m, (i + 1) * m, n_blocks, columns=slice(j * m, (j + 1) * m))
    return (features.normalization[i].T @ K) @ features.normalization[j]


def landmark_gram(features, n_blocks: int, out: SymmetricTiles) -> SymmetricTiles:
    """``W^T K_LL W`` of Nyström features, into the tiles ``out``: their Gram matrix in the RKHS.

    ``a^T W^T K_LL W a = ||z a||_H^2``. Tile ``(i, j)`` is ``N_i^T k(L_i, L_j) N_j``, from the
    landmarks' kernel sections in float64, rounded to the tiles' precision; one tile per
    task on parallel threads, ``m x m`` float64 temporaries each.
    """
    def fill(ij):
        out.tile(*ij)[...] = whitened_landmark_tile(features, n_blocks, *ij)

    with one_blas_thread():
        map_ordered(fill, [(i, j) for i in range(n_blocks) for j in range(i, n_blocks)])
    return out


#: The passes' precision ridge on the coefficients ``c`` of the kernel sections ``r``, in
#: units of ``eps^2 E|r|^2`` (``r`` shifted by its mean where the solver centres): the
#: variance of the round-off of ``r c`` in the feature precision. Functions whose variance is
#: below it are round-off, not signal.
PRECISION_UNITS = 100.0


def precision_ridge(raw: np.ndarray, dtype, centre: bool) -> float:
    """The precision ridge of kernel sections ``raw`` (sample rows) computed in ``dtype``.

    ``PRECISION_UNITS eps^2 E|r - s|^2`` with ``s`` the sections' mean (``centre``) or zero.
    Without it, where Nyström blocks are redundant (each whitening alone spans nearly the
    same functions) the system has directions that only round-off tells apart, and the
    solver would fit the round-off.
    """
    raw = np.asarray(raw, dtype=np.float64)
    if centre:
        raw = raw - raw.mean(axis=0)
    spread = float((raw ** 2).sum(axis=1).mean())
    return PRECISION_UNITS * float(np.finfo(dtype).eps) ** 2 * spread


class RKHSPenalty:
    """``(alpha W^T K_LL W + ridge W^T W + floor I) A`` for the coefficients ``A`` of Nyström features.

    ``A^T W^T K_LL W A`` is the squared RKHS norm of ``f = z A = k(., L) W A`` (``K_LL`` the
    kernel matrix of all ``M`` landmarks, ``W`` the blocks' whitenings), so ``alpha`` times
    it is the penalty of kernel ridge (or CCA) restricted to the landmarks' span: the
    problem Nyström with ``M`` landmarks solves, whatever the blocks. ``ridge W^T W`` is the
    precision ridge on the kernel-section coefficients ``W A`` (:func:`precision_ridge`).

    With ``gram`` (:class:`SymmetricTiles` of ``W^T K_LL W`` in the features' precision, from
    :class:`LandmarkPreconditioner`) a product costs ``M^2 c``; without it the rows of
    ``K_LL`` are regenerated from the landmarks, block row by block row (``M^2 d`` per
    product, ``m M`` of memory per thread).
    """

    def __init__(self, features, n_blocks: int, alpha: float, ridge: float = 0.0,
                 gram: SymmetricTiles | None = None, floor: float = 0.0):
        self.features = features
        self.n_blocks = n_blocks
        self.alpha = alpha
        self.ridge = ridge
        self.gram = gram
        self.floor = floor

    def __call__(self, A: np.ndarray) -> np.ndarray:
        f, m = self.features, self.features.block_size
        if self.gram is not None:
            Ag = np.asarray(A, dtype=self.gram.dtype)
            parts = map_ordered(lambda i: self.gram.row_product(i, Ag), range(self.n_blocks))
        else:
            C = f.fold(A)
            parts = map_ordered(lambda i: f.normalization[i].T @ (f.landmark_kernel(i * m, (i + 1) * m,
                                                                                     self.n_blocks) @ C),
                                range(self.n_blocks))
        return self.alpha * np.vstack(parts).astype(np.float64) + self.ridge * f.unfold(f.fold(A)) + self.floor * A

    def block_diagonal(self) -> np.ndarray:
        """The ``(J, m, m)`` diagonal blocks of the penalty's matrix (without ``floor``)."""
        f, m = self.features, self.features.block_size
        out = np.empty((self.n_blocks, m, m))
        for i in range(self.n_blocks):
            N = f.normalization[i]
            out[i] = self.alpha * whitened_landmark_tile(f, self.n_blocks, i, i) + self.ridge * (N.T @ N)
        return out


class LandmarkPreconditioner:
    """The preconditioner ``(W^T K_LL^2 W / M + alpha I)^{-1}`` of Nyström features, one Cholesky factor.

    ``W^T K_LL^2 W / M`` (:func:`landmark_moment`) estimates ``E[z z^T]`` on the
    landmarks, rows drawn from the data, with the blocks' coupling that block-Jacobi
    lacks. A floor under ``alpha`` keeps the factorisation defined when the features are
    linearly dependent (repeated landmarks give zero columns of the whitening) and lifts
    it above the moment's round-off: the trace times ``M eps`` of float64, or times the
    features' ``eps`` when the moment is computed in float32. Where the landmarks' moment
    is near zero only that floor and the penalty hold the factor up, so the floor also
    changes how fast the conjugate gradients converge there (faster or slower per pass:
    the README's MNIST results show both).

    With ``rkhs=True`` the penalty is the RKHS norm of the function instead of the
    coefficients' norm: the factor is of ``W^T K_LL^2 W / M + alpha W^T K_LL W + ridge W^T W``
    (``ridge`` on the norm of the coefficients of the kernel sections), and :attr:`gram`
    (:class:`SymmetricTiles` in the features' precision, :func:`landmark_gram`) keeps ``W^T K_LL W``, and
    :attr:`penalty` (:class:`RKHSPenalty`) multiplies by the penalty part of the factored matrix, with
    that Gram matrix. float32 tiles are kept in the factor's free tiles below the diagonal: the
    preconditioner holds ``M^2`` float64 in all.
    """

    def __init__(self, features, n_blocks: int, alpha: float, rkhs: bool = False, ridge: float = 0.0):
        floor = None
        M = n_blocks * features.block_size
        m = features.block_size
        for _ in range(3):
            C = landmark_moment(features, n_blocks)
            diag = C.reshape(-1)[::M + 1]  # a view
            if floor is None:
                # above the round-off of the moment, computed in the features' precision
                trace = float(diag.sum())
                floor = max(0.0 if rkhs else alpha, M * np.finfo(np.float64).eps * trace,
                            float(np.finfo(features.dtype).eps) * trace)
            diag += floor
            self.gram = None
            if rkhs:
                self.gram = landmark_gram(features, n_blocks, SymmetricTiles(n_blocks, m, features.dtype, host=C))
                for i in range(n_blocks):  # the upper triangle, tile by tile: no M^2 temporary
                    for j in range(i, n_blocks):
                        C[i * m:(i + 1) * m, j * m:(j + 1) * m] += alpha * self.gram.tile(i, j)
                    N = features.normalization[i]
                    C[i * m:(i + 1) * m, i * m:(i + 1) * m] += ridge * (N.T @ N)
            try:
                # the C-ordered upper triangle is the lower one of the Fortran-ordered
                # transpose: LAPACK factors it in place, and leaves the other triangle (the Gram tiles) alone
                with one_blas_thread():
                    self.factor = cho_factor(C.T, lower=True, overwrite_a=True, check_finite=False)
                break
            except np.linalg.LinAlgError:  # pragma: no cover - round-off beyond the floor
                self.gram = None
                del C, diag
                floor *= 100
        else:  # pragma: no cover
            raise np.linalg.LinAlgError("the landmark preconditioner is not positive definite")
        self.floor = floor
        self.penalty = RKHSPenalty(features, n_blocks, alpha, ridge, self.gram, floor) if rkhs else None

    def __call__(self, R: np.ndarray) -> np.ndarray:
        with one_blas_thread():
            return cho_solve(self.factor, R, check_finite=False)


@dataclass
class CGState:
    """Conjugate gradients on ``c`` right-hand sides at once: iterate, residual, direction, ``r^T P r``."""

    x: np.ndarray
    r: np.ndarray
    p: np.ndarray
    rz: np.ndarray

    @classmethod
    def start(cls, b: np.ndarray, precondition) -> CGState:
        z = precondition(b)
        return cls(np.zeros_like(b), b.copy(), z, np.einsum("ij,ij->j", b, z))

    def advance(self, Ap: np.ndarray, precondition) -> None:
        """One step, given ``Ap`` (the system matrix times the directions) from a pass."""
        pAp = np.einsum("ij,ij->j", self.p, Ap)
        step = np.divide(self.rz, pAp, out=np.zeros_like(self.rz), where=pAp > 0)
        self.x += self.p * step
        self.r -= Ap * step
        z = precondition(self.r)
        rz = np.einsum("ij,ij->j", self.r, z)
        beta = np.divide(rz, self.rz, out=np.zeros_like(rz), where=self.rz > 0)
        self.p = z + self.p * beta
        self.rz = rz

    def relative_residual(self, b: np.ndarray) -> float:
        """The largest ``|r_j| / |b_j|`` over the right-hand sides."""
        nb = np.linalg.norm(b, axis=0)
        nr = np.linalg.norm(self.r, axis=0)
        return float(np.max(np.divide(nr, nb, out=np.zeros_like(nr), where=nb > 0)))
