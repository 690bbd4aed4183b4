"""Kernel ridge regression by full-data passes: preconditioned conjugate gradients.

The coefficients ``A`` (``M x c``) of ``f(x) = z(x) A`` minimise
``E[|f(x) - y|^2] / 2 + alpha/2 ||f||_H^2 = E[|f(x) - y|^2] / 2 + alpha/2 tr(A^T P A)``,
i.e. solve ``(E[z z^T] + alpha P) A = E[z y^T]``: ``P = W^T K_LL W`` for Nyström features
(the kernel's own RKHS norm on the landmarks' span, :class:`RKHSPenalty`), ``P = J I`` for
``J`` Fourier blocks (the norm under their average kernel).
A first pass over the rows gives the right-hand side (and, for the block-Jacobi
preconditioner, the diagonal blocks ``E[z_b z_b^T]`` of every feature block: ``M m``
numbers, bounded like the features); each later pass multiplies the full matrix by the
search directions without forming it. :class:`CGSolver` runs these passes on the pass
driver (:func:`~dsgd_dask.engine.driver.run_passes`: one reduction over the row chunks on
every worker at once, a checkpoint after every pass). Preconditioned, conjugate gradients
converge geometrically where stochastic steps converge as ``O(1/t)``.

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

The steps (``solver="dsgd"``) reach the same function through :class:`JointNystroemBlocks`:
the landmarks whitened together and split into blocks whose average kernel is the
Nyström kernel of all ``M`` landmarks, so the RKHS norm the steps penalise is the one the
passes penalise.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from dsgd_dask._linalg import small_eigh
from dsgd_dask._threads import map_ordered, one_blas_thread
from dsgd_dask.engine.driver import Update
from dsgd_dask.engine.passes import PassTotals, covariance_request, covariance_times, moment_request, ridge_moments
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.model.expansion import KernelExpansion


@dataclass
class RidgeSums:
    """``E[z_b z_b^T]`` per block (``(J, m, m)``, or ``None``), ``E[z y^T]`` (``(M, c)``) and the rows seen."""

    n: int
    blocks: np.ndarray | None
    cross: np.ndarray


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
        self.factors = [self._factor(b, floor) for b in blocks]

    @staticmethod
    def _factor(block: np.ndarray, floor: float):
        # a block that the floor does not hold up (moments summed in float32) gets a floor 100 times higher
        with one_blas_thread():
            for _ in range(8):
                try:
                    return cho_factor(block + floor * np.eye(block.shape[0]))
                except np.linalg.LinAlgError:
                    floor = max(100 * floor, float(np.finfo(np.float32).eps) * float(np.trace(block)) / len(block))
        raise np.linalg.LinAlgError("a block of the block-Jacobi preconditioner is not positive definite")

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


#: Factorisations :class:`LandmarkPreconditioner` tries, each with a floor 100 times the last's
#: (and at least :data:`RETRY_FLOOR` times the mean diagonal after the first); each recomputes
#: the moment, the Cholesky factor having overwritten it.
FACTOR_ATTEMPTS = 6
#: The floor of the second factorisation, relative to the factored matrix's mean diagonal.
RETRY_FLOOR = 1e-12


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
    the README's MNIST results show both). Where the factorisation still fails (float64
    blocks whose whitening keeps directions of eigenvalue near ``m eps``: the Gram matrix
    ``W^T K_LL W`` then carries round-off of order one), it is made again with a higher
    floor (:data:`FACTOR_ATTEMPTS`); :attr:`floor` is the one that held.

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
        tried = None
        for _ in range(FACTOR_ATTEMPTS):
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
            mean_diagonal = float(diag.sum()) / M
            try:
                # the C-ordered upper triangle is the lower one of the Fortran-ordered
                # transpose: LAPACK factors it in place, and leaves the other triangle (the Gram tiles) alone
                with one_blas_thread():
                    self.factor = cho_factor(C.T, lower=True, overwrite_a=True, check_finite=False)
                break
            except np.linalg.LinAlgError:  # round-off beyond the floor: a floor at least 100 times higher
                self.gram = None
                del C, diag
                tried, floor = floor, max(100 * floor, RETRY_FLOOR * mean_diagonal)
        else:  # pragma: no cover
            raise np.linalg.LinAlgError(f"the landmark preconditioner is not positive definite, even with a floor of "
                                        f"{tried:.3g} under it; use preconditioner='block'")
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

    def advance(self, Ap: np.ndarray, precondition) -> np.ndarray:
        """One step, given ``Ap`` (the system matrix times the directions) from a pass.

        Returns, per right-hand side, whether ``p^T A p <= 0`` while ``r^T P r > 0``: the
        system is not positive definite along ``p``, and that column did not move.
        """
        pAp = np.einsum("ij,ij->j", self.p, Ap)
        step = np.divide(self.rz, pAp, out=np.zeros_like(self.rz), where=pAp > 0)
        self.x += self.p * step
        self.r -= Ap * step
        z = precondition(self.r)
        rz = np.einsum("ij,ij->j", self.r, z)
        beta = np.divide(rz, self.rz, out=np.zeros_like(rz), where=self.rz > 0)
        self.p = z + self.p * beta
        lost = (pAp <= 0) & (self.rz > 0)
        self.rz = rz
        return lost

    def relative_residual(self, b: np.ndarray) -> float:
        """The largest ``|r_j| / |b_j|`` over the right-hand sides."""
        nb = np.linalg.norm(b, axis=0)
        nr = np.linalg.norm(self.r, axis=0)
        return float(np.max(np.divide(nr, nb, out=np.zeros_like(nr), where=nb > 0)))


class JointNystroemBlocks(NystroemFeatures):
    """All ``M`` landmarks whitened together, in ``J`` blocks of ``m`` features: the steps' Nyström features.

    ``z(x) = sqrt(J) k(x, L) K_LL^{-1/2}`` (the symmetric inverse square root, on the
    eigenvalues of ``K_LL`` above ``M eps max |K_ij|``, ``eps`` of the features'
    precision), block ``t`` its columns ``t m`` to ``(t + 1) m``. Then
    ``sum_t z_t(x) . z_t(y) = J k_L(x, y)``, ``k_L`` the Nyström kernel of all the
    landmarks: the blocks' *average* kernel is ``k_L``, and ``f = z A`` has
    ``||f||_H^2 = J |A|^2``. The steps shrink every block and feed one, so they minimise
    ``E[l(f(x), y)] + nu/2 J |A|^2``: the same objective as the passes
    (:class:`RKHSPenalty`) and, with every row a landmark, as kernel ridge regression
    itself. Blocks whitened each on its own (:class:`~dsgd_dask.features.nystroem.NystroemFeatures`)
    would average ``J`` Nyström kernels of ``m`` landmarks instead, a different (and
    coarser) kernel for ``J > 1``.

    The symmetric root spreads every direction of ``K_LL`` over all the blocks, so each
    block has about the second moment of one block whitened on its own (``K_tt / m``),
    and the step scale of the first block holds for all. The coefficients are those of
    all the blocks (a block's features need the sections of all the landmarks).

    Costs: one eigendecomposition of ``K_LL`` (``O(M^3)``, ``3 M^2`` float64 of memory while
    it runs) per fit; the root is kept in float64 (coefficients) and in the features'
    precision (rows); a step's block costs the kernel sections of all the landmarks and
    ``2 B M m`` multiply-adds for ``B`` rows.

    Parameters
    ----------
    kernel, landmarks, block_size, seed, dtype, center
        As for :class:`~dsgd_dask.features.nystroem.NystroemFeatures`.
    root : ndarray of shape (M, M), optional
        ``sqrt(J) K_LL^{-1/2}``; computed from the landmarks when not given.
    """

    def __init__(self, kernel, landmarks, block_size: int, seed: int, dtype="float32", center=None,
                 root: np.ndarray | None = None):
        super().__init__(kernel, landmarks, block_size, seed, dtype, center=center, whiten=False)
        self.raw_are_features = False  # a block's features mix the sections of every landmark
        self.root = np.ascontiguousarray(self._joint_root() if root is None else root, dtype=np.float64)
        M = self.landmarks.shape[0]
        if self.root.shape != (M, M):
            raise ValueError(f"root must have shape {(M, M)}, got {self.root.shape}")
        self._root_rows = self.root.astype(self.dtype)

    @classmethod
    def of(cls, features: NystroemFeatures) -> JointNystroemBlocks:
        """The joint blocks of the landmarks (and kernel, seed, precision, centre) of ``features``."""
        return cls(features.kernel, features.landmarks, features.block_size, features.seed, features.dtype,
                   center=features.center)

    def sections(self) -> NystroemFeatures:
        """The kernel sections on the same landmarks (``whiten=False``): the features of :meth:`fold` coefficients."""
        return NystroemFeatures(self.kernel, self.landmarks, self.block_size, self.seed, self.dtype,
                                center=self.center, whiten=False)

    def _joint_root(self) -> np.ndarray:
        M = self.landmarks.shape[0]
        K = self.landmark_kernel(0, M)
        if not np.isfinite(K).all():
            raise ValueError("the kernel is not finite on the landmarks; check the bandwidth")
        K += K.T
        K *= 0.5
        scale = float(np.abs(K).max(initial=0.0))
        s, u = small_eigh(K)
        del K
        keep = s > scale * M * np.finfo(self.dtype).eps
        u = u[:, keep]
        with one_blas_thread():
            return (u / np.sqrt(s[keep] / self.max_blocks)) @ u.T

    def transform(self, X, start_block: int, stop_block: int) -> np.ndarray:
        """Features of blocks ``[start_block, stop_block)``: the sections of every landmark times the root's columns."""
        m = self.block_size
        S = self.raw_transform(X, 0, self.max_blocks)
        with one_blas_thread():
            return S @ self._root_rows[:, start_block * m:stop_block * m]

    def apply(self, Xp, page, out=None):
        raise NotImplementedError("joint Nyström blocks are evaluated by transform (the sections of every landmark)")

    def _check_rows(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        if a.shape[0] != self.root.shape[0]:
            raise ValueError(f"joint Nyström blocks take coefficients of all {self.root.shape[0]} features, "
                             f"got {a.shape[0]} rows")
        return a

    def fold(self, coef: np.ndarray) -> np.ndarray:
        """Coefficients of the blocks as coefficients of the kernel sections: ``root A``."""
        with one_blas_thread():
            return self.root @ self._check_rows(coef)

    def unfold(self, grad: np.ndarray) -> np.ndarray:
        """Sums over kernel sections as sums over the blocks' features: ``root^T G`` (the root is symmetric)."""
        with one_blas_thread():
            return self.root.T @ self._check_rows(grad)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "whitening": "joint"}


#: The state's arrays whose memory layout :class:`CGSolver` keeps across a checkpoint.
_LAID_OUT = ("b", "x", "r", "p")


def _fortran(a: np.ndarray) -> bool:
    return bool(a.flags.f_contiguous and not a.flags.c_contiguous)


def _in_layout(state: dict) -> list[np.ndarray]:
    """``b, x, r, p`` of a :class:`CGSolver` state in the memory layout they had when it was made.

    The directions ``p`` come from the preconditioner's Cholesky solves in Fortran order; a
    checkpoint stores C order. The layout picks the BLAS path (and so the bits) of the
    products with them, so a resumed fit restores it to end where an uninterrupted one does.
    """
    return [np.asfortranarray(state[k]) if flag else state[k]
            for k, flag in zip(_LAID_OUT, state["fortran"], strict=True)]


class CGSolver:
    """Preconditioned conjugate gradients for kernel ridge regression, a pass solver of the driver.

    Solves ``(E[z z^T] + alpha P) A = E[z y^T]`` (:mod:`the module <dsgd_dask.engine.ridge>`)
    by full-data passes of :func:`~dsgd_dask.engine.driver.run_passes` over the stacked rows
    (inputs in ``cols[0]``, targets in ``cols[1]``):

    * the first pass (:func:`~dsgd_dask.engine.passes.moment_request`) gathers the
      right-hand side ``b = E[z y^T]`` and, for block-Jacobi, each block's ``E[z_b z_b^T]``;
      the iterate is then zero and the measure ``1`` (an iteration: ``max_iter`` counts it);
    * every later pass (:func:`~dsgd_dask.engine.passes.covariance_request` on the input
      columns) multiplies ``E[z z^T]`` by the search directions, and one step of conjugate
      gradients (:class:`CGState`) follows.

    The state (what a checkpoint keeps): ``b``, ``blocks`` (block-Jacobi only: the
    preconditioner is rebuilt from them on resume), the conjugate gradients' ``x``,
    ``r``, ``p``, ``rz``, and ``fortran``, the memory layout of ``b, x, r, p`` (restored
    on resume: it picks the BLAS path of the products, and so their bits). The
    preconditioner and the penalty are made once per run, from the features and the
    first pass's sums, in this process: the same on any scheduler.
    The measure is :meth:`CGState.relative_residual`, the largest ``|r_j| / |b_j|``.

    Parameters
    ----------
    features : NystroemFeatures or RandomFeatures
        The feature blocks (each Nyström block whitened on its own).
    n_blocks : int
        ``J``: blocks in use, ``M = J m``.
    cols : tuple of slice
        The input and the target columns of the stacked rows.
    alpha : float
        The regulariser.
    shift : ndarray of shape (M,)
        Subtracted from the raw features in the passes (their mean on a sample: float32
        sums without cancellation); any value gives the same products up to round-off.
    preconditioner : {"block", "landmarks"}
        :class:`BlockJacobi` or (Nyström features) :class:`LandmarkPreconditioner`.
    ridge : float, default=0.0
        Nyström features: the precision ridge (:func:`precision_ridge`) of the penalty
        :class:`RKHSPenalty`; Fourier features have ``P = J I``.
    tol : float, default=0.0
        :meth:`done` once the measure is at most ``tol``.
    target_shift : ndarray of shape (c,), optional
        A constant per output subtracted from the targets (the intercept): the function
        fits ``y - target_shift``, and the callback's model adds it back.
    """

    name = "cg"
    measure_name = "relative_residual"

    def __init__(self, features, n_blocks: int, cols: tuple, alpha: float, shift: np.ndarray, preconditioner: str,
                 ridge: float = 0.0, tol: float = 0.0, target_shift: np.ndarray | None = None):
        if preconditioner not in ("block", "landmarks"):
            raise ValueError(f"preconditioner must be 'block' or 'landmarks', got {preconditioner!r}")
        self.nystroem = isinstance(features, NystroemFeatures)
        if preconditioner == "landmarks" and not self.nystroem:
            raise ValueError("the landmark preconditioner needs Nyström features")
        self.features, self.n_blocks = features, int(n_blocks)
        self.x_cols, self.y_cols = cols
        self.alpha, self.shift, self.ridge, self.tol = float(alpha), shift, float(ridge), float(tol)
        self.preconditioner = preconditioner
        self.target_shift = None if target_shift is None else np.asarray(target_shift, dtype=np.float64)
        self._system = None

    def _blocks(self) -> bool:
        return self.preconditioner == "block"

    def system(self, blocks: np.ndarray | None = None) -> tuple:
        """``(precondition, penalty)``: made on first use (``blocks``: each block's moment, for block-Jacobi)."""
        if self._system is None:
            f, J, alpha = self.features, self.n_blocks, self.alpha
            if self.nystroem:
                # the RKHS norm of f itself: Nyström kernel ridge on all M landmarks
                if self.preconditioner == "landmarks":
                    precondition = LandmarkPreconditioner(f, J, alpha, rkhs=True, ridge=self.ridge)
                    # the same system as block-Jacobi's: the factor's floor stays in the preconditioner
                    penalty = RKHSPenalty(f, J, alpha, self.ridge, gram=precondition.gram)
                else:
                    penalty = RKHSPenalty(f, J, alpha, self.ridge)
                    precondition = BlockJacobi(blocks, 0.0, penalty.block_diagonal())
            else:
                # J blocks each approximate the kernel: |f|^2 = J |A|^2
                precondition = BlockJacobi(blocks, alpha * J)

                def penalty(P, ridge=alpha * J):
                    return ridge * P
            self._system = precondition, penalty
        return self._system

    def start(self) -> dict:
        return {}

    def plan(self, state: dict):
        if "b" not in state:  # the right-hand side
            return moment_request(self.features, self.n_blocks, self.x_cols, self.y_cols, with_blocks=self._blocks(),
                                  sums=self.target_shift is not None)
        return covariance_request(self.features, self.n_blocks, state["p"], self.shift, cols=self.x_cols)

    def update(self, state: dict, totals: PassTotals) -> Update:
        if "b" not in state:
            sums = ridge_moments(totals, self.features, with_blocks=self._blocks(), target_shift=self.target_shift)
            b = sums.cross
            precondition, _ = self.system(sums.blocks)
            cg = CGState.start(b, precondition)
            lost = np.zeros(b.shape[1], dtype=bool)  # no step yet
            kept = {"blocks": sums.blocks} if self._blocks() else {}
        else:
            b, x, r, p = _in_layout(state)
            precondition, penalty = self.system(state.get("blocks"))
            Ap = covariance_times(totals, self.features, p, self.shift, False).cov_times
            cg = CGState(x.copy(order="K"), r.copy(order="K"), p, state["rz"].copy())
            lost = cg.advance(Ap + penalty(cg.p), precondition)
            kept = {"blocks": state["blocks"]} if "blocks" in state else {}
        new = {"b": b, **kept, "x": cg.x, "r": cg.r, "p": cg.p, "rz": cg.rz}
        new["fortran"] = np.array([_fortran(new[k]) for k in _LAID_OUT])
        measure = cg.relative_residual(b)
        if lost.any():
            warnings.warn(f"conjugate gradients stop at a relative residual of {measure:.3g}: the system is not "
                          f"positive definite to round-off along the search direction of output(s) "
                          f"{np.flatnonzero(lost).tolist()}, and no step can go on; the model is the last iterate. "
                          "The RKHS penalty of Nyström blocks whose whitenings keep eigenvalues near the "
                          "features' round-off (many landmarks on inputs of few dimensions) has round-off of "
                          "its own; fewer features avoid it", RuntimeWarning, stacklevel=2)
            return Update(new, measure, extra={"indefinite": True})
        return Update(new, measure)

    def done(self, record: dict) -> bool:
        """Once the measure is at most ``tol``, or the system lost its curvature (no step moves the iterate)."""
        return record["measure"] <= self.tol or bool(record.get("indefinite", False))

    def model(self, state: dict) -> KernelExpansion:
        """What the callback gets: the current function (zero after the first pass; plus the intercept)."""
        return KernelExpansion(self.features, state["x"], None if self.target_shift is None else -self.target_shift)


# -- alpha="auto": the regulariser chosen on held-out rows -----------------------------------------

#: ``alpha="auto"``: the decades searched, ``10^d`` times the kernel's mean diagonal ``E[k(x, x)]``
#: (``alpha`` is in units of the kernel per row), then the half decades either side of the best.
AUTO_ALPHA_DECADES = np.arange(-9.0, 0.0)
#: ``alpha="auto"``: the fraction of the selection rows held out to score each ``alpha``.
AUTO_HELD_OUT = 0.2


@dataclass
class AlphaPath:
    """The regulariser chosen (``alpha``), the values tried (``grid``, increasing) and their held-out scores."""

    alpha: float
    grid: np.ndarray
    scores: np.ndarray


def held_out_split(n_rows: int) -> int:
    """Rows of a selection set of ``n_rows`` fitted on: the first ones; the last ``AUTO_HELD_OUT`` are scored.

    At least one row on either side (``n_rows >= 2``).
    """
    if n_rows < 2:
        raise ValueError(f"alpha='auto' needs at least 2 rows to hold some out, got {n_rows}")
    return n_rows - min(n_rows - 1, max(1, round(AUTO_HELD_OUT * n_rows)))


def relative_score(Y: np.ndarray, F: np.ndarray, variance: np.ndarray) -> float:
    """``1 - E[(y - f)^2] / variance`` averaged over the outputs: an R² against a fixed variance (higher is better).

    ``variance``: each output's variance on all the selection rows (where it is zero, the
    score of that output is minus its mean square error).
    """
    mse = np.mean((np.asarray(Y, dtype=np.float64) - F) ** 2, axis=0)
    scale = np.where(variance > 0, variance, 1.0)
    return float(np.mean(np.where(variance > 0, 1.0, 0.0) - mse / scale))


def search_alpha(score, scale: float, decades: np.ndarray = AUTO_ALPHA_DECADES, refine: bool = True) -> AlphaPath:
    """The ``alpha`` of highest ``score(alpha)`` over ``scale 10^d`` (``d`` in ``decades``), then half decades.

    ``score(alpha)``: a held-out score, higher is better (``-inf`` for a failed solve).
    With ``refine``, the two half decades either side of the best decade are scored too.
    Ties go to the larger ``alpha`` (the smoother function). Calls: ``len(decades) + 2``.
    """
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"alpha='auto' needs a positive kernel scale, got {scale}")
    tried = {float(d): score(scale * 10.0 ** d) for d in np.asarray(decades, dtype=np.float64)}

    def best():
        ds = np.array(sorted(tried))
        s = np.array([tried[d] for d in ds])
        if not np.isfinite(s).any():
            raise np.linalg.LinAlgError("alpha='auto': no regulariser of the grid gave a finite held-out score")
        return ds, s, ds[np.flatnonzero(s == np.nanmax(s))[-1]]

    if refine:
        d0 = best()[2]
        for d in (d0 - 0.5, d0 + 0.5):
            if d not in tried:
                tried[d] = score(scale * 10.0 ** d)
    ds, s, d = best()
    return AlphaPath(float(scale * 10.0 ** d), scale * 10.0 ** ds, s)


