"""Nyström feature blocks: the kernel at seeded landmark rows, whitened block by block.

Block ``j`` holds ``m`` landmark rows ``L_j`` drawn from the data and the whitening
``N_j = K_jj^{-1/2}`` of their kernel matrix ``K_jj = k(L_j, L_j)`` (restricted to its
numerically nonzero eigenvalues, zero columns beyond the rank), so that the features
``z_j(x) = k(x, L_j) N_j`` have ``z_j(x) . z_j(y)`` equal to the Nyström approximation
of ``k(x, y)`` on ``L_j``: the same role as a block of random Fourier features, with
features that follow the data. A model of ``J`` blocks stores ``J m`` landmark rows and
``J`` matrices of ``m x m``: ``M d + M m`` numbers for ``M = J m`` features, where one
Nyström solve on ``M`` landmarks needs an ``M x M`` matrix.

The *raw* features of a block are the kernel sections ``k(x, L_j)``; the whitening is
linear, so the full-data passes multiply it into the coefficients (:meth:`fold`) and
into the accumulated sums (:meth:`unfold`) instead of into every row. Without whitening
(``whiten=False``) the features are the kernel sections themselves: the feature set of a
model whose whitening couples all its landmarks (:mod:`dsgd_dask.features.whitening`)
and has been folded into its coefficients.
"""

from __future__ import annotations

import numpy as np

from dsgd_dask._linalg import small_eigh
from dsgd_dask._threads import one_blas_thread, scratch
from dsgd_dask.features.bandwidth import DataScale, check_scale
from dsgd_dask.features.blocks import FeatureBlocks
from dsgd_dask.features.kernels import KernelSpec, l1_family_sections

#: Bytes of kernel sections taken at once by their elementwise work (a quarter of a core's
#: 2 MiB L2 cache here): the clipping and exponential of a band of rows are done while the
#: band is in cache, not in sweeps over every row. One GEMM still forms the whole slice
#: first (tiling it cost more, in repacked operands, than the sweeps it saved), and the
#: elementwise work is the same per entry: the sections do not depend on the band.
BAND_BYTES = 1 << 19

#: Kernels whose sections are a function of the squared distance, formed by one GEMM.
DISTANCE_KERNELS = ("gaussian", "matern")


def _distance_scale(spec: KernelSpec) -> float:
    """``c`` with the sections a function of ``-c |x - l|^2``.

    Gaussian: ``exp(-c |x - l|^2)`` with ``c = 1 / (2 sigma^2)``; Matérn: of
    ``a = sqrt(c) |x - l|`` with ``c = 2 nu / sigma^2``, the ``a`` of
    :func:`~dsgd_dask.features.kernels.kernel_matrix`.
    """
    s2 = spec.bandwidth * spec.bandwidth
    if spec.name == "gaussian":
        return 0.5 / s2
    return {0.5: 1.0, 1.5: 3.0, 2.5: 5.0}[spec.nu] / s2


