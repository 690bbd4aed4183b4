"""Randomized kernel CCA (RCCA): regularised linear CCA on explicit random Fourier or Nyström features."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgd_dask._validation import check_choice, check_float, check_int
from dsgd_dask.baselines._common import fingerprint
from dsgd_dask.baselines._moments import FourierMap, LinearProjection, NystroemMap, feature_moments
from dsgd_dask.baselines.exact_two_view import _CorrelationScore, _TwoViewEstimator
from dsgd_dask.baselines.rca import SHIFT_ROWS
from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.features.kernels import kernel_matrix
from dsgd_dask.features.nystroem import inverse_sqrt
from dsgd_dask.rules.solutions import ridge_cca
from dsgd_dask.streams.batches import landmark_rows, view_seed
from dsgd_dask.streams.inputs import stacked_view


@dataclass(eq=False)
class PairedMap:
    """Features of ``[X | Y]`` rows: ``[fx(X), fy(Y)]``, the first ``dx`` columns being ``X``."""

    fx: object
    fy: object
    dx: int

    @property
    def n_features(self) -> int:
        return self.fx.n_features + self.fy.n_features

    def __call__(self, XY: np.ndarray) -> np.ndarray:
        zx = self.fx(XY[:, :self.dx])
        zy = self.fy(XY[:, self.dx:])
        return np.hstack([zx, zy.astype(zx.dtype, copy=False)])


class _FeatureSpaceCCA(_CorrelationScore, _TwoViewEstimator):
    """Regularised linear CCA on explicit feature maps, with the joint moments accumulated out of core."""

    def fit(self, X, Y):
        """Fit the canonical pairs: one pass over ``(X, Y)`` for the joint feature moments, then one SVD.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one), xarray DataArray of shape (n_samples, n_features)
            First view. Lazy inputs are read chunk by chunk (one task per row chunk,
            partial sums reduced as a tree).
        Y : same kinds, of shape (n_samples, n_features_y) or (n_samples,)
            Second view, row ``i`` paired with row ``i`` of ``X`` (rechunked to the row
            chunks of ``X`` when either is lazy).

        Returns
        -------
        self
        """
        vx, vy, k = self._fit_views(X, Y)
        reg = check_float(self.reg, "reg", 0.0, strict=False)
        self._check_budget(k)
        self.seed_ = self._seed(self.random_state)
        xy = stacked_view(vx, vy)
        sx, sy = self._view_samples(vx, vy)
        spec_x, spec_y = self._view_kernels(sx, sy)
        fx, fy, key = self._feature_maps(xy, vx.n_features, spec_x, spec_y, sx, sy)
        fmap = PairedMap(fx, fy, vx.n_features)
        shift = fmap(np.hstack([sx, sy])[:SHIFT_ROWS]).mean(axis=0, dtype=np.float64)
        n, mean, cov = feature_moments(xy, fmap, shift, center=True, token=fingerprint(*key, shift))
        mx = fx.n_features
        self.correlations_, A, B = ridge_cca(cov[:mx, :mx], cov[mx:, mx:], cov[:mx, mx:], reg, k)
        self.x_weights_, self.y_weights_ = A, B
        self.x_mean_, self.y_mean_ = mean[:mx], mean[mx:]
        self.n_samples_seen_ = n
        self.n_features_x_, self.n_features_y_ = fx.n_features, fy.n_features
        self._n_features_out = k
        self._projections = (
            self._projection(LinearProjection(fx, A, self.x_mean_ @ A), k, (*key, "x", A, self.x_mean_), "x"),
            self._projection(LinearProjection(fy, B, self.y_mean_ @ B), k, (*key, "y", B, self.y_mean_), "y"),
        )
        return self


class RandomFeatureCCA(_FeatureSpaceCCA):
    """Randomized kernel CCA (RCCA): regularised linear CCA on random Fourier features of each view.

    Each view gets its own ``n_features`` random features (seeded blocks, as
    :class:`RandomFeaturePCA`); the mean and the joint ``(Mx + My) x (Mx + My)``
    covariance of ``[z_x(x), z_y(y)]`` are accumulated in one pass over the paired rows,
    chunk by chunk for dask, Zarr and xarray inputs (a tree reduction; the data are never
    held in memory), and the canonical pairs are those of regularised linear CCA on the
    features. :meth:`transform` is lazy on lazy inputs.

    Parameters
    ----------
    n_components : int, default=2
        Number of canonical pairs ``k`` (at most ``n_features``).
    kernel_x, kernel_y : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family of each view (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth_x, bandwidth_y : "median" or float, default="median"
        Length scale of each view; ``"median"`` takes the median pairwise distance of the
        view on a seeded sample of 1000 rows (the same rows for both views; L1 for
        laplacian, the median row norm for arccos).
    kernel_params_x, kernel_params_y : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    n_features : int, default=1024
        Random features per view ``M``, rounded up to whole blocks. The joint covariance
        costs ``(2M)^2`` flops per row and ``O(M^2)`` memory, plus two ``M x M``
        eigen-solves and one SVD.
    block_size : int, default=256
        Features per seeded block.
    reg : float, default=1e-3
        Ridge ``gamma >= 0`` added to both feature covariances: the RKHS-norm penalty of
        kernel CCA, in kernel units (``k(x, x) = 1`` for the shift-invariant kernels).
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the features and of their products over slices of 2048 rows; the
        slices and chunks are summed in float64.
    random_state : int, RandomState instance or None, default=None
        Root seed of the feature blocks of both views (see :func:`view_seed`) and of the
        bandwidth sample.

    Attributes
    ----------
    correlations_ : ndarray of shape (n_components,)
        Regularised canonical correlations on the training data, decreasing.
    x_weights_ : ndarray of shape (n_features_x_, n_components)
        Directions in the features of ``X``, ``A^T (Cxx + reg I) A = I``.
    y_weights_ : ndarray of shape (n_features_y_, n_components)
        Directions in the features of ``Y``; ``A^T Cxy B = diag(correlations_)``.
    x_mean_, y_mean_ : ndarray of shape (n_features_x_,), (n_features_y_,)
        Mean feature vectors (the variates are centred on them).
    random_features_x_, random_features_y_ : RandomFeatures
        The seeded feature blocks of each view.
    n_features_x_, n_features_y_ : int
        Number of random features of each view.
    n_samples_seen_ : int
        Rows the moments were accumulated over.
    kernel_x_, kernel_y_ : KernelSpec
        The kernels with their bandwidths.
    bandwidth_x_, bandwidth_y_ : float
        The bandwidths used.
    seed_ : int
        Root seed of the fit.
    n_features_in_, n_features_in_y_ : int
        Number of features of ``X`` and ``Y``.
    feature_names_in_ : ndarray of str
        Column names of ``X``, when fitted on a DataFrame.

    See Also
    --------
    NystroemCCA : the same with Nyström features.
    ExactKernelCCA : the dense reference on small data.

    Notes
    -----
    View ``v`` (0 for ``X``, 1 for ``Y``) draws its blocks from the root seed
    ``view_seed(seed_, v)``, i.e. ``SeedSequence(seed_, spawn_key=(0x5657, v))``, so the
    two views have independent features. The products are taken after subtracting the
    mean features of a seeded sample (float32 features lose nothing to cancellation).
    Cost: ``2 n (dx + dy) M`` flops for the features and ``4 n M^2`` for the moments,
    memory ``O(M^2)`` plus one chunk, then the dense solve of
    :func:`~dsgd_dask.rules.solutions.ridge_cca`.

    References
    ----------
    D. Lopez-Paz, S. Sra, A. Smola, Z. Ghahramani, B. Schölkopf, "Randomized nonlinear
    component analysis", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import RandomFeatureCCA
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(-2, 2, size=(500, 1))
    >>> X = np.hstack([t, rng.normal(size=(500, 1))])
    >>> Y = np.hstack([t**2, rng.normal(size=(500, 1))])
    >>> rcca = RandomFeatureCCA(n_components=2, n_features=256, random_state=0).fit(X, Y)
    >>> rcca.transform(X).shape
    (500, 2)
    >>> bool(rcca.score(X, Y) > 0.9)
    True
    """

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, n_features=1024, block_size=256,
                 reg=1e-3, compute_dtype="float32", random_state=None):
        self.n_components = n_components
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.bandwidth_x = bandwidth_x
        self.bandwidth_y = bandwidth_y
        self.kernel_params_x = kernel_params_x
        self.kernel_params_y = kernel_params_y
        self.n_features = n_features
        self.block_size = block_size
        self.reg = reg
        self.compute_dtype = compute_dtype
        self.random_state = random_state

    def _check_budget(self, k: int) -> None:
        budget = check_int(self.n_features, "n_features")
        block = check_int(self.block_size, "block_size")
        check_choice(self.compute_dtype, "compute_dtype", ("float32", "float64"))
        self._n_blocks = -(-budget // block)
        if k > self._n_blocks * block:
            raise ValueError(f"n_components={k} must be <= n_features={self._n_blocks * block}")

    def _feature_maps(self, xy, dx, spec_x, spec_y, sx, sy):
        views = []
        for v, (spec, sample) in enumerate(((spec_x, sx), (spec_y, sy))):
            center = sample.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None
            views.append(RandomFeatures(spec, sample.shape[1], self.block_size, view_seed(self.seed_, v),
                                        self.compute_dtype, center=center))
        self.random_features_x_, self.random_features_y_ = views
        key = (type(self).__name__, self._n_blocks, *(sorted(f.to_dict().items()) for f in views),
               *(f.center for f in views if f.center is not None))
        return FourierMap(views[0], self._n_blocks), FourierMap(views[1], self._n_blocks), key


class NystroemCCA(_FeatureSpaceCCA):
    """Nyström kernel CCA: regularised linear CCA on the kernels of each view against shared landmark rows.

    ``n_features`` landmark rows are drawn uniformly (seeded) from the training pairs,
    the same rows of ``X`` and ``Y``; the features of view ``v`` are
    ``k_v(., L_v) K_v,LL^{-1/2}``, whose inner products are the Nyström approximation of
    the view's kernel. The mean and the joint covariance of both views' features are
    accumulated in one pass over the paired rows, chunk by chunk for dask, Zarr and
    xarray inputs, and the canonical pairs are those of regularised linear CCA on the
    features. :meth:`transform` is lazy on lazy inputs.

    Parameters
    ----------
    n_components : int, default=2
        Number of canonical pairs ``k`` (at most ``n_features``; pairs beyond the rank of
        the landmark kernel matrices have correlation 0).
    kernel_x, kernel_y : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family of each view (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth_x, bandwidth_y : "median" or float, default="median"
        Length scale of each view; ``"median"`` takes the median pairwise distance of the
        view on a seeded sample of 1000 rows (the same rows for both views; L1 for
        laplacian, the median row norm for arccos).
    kernel_params_x, kernel_params_y : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    n_features : int, default=1024
        Number of landmarks ``m`` (all rows when the data have fewer).
    reg : float, default=1e-3
        Ridge ``gamma >= 0`` added to both feature covariances (the RKHS-norm penalty).
    random_state : int, RandomState instance or None, default=None
        Root seed of the landmark draw and of the bandwidth sample.

    Attributes
    ----------
    correlations_ : ndarray of shape (n_components,)
        Regularised canonical correlations on the training data, decreasing.
    x_weights_ : ndarray of shape (n_features_x_, n_components)
        Directions in the whitened Nyström features of ``X``.
    y_weights_ : ndarray of shape (n_features_y_, n_components)
        Directions in the whitened Nyström features of ``Y``.
    x_mean_, y_mean_ : ndarray of shape (n_features_x_,), (n_features_y_,)
        Mean feature vectors.
    landmarks_x_, landmarks_y_ : ndarray of shape (n_landmarks, n_features_in_), (n_landmarks, n_features_in_y_)
        The landmark rows of each view (the same row indices, float64).
    normalization_x_, normalization_y_ : ndarray of shape (n_landmarks, n_features_x_), (n_landmarks, n_features_y_)
        ``K_LL^{-1/2}`` of each view on the numerically nonzero eigenvalues of ``K_LL``.
    n_features_x_, n_features_y_ : int
        Rank of each view's ``K_LL`` kept: the dimensions of the Nyström features.
    n_samples_seen_ : int
        Rows the moments were accumulated over.
    kernel_x_, kernel_y_ : KernelSpec
        The kernels with their bandwidths.
    bandwidth_x_, bandwidth_y_ : float
        The bandwidths used.
    seed_ : int
        Root seed of the landmark draw.
    n_features_in_, n_features_in_y_ : int
        Number of features of ``X`` and ``Y``.
    feature_names_in_ : ndarray of str
        Column names of ``X``, when fitted on a DataFrame.

    See Also
    --------
    RandomFeatureCCA : the same with random Fourier features.
    ExactKernelCCA : the dense reference on small data.

    Notes
    -----
    With all training rows as landmarks, the features reproduce the kernel matrices
    exactly and the fit is :class:`ExactKernelCCA` (up to the rank cutoffs). The
    landmarks are a seeded uniform draw of row indices, the same for numpy and dask
    inputs of the same data. Cost: ``n m (dx + dy)`` kernel evaluations and
    ``4 n m^2`` flops for the moments, memory ``O(m^2)`` plus one chunk.

    References
    ----------
    C. Williams, M. Seeger, "Using the Nyström method to speed up kernel machines",
    NIPS 2001. D. Lopez-Paz, S. Sra, A. Smola, Z. Ghahramani, B. Schölkopf, "Randomized
    nonlinear component analysis", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import NystroemCCA
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(-2, 2, size=(500, 1))
    >>> X = np.hstack([t, rng.normal(size=(500, 1))])
    >>> Y = np.hstack([t**2, rng.normal(size=(500, 1))])
    >>> ncca = NystroemCCA(n_components=2, n_features=200, random_state=0).fit(X, Y)
    >>> U, V = ncca.transform(X, Y)
    >>> bool(ncca.correlations_[0] > 0.9)
    True
    """

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, n_features=1024, reg=1e-3,
                 random_state=None):
        self.n_components = n_components
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.bandwidth_x = bandwidth_x
        self.bandwidth_y = bandwidth_y
        self.kernel_params_x = kernel_params_x
        self.kernel_params_y = kernel_params_y
        self.n_features = n_features
        self.reg = reg
        self.random_state = random_state

    def _check_budget(self, k: int) -> None:
        budget = check_int(self.n_features, "n_features")
        if k > budget:
            raise ValueError(f"n_components={k} must be <= n_features={budget}")
        self._n_landmarks = budget

    def _feature_maps(self, xy, dx, spec_x, spec_y, sx, sy):
        rows = landmark_rows(xy, min(self._n_landmarks, xy.n_samples), self.seed_)
        maps = []
        for spec, L, name in ((spec_x, rows[:, :dx], "X"), (spec_y, rows[:, dx:], "Y")):
            normalization = inverse_sqrt(kernel_matrix(spec, L))
            if normalization.shape[1] == 0:
                raise ValueError(f"the kernel of {name} is zero on every landmark (e.g. all-zero rows with the "
                                 "arccos kernel); no Nyström features can be formed")
            maps.append(NystroemMap(spec, L, normalization))
        fx, fy = maps
        self.landmarks_x_, self.landmarks_y_ = fx.landmarks, fy.landmarks
        self.normalization_x_, self.normalization_y_ = fx.normalization, fy.normalization
        key = (type(self).__name__, sorted(spec_x.to_dict().items()), sorted(spec_y.to_dict().items()), rows,
               fx.normalization, fy.normalization)
        return fx, fy, key