class PrimalRidgePath:
    """Held-out scores of ridge on features for any ``alpha``: a ``score`` of :func:`search_alpha`.

    Solves ``(Z_t^T Z_t / n_t + alpha P + floor I) A = Z_t^T Y_t / n_t``. ``Z``: features of
    the selection rows (``n x M``), ``Y`` their targets; the first ``n_fit`` rows are
    fitted, the others scored (:func:`relative_score`). ``penalty``: the penalty's
    ``M x M`` matrix ``P`` (symmetric positive semi-definite); ``ridge``: a term not
    scaled by ``alpha`` (the precision ridge), raised to ``100 eps tr(Z_t^T Z_t / n_t)``
    of float64 at least (the moments' round-off). The moments, ``M^2`` float64, are formed
    once (``n_fit M^2`` multiply-adds); every ``alpha`` costs one Cholesky factorisation
    (``M^3 / 3``) and the held-out products (``(n - n_fit) M c``).
    """

    def __init__(self, Z: np.ndarray, Y: np.ndarray, n_fit: int, penalty: np.ndarray, ridge: float = 0.0):
        Z = np.asarray(Z, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64).reshape(Z.shape[0], -1)
        Zt = Z[:n_fit]
        with one_blas_thread():
            self.C = Zt.T @ Zt / n_fit
            self.b = Zt.T @ Y[:n_fit] / n_fit
        self.P = np.asarray(penalty, dtype=np.float64)
        self.floor = max(float(ridge), 100 * float(np.finfo(np.float64).eps) * float(np.trace(self.C)))
        self.Zv, self.Yv = Z[n_fit:], Y[n_fit:]
        self.variance = Y.var(axis=0)

    def coef(self, alpha: float) -> np.ndarray:
        """The coefficients ``A`` at ``alpha`` (``LinAlgError`` when the system is not positive definite)."""
        A = self.C + alpha * self.P
        A.flat[::A.shape[0] + 1] += self.floor
        with one_blas_thread():
            return cho_solve(cho_factor(A, lower=True, overwrite_a=True, check_finite=False), self.b,
                             check_finite=False)

    def __call__(self, alpha: float) -> float:
        try:
            A = self.coef(alpha)
        except np.linalg.LinAlgError:
            return -np.inf
        with one_blas_thread():
            return relative_score(self.Yv, self.Zv @ A, self.variance)