def section_operand(spec: KernelSpec, Lp: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Prepared landmark rows ``Lp`` as the right-hand operand of :func:`kernel_sections`, with its column data.

    Gaussian and Matérn kernels: ``[2c L, -c, -c |l|^2]^T`` (``(d + 2) x m``, ``c`` from
    the bandwidth: :func:`_distance_scale`), so that one GEMM with the rows
    ``[x, |x|^2, 1]`` gives ``-c |x - l|^2`` with the norms and the scale folded in;
    arc-cosine kernels: ``L^T`` and the landmarks' norms; Laplacian and Cauchy kernels:
    ``L^T`` as a view of ``L`` in C order. The norms are taken in float64 and the operand
    rounded once to the precision of ``Lp``.
    """
    Lp = np.asarray(Lp)
    if spec.name in DISTANCE_KERNELS:
        c = _distance_scale(spec)
        L64 = Lp.astype(np.float64, copy=False)
        op = np.empty((Lp.shape[1] + 2, Lp.shape[0]), dtype=Lp.dtype)
        np.multiply(L64.T, 2 * c, out=op[:-2], casting="same_kind")
        op[-2] = -c
        op[-1] = -c * np.einsum("ij,ij->i", L64, L64)
        return op, None
    if spec.name == "arccos":
        return np.ascontiguousarray(Lp.T), np.sqrt(np.einsum("ij,ij->i", Lp, Lp))
    # the transpose of the rows in C order: a slice of its columns is a block of rows in C order
    return np.ascontiguousarray(Lp).T, None


def kernel_sections(spec: KernelSpec, Xp: np.ndarray, operand: np.ndarray, aux: np.ndarray | None = None,
                    out: np.ndarray | None = None) -> np.ndarray:
    """``k(X, L)`` in the precision of ``Xp``, from prepared rows and ``operand, aux = section_operand(spec, L)``.

    Gaussian and Matérn kernels take one GEMM of the rows ``[x, |x|^2, 1]`` with the
    operand, which gives ``-c |x - l|^2`` directly; then their elementwise work (a clip at
    0 against round-off, ``exp``) band by band of rows (:data:`BAND_BYTES`).
    Arc-cosine kernels take one GEMM of the inner products, then their elementwise work
    from the norms (``aux``), band by band; Laplacian and Cauchy kernels take compiled
    loops (:func:`~dsgd_dask.features.kernels.l1_family_sections`).
    """
    name = spec.name
    if name in ("laplacian", "cauchy"):
        if out is None:
            out = np.empty((Xp.shape[0], operand.shape[1]), dtype=Xp.dtype)
        return l1_family_sections(spec, Xp, operand.T, out)
    if name in DISTANCE_KERNELS:
        rows, d = Xp.shape
        if operand.shape[0] != d + 2:
            raise ValueError(f"the operand of {name} sections has {d + 2} rows for {d} input features "
                             f"(section_operand), got {operand.shape[0]}")
        Xa = scratch("sections-rows", (rows, d + 2), Xp.dtype)
        Xa[:, :d] = Xp
        np.einsum("ij,ij->i", Xa[:, :d], Xa[:, :d], out=Xa[:, d])
        Xa[:, d + 1] = 1
        K = np.matmul(Xa, operand, out=out)
    else:
        K = np.matmul(Xp, operand, out=out)
        xn = np.sqrt(np.einsum("ij,ij->i", Xp, Xp)).astype(K.dtype)
        ln = aux.astype(K.dtype)
    band = max(1, BAND_BYTES // max(1, K.shape[1] * K.itemsize))
    for r0 in range(0, K.shape[0], band):
        r1 = r0 + band
        if name == "arccos":
            _arccos_band(spec, K[r0:r1], xn[r0:r1], ln)
        else:
            _distance_band(spec, K[r0:r1])
    return K


def _distance_band(spec: KernelSpec, K: np.ndarray) -> None:
    """Gaussian or Matérn sections in place of a band of ``-c |x - l|^2`` (:func:`section_operand`).

    Clipped at 0 against round-off; the exponential and (float32) the Matérn kernels' work
    in compiled loops (:mod:`~dsgd_dask.features._elementwise`).
    """
    from dsgd_dask.features import _elementwise  # compiled on first use

    if spec.name == "gaussian":
        _elementwise.exp_sections(K)
        return
    if K.dtype == np.float32:
        _elementwise.matern_sections(K, spec.nu)
        return
    dt = K.dtype.type
    _elementwise.clip_nonpositive(K)
    # -c |x - l|^2 = -a^2
    np.negative(K, out=K)
    np.sqrt(K, out=K)
    if spec.nu == 0.5:
        np.negative(K, out=K)
        np.exp(K, out=K)
        return
    poly = scratch("sections-poly", K.shape, K.dtype)
    if spec.nu == 1.5:  # 1 + a
        np.add(K, dt(1), out=poly)
    else:  # 1 + a (1 + a / 3)
        np.multiply(K, dt(1 / 3), out=poly)
        poly += dt(1)
        poly *= K
        poly += dt(1)
    np.negative(K, out=K)
    np.exp(K, out=K)
    K *= poly


def _arccos_band(spec: KernelSpec, K: np.ndarray, nx: np.ndarray, nl: np.ndarray) -> None:
    """Arc-cosine sections in place of a band of inner products ``x . l``, from the norms of both."""
    dt = K.dtype.type
    s = spec.bandwidth
    denom = np.multiply.outer(nx, nl)  # |x| |l|
    with np.errstate(invalid="ignore", divide="ignore"):
        np.divide(K, denom, out=K, where=denom > 0)
    K[denom <= 0] = 1
    np.clip(K, -1, 1, out=K)
    theta = np.arccos(K)
    order = spec.order
    if order == 0:
        np.subtract(np.pi, theta, out=K)
    elif order == 1:
        c = np.cos(theta)
        np.multiply(np.pi - theta, c, out=K)
        K += np.sin(theta)
    else:
        c = np.cos(theta)
        np.multiply(np.pi - theta, 1 + 2 * c * c, out=K)
        K += 3 * np.sin(theta) * c
    denom /= dt(s * s)
    if order:
        K *= denom**order
    K *= dt(1 / np.pi)


def inverse_sqrt(kernel_block: np.ndarray, dtype=np.float64, entrywise: bool = False) -> np.ndarray:
    """``K^{-1/2}`` of a landmark kernel matrix on its numerically nonzero eigenvalues: ``(m, r)``.

    With ``K = U S U^T``, the columns ``U_r S_r^{-1/2}`` over the eigenvalues above
    ``m * eps * max(S)`` (``eps`` of the features' precision ``dtype``), in increasing
    order of eigenvalue. With ``entrywise``, above ``m * eps * max |K_ij|`` instead: the
    bound on the spectral norm of round-off of relative size ``eps`` in every entry of
    ``K`` (and of the kernel sections it whitens), so every kept direction is resolved
    by the precision. For a kernel with ``k(x, x) = 1`` that is about ``m`` times lower
    than the first rule (``max(S)`` is of the order of ``m`` times the mean entry), and
    keeps the directions that the first rule drops in single precision although they
    are resolved. ``r`` is 0 when the kernel vanishes on the landmarks.
    """
    s, u = small_eigh(kernel_block)
    scale = float(np.abs(kernel_block).max(initial=0.0)) if entrywise else max(s[-1], 0.0)
    keep = s > scale * len(s) * np.finfo(np.dtype(dtype)).eps
    return u[:, keep] / np.sqrt(s[keep])


class NystroemFeatures(FeatureBlocks):
    """Nyström feature blocks on stored landmark rows, with the interface of :class:`RandomFeatures`.

    Parameters
    ----------
    kernel : KernelSpec
        Kernel with its bandwidth.
    landmarks : ndarray of shape (n_blocks * block_size, n_features_in)
        The landmark rows, block after block (float64).
    block_size : int
        Landmarks (and features) per block ``m``.
    seed : int
        Root seed the landmarks were drawn with (kept for the record).
    dtype : {"float32", "float64"}
        Precision of the kernel sections and features.
    center : ndarray of shape (d,), optional
        A point subtracted from inputs and landmarks of a shift-invariant kernel, in float64
        before they are rounded to ``dtype`` (it keeps the distances accurate in float32,
        whatever the offset of the data).
    normalization : ndarray of shape (n_blocks, block_size, block_size), optional
        The whitening of each block; computed from the landmarks when not given.
    whiten : bool, default=True
        Whiten each block (the Nyström features of its landmarks); ``False``: the features
        are the kernel sections ``k(x, L)``, with no per-block matrix.
    cache_bytes : int, optional
        Accepted for interface compatibility; nothing is regenerated.

    Raises
    ------
    ValueError
        If the landmarks' distances from ``center`` (norms without it) or the bandwidth
        overflow or underflow ``dtype`` where the sections square them
        (:func:`~dsgd_dask.features.bandwidth.check_scale`).
    """

    def __init__(self, kernel: KernelSpec, landmarks, block_size: int, seed: int, dtype="float32",
                 center=None, normalization=None, whiten: bool = True, cache_bytes: int | None = None):
        landmarks = np.asarray(landmarks, dtype=np.float64)
        block_size = int(block_size)
        if landmarks.ndim != 2 or landmarks.shape[0] == 0 or landmarks.shape[0] % block_size:
            raise ValueError(f"landmarks must be 2-D with a positive multiple of block_size={block_size} rows, "
                             f"got shape {landmarks.shape}")
        super().__init__(kernel, landmarks.shape[1], block_size, seed, dtype, center)
        # the landmarks are rows of the data: their scale, and the bandwidth's, in the precision
        # of the sections (squared distances; Laplacian and Cauchy sections: the inputs alone)
        check_scale(DataScale.of(landmarks, self.center is not None, "the data's rows (Nyström landmarks)"),
                    kernel.bandwidth, self.dtype, power=1 if kernel.name in ("laplacian", "cauchy") else 2)
        self.landmarks = landmarks
        self.cache_bytes = 0 if cache_bytes is None else int(cache_bytes)
        self._prepared = None
        n_blocks = landmarks.shape[0] // self.block_size
        self.whiten = bool(whiten)
        # kernel sections are the features when there is no whitening
        self.raw_are_features = not self.whiten
        if not self.whiten:
            if normalization is not None:
                raise ValueError("normalization is given but whiten=False")
            self.normalization = None
            return
        if normalization is None:
            normalization = self._whitenings(n_blocks)
        normalization = np.asarray(normalization, dtype=np.float64)
        if normalization.shape != (n_blocks, self.block_size, self.block_size):
            raise ValueError(f"normalization must have shape {(n_blocks, self.block_size, self.block_size)}, "
                             f"got {normalization.shape}")
        self.normalization = normalization

    def _whitenings(self, n_blocks: int) -> np.ndarray:
        m = self.block_size
        out = np.zeros((n_blocks, m, m))
        with one_blas_thread():
            for j in range(n_blocks):
                Lp = self.prepare(self.landmarks[j * m:(j + 1) * m])
                K = kernel_sections(self.kernel, Lp, *section_operand(self.kernel, Lp)).astype(np.float64)
                root = inverse_sqrt(0.5 * (K + K.T), self.dtype, entrywise=True)
                out[j][:, m - root.shape[1]:] = root  # zero columns beyond the rank
        return out

    # -- state ----------------------------------------------------------------------------
    @property
    def max_blocks(self) -> int:
        """Number of blocks available (landmarks are stored, not regenerated)."""
        return self.landmarks.shape[0] // self.block_size

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_prepared"] = None
        return state

    def clear_cache(self) -> None:
        self._prepared = None

    def _pages(self):
        """Per page: the landmarks as the sections' operand and its column data (:func:`section_operand`), whitenings.

        Prepared once per feature set (not pickled).
        """
        if self._prepared is None:
            m, bpp = self.block_size, self.blocks_per_page
            pages = []
            for first in range(0, self.max_blocks, bpp):
                last = min(first + bpp, self.max_blocks)
                operand, aux = section_operand(self.kernel, self.prepare(self.landmarks[first * m:last * m]))
                norm = self.normalization[first:last].astype(self.dtype) if self.whiten else None
                pages.append((operand, aux, norm))
            self._prepared = pages
        return self._prepared

    # -- evaluation -------------------------------------------------------------------------
    @property
    def _column_cost(self) -> int:
        return self.n_features_in + (self.block_size if self.whiten else 0)

    def _page(self, p: int, lo: int, hi: int, stop_block: int):
        """The sections' operand, its column data and the whitenings of blocks ``lo`` to ``hi`` of page ``p``."""
        m = self.block_size
        operand, aux, norm = self._pages()[p]
        return (operand[:, lo * m:hi * m], None if aux is None else aux[lo * m:hi * m],
                None if norm is None else norm[lo:hi])

    def map_pages(self, start_block: int, stop_block: int, fn, n_rows: int = 0) -> list:
        if stop_block > self.max_blocks:
            raise IndexError(f"block {stop_block - 1} does not exist: the model has {self.max_blocks} blocks")
        self._pages()  # prepared once, before the pages go to threads
        return super().map_pages(start_block, stop_block, fn, n_rows)

    map_pages.__doc__ = FeatureBlocks.map_pages.__doc__

    def raw(self, Xp: np.ndarray, page, out=None) -> np.ndarray:
        """Kernel sections ``k(x, L)`` of prepared inputs on the landmarks of a page."""
        operand, aux, _ = page
        return kernel_sections(self.kernel, Xp, operand, aux, out=out)

    def apply(self, Xp: np.ndarray, page, out=None) -> np.ndarray:
        """Whitened features ``k(x, L_j) N_j`` of prepared inputs, block by block of a page (or the sections)."""
        if not self.whiten:
            return self.raw(Xp, page, out=out)
        m = self.block_size
        norm = page[2]
        K = self.raw(Xp, page, out=scratch("nystroem-sections", (Xp.shape[0], norm.shape[0] * m), self.dtype))
        if out is None:
            out = np.empty_like(K)
        for i in range(norm.shape[0]):
            np.matmul(K[:, i * m:(i + 1) * m], norm[i], out=out[:, i * m:(i + 1) * m])
        return out

    def landmark_kernel(self, start: int, stop: int, n_blocks: int | None = None,
                        columns: slice | None = None) -> np.ndarray:
        """Rows ``start:stop`` of the landmarks' own kernel matrix, in float64: ``k(L[start:stop], L[columns])``.

        ``L`` is the union of the landmarks of the first ``n_blocks`` blocks (all by
        default), shifted by ``center`` like the inputs; ``columns`` a slice of it (all by
        default); ``(stop - start, n_blocks * m)`` without ``columns``. Only the rows and
        columns asked for are copied.
        """
        n_blocks = self.max_blocks if n_blocks is None else int(n_blocks)
        L = self.landmarks[:n_blocks * self.block_size]
        rows, cols = L[start:stop], (L if columns is None else L[columns])
        if self.center is not None:
            rows = np.subtract(rows, self.center, dtype=np.float64)
            cols = np.subtract(cols, self.center, dtype=np.float64)
        return kernel_sections(self.kernel, np.ascontiguousarray(rows), *section_operand(self.kernel, cols))

    def _blockwise(self, a: np.ndarray, transpose: bool) -> np.ndarray:
        if not self.whiten:
            return a
        m = self.block_size
        n_blocks = a.shape[0] // m
        out = np.empty(a.shape, dtype=np.float64)
        for j in range(n_blocks):
            N = self.normalization[j]
            out[j * m:(j + 1) * m] = (N.T if transpose else N) @ a[j * m:(j + 1) * m]
        return out

    def fold(self, coef: np.ndarray) -> np.ndarray:
        """Coefficients of the whitened features as coefficients of the kernel sections: ``N_j A_j``."""
        return self._blockwise(np.asarray(coef, dtype=np.float64), transpose=False)

    def unfold(self, grad: np.ndarray) -> np.ndarray:
        """Sums over kernel sections as sums over the whitened features: ``N_j^T G_j``."""
        return self._blockwise(np.asarray(grad, dtype=np.float64), transpose=True)

    def to_dict(self) -> dict:
        return {
            "kind": "nystroem",
            "kernel": self.kernel.to_dict(),
            "n_features_in": self.n_features_in,
            "block_size": self.block_size,
            "seed": self.seed,
            "dtype": self.dtype.name,
            "n_blocks": self.max_blocks,
            "whiten": self.whiten,
        }