class LeaveOneOutPath:
    """Leave-one-out scores of kernel ridge ``(K + alpha n I) c = Y`` on ``n`` rows for any ``alpha``.

    One eigendecomposition ``K = Q diag(lam) Q^T`` (``n^2`` float64 besides ``K``, about
    ``4 n^3`` flops); then each ``alpha`` costs ``O(n^2)``: with ``w = lam / (lam + alpha n)``
    the fitted values are ``Q diag(w) Q^T Y`` and the diagonal of the hat matrix is
    ``(Q * Q) w``, and the residual of row ``i`` in the fit without it is
    ``(y_i - yhat_i) / (1 - H_ii)`` (Allen 1974, as scikit-learn's ``RidgeCV``): the fit on
    the other ``n - 1`` rows with the same penalty ``alpha n``. Scored by
    :func:`relative_score` over all ``n`` rows.
    """

    def __init__(self, K: np.ndarray, Y: np.ndarray):
        n = K.shape[0]
        Y = np.asarray(Y, dtype=np.float64).reshape(n, -1)
        lam, Q = np.linalg.eigh(K)
        self.n, self.Y, self.variance = n, Y, Y.var(axis=0)
        self.lam = np.clip(lam, 0.0, None)  # K is PSD: negative eigenvalues are round-off
        self.Q, self.QY, self.Q2 = Q, Q.T @ Y, Q * Q

    def __call__(self, alpha: float) -> float:
        w = np.divide(self.lam, self.lam + alpha * self.n, out=np.zeros_like(self.lam), where=self.lam > 0)
        leverage = 1.0 - self.Q2 @ w
        if not np.all(leverage > 64 * np.finfo(np.float64).eps):  # a row its own fit interpolates
            return -np.inf
        residual = (self.Y - self.Q @ (w[:, None] * self.QY)) / leverage[:, None]
        return relative_score(self.Y, self.Y - residual, self.variance)


def feature_path(features, n_blocks: int, X: np.ndarray, Y: np.ndarray, n_fit: int) -> tuple[PrimalRidgePath, float]:
    """The :class:`PrimalRidgePath` of the ridge objective of ``features`` on the rows ``X`` and its kernel scale.

    Nyström blocks whitened each on its own (:class:`RKHSPenalty`): the kernel sections of
    the ``M`` landmarks, the penalty ``alpha K_LL + ridge I`` on their coefficients
    (``ridge`` the precision ridge, :func:`precision_ridge`): the same functions and norm in
    the basis of the sections. Jointly whitened blocks (:class:`JointNystroemBlocks`) and
    Fourier blocks: the features and ``J I``. The scale is the kernel's mean diagonal
    (``tr(K_LL) / M``; ``E|z|^2 / J``), which :func:`search_alpha` multiplies.
    """
    if isinstance(features, NystroemFeatures) and not isinstance(features, JointNystroemBlocks):
        Z = np.asarray(features.raw_transform(X, 0, n_blocks), dtype=np.float64)
        M = Z.shape[1]
        P = features.landmark_kernel(0, M, n_blocks)
        P = (P + P.T) / 2
        return PrimalRidgePath(Z, Y, n_fit, P, precision_ridge(Z, features.dtype, centre=False)), np.trace(P) / M
    Z = np.asarray(features.transform(X, 0, n_blocks), dtype=np.float64)
    scale = float(np.mean(np.einsum("ij,ij->i", Z, Z))) / n_blocks
    return PrimalRidgePath(Z, Y, n_fit, n_blocks * np.eye(Z.shape[1])), scale
