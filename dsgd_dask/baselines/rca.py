"""Randomized kernel PCA: linear PCA on explicit random Fourier or Nyström features."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._linalg import top_eigenpairs
from dsgd_dask._validation import check_choice, check_int
from dsgd_dask.baselines._common import fingerprint
from dsgd_dask.baselines._moments import FourierMap, LinearProjection, NystroemMap, feature_moments
from dsgd_dask.estimators._base import RandomFeatureEstimatorMixin
from dsgd_dask.estimators.kpca import N_SAMPLE
from dsgd_dask.features.kernels import kernel_matrix
from dsgd_dask.features.nystroem import inverse_sqrt
from dsgd_dask.streams.batches import landmark_rows, sample_rows
from dsgd_dask.transform.lazy import apply_rows

#: Rows of the seeded sample whose mean features shift the accumulated products.
SHIFT_ROWS = 1000


class _FeatureSpacePCA(RandomFeatureEstimatorMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                       BaseEstimator):
    """Linear PCA on an explicit feature map, with the moments accumulated out of core."""

    def fit(self, X, y=None):
        """Fit the components: one pass over ``X`` for the feature moments, then one eigen-solve.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one), xarray DataArray or Dataset
            Training data of shape (n_samples, n_features). Lazy inputs are read chunk by
            chunk (one task per row chunk, partial sums reduced as a tree); a Dataset must
            hold a single 2-D data variable.
        y : None
            Ignored.

        Returns
        -------
        self
        """
        view = self._validate_input(X, reset=True)
        k = check_int(self.n_components, "n_components")
        self._check_budget(k)
        center = bool(check_choice(self.center, "center", (True, False)))
        self.seed_ = self._seed(self.random_state)
        sample = sample_rows(view, N_SAMPLE, self.seed_)
        spec = self._kernel_spec(sample)
        fmap, key = self._feature_map(view, spec, sample)
        shift = fmap(sample[:SHIFT_ROWS]).mean(axis=0, dtype=np.float64)
        n, mean, cov = feature_moments(view, fmap, shift, center, token=fingerprint(*key, shift))
        vals, vecs = top_eigenpairs(cov, k)
        self.components_ = vecs.T
        self.eigenvalues_ = np.maximum(vals, 0.0)
        self.mean_ = mean
        self.n_samples_seen_ = n
        self.n_features_ = fmap.n_features
        self.bandwidth_ = spec.bandwidth
        self.kernel_ = spec
        self._n_features_out = k
        self._projection = LinearProjection(fmap, vecs, mean @ vecs)
        self._token = fingerprint(*key, vecs, mean)
        return self

    def transform(self, X):
        """Project ``X`` on the fitted components.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)

        Returns
        -------
        ndarray, dask array or DataArray of shape (n_samples, n_components)
            Numpy in, numpy out (float64). Dask or Zarr in: a lazy dask array with one task
            per row chunk, nothing computed. A DataArray in: a DataArray with dims
            ``(sample_dim, "component")`` keeping the sample coordinates, lazy when the
            input is dask-backed.
        """
        check_is_fitted(self, "components_")
        view = self._validate_input(X, reset=False)
        return apply_rows(view, self._projection, self._n_features_out, self._token, type(self).__name__.lower())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


class RandomFeaturePCA(_FeatureSpacePCA):
    """Randomized kernel PCA (RPCA): linear PCA on a fixed set of random Fourier features.

    The ``n_features`` features are the first blocks of the same seeded random-feature
    stream as :class:`~dsgd_dask.KernelPCA` (same ``random_state``, ``block_size``,
    ``compute_dtype`` and data: the same features). Their mean and ``M x M`` covariance are
    accumulated in one pass over the data, chunk by chunk for dask, Zarr and xarray inputs
    (a tree reduction; the data are never held in memory), and the top eigenvectors of
    the covariance are the components. :meth:`transform` is lazy on lazy inputs.

    Parameters
    ----------
    n_components : int, default=5
        Number of principal components ``k`` (at most the number of features).
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth : "median" or float, default="median"
        Length scale ``sigma``; ``"median"`` takes the median pairwise distance of the
        seeded sample of 1000 rows used by :class:`~dsgd_dask.KernelPCA` (L1 for
        laplacian; the median row norm for arccos).
    kernel_params : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    n_features : int, default=1024
        Number of random features ``M``, rounded up to whole blocks. The covariance costs
        ``M^2`` flops per row and ``O(M^2)`` memory, plus one ``M x M`` eigen-solve.
    block_size : int, default=256
        Features per seeded block.
    center : bool, default=True
        Centre the features (kernel PCA of the centred covariance operator, as
        scikit-learn's ``KernelPCA``).
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the features and of their products over slices of 2048 rows; the
        slices and chunks are summed in float64.
    cache_bytes : int, optional
        Memory budget for cached feature blocks; ``None`` uses a quarter of the free
        memory (at most 4 GiB), 0 regenerates every block at every use.
    random_state : int, RandomState instance or None, default=None
        Root seed of the feature blocks and of the bandwidth sample.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features_)
        Principal axes in feature space (unit norm), in order of decreasing eigenvalue.
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of the feature covariance: estimates of the eigenvalues of the
        (centred) covariance operator, i.e. scikit-learn ``KernelPCA.eigenvalues_ / n``.
    mean_ : ndarray of shape (n_features_,)
        Mean feature vector (zeros when ``center=False``).
    n_features_ : int
        Number of random features ``M``.
    random_features_ : RandomFeatures
        The seeded feature blocks (kernel, seed, centre; regenerated when evaluated).
    n_samples_seen_ : int
        Rows the moments were accumulated over.
    bandwidth_ : float
        The bandwidth used.
    kernel_ : KernelSpec
        The kernel with its bandwidth.
    seed_ : int
        Root seed the features were generated from.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of str
        Input column names, when fitted on a DataFrame.

    See Also
    --------
    NystroemPCA : the same with Nyström features.
    ExactKernelPCA : the dense reference on small data.

    Notes
    -----
    The features are ``z(x) = [z_0(x), ..., z_{B-1}(x)] / sqrt(B)`` over ``B`` blocks of
    ``m`` features ``z_j(x) = sqrt(2/m) cos((x - c) W_j + b_j)``, so ``z(x).z(y)``
    estimates ``k(x, y)`` and the covariance of ``z`` estimates the covariance operator.
    The bandwidth and the centre ``c`` come from the seeded sample of up to 10,000 rows
    that :class:`~dsgd_dask.KernelPCA` uses (drawn uniformly from all rows, so from
    every chunk of a dask input); the moments are exact sums over every row. Products are taken after
    subtracting the mean features of that sample, so float32 features lose nothing to
    cancellation. Cost: ``2 n d M`` flops for the features and ``n M^2`` for the
    moments, memory ``O(M^2)`` plus one chunk, then an ``M x M`` eigen-solve.

    References
    ----------
    D. Lopez-Paz, S. Sra, A. Smola, Z. Ghahramani, B. Schölkopf, "Randomized nonlinear
    component analysis", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import RandomFeaturePCA
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> rpca = RandomFeaturePCA(n_components=2, n_features=512, random_state=0)
    >>> rpca.fit_transform(X).shape
    (500, 2)
    """

    def __init__(self, n_components=5, *, kernel="gaussian", bandwidth="median", kernel_params=None,
                 n_features=1024, block_size=256, center=True, compute_dtype="float32", cache_bytes=None,
                 random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.n_features = n_features
        self.block_size = block_size
        self.center = center
        self.compute_dtype = compute_dtype
        self.cache_bytes = cache_bytes
        self.random_state = random_state

    def _check_budget(self, k: int) -> None:
        budget = check_int(self.n_features, "n_features")
        block = check_int(self.block_size, "block_size")
        check_choice(self.compute_dtype, "compute_dtype", ("float32", "float64"))
        self._n_blocks = -(-budget // block)
        if k > self._n_blocks * block:
            raise ValueError(f"n_components={k} must be <= n_features={self._n_blocks * block}")

    def _feature_map(self, view, spec, sample):
        features = self._make_features(spec, sample, self.seed_)
        self.random_features_ = features
        key = (type(self).__name__, sorted(features.to_dict().items()), self._n_blocks, features.center)
        return FourierMap(features, self._n_blocks), key


class NystroemPCA(_FeatureSpacePCA):
    """Nyström kernel PCA: linear PCA on the kernel against random training rows, whitened.

    ``n_features`` landmark rows are drawn uniformly (seeded) from the training data; the
    features of ``x`` are ``k(x, L) K_LL^{-1/2}``, whose inner products are the Nyström
    approximation of the kernel. Their mean and covariance are accumulated in one pass over
    the data, chunk by chunk for dask, Zarr and xarray inputs (a tree reduction; the data
    are never held in memory), and the top eigenvectors of the covariance are the
    components. :meth:`transform` is lazy on lazy inputs.

    Parameters
    ----------
    n_components : int, default=5
        Number of principal components ``k``. Components beyond the rank of the landmark
        kernel matrix are zero, with zero eigenvalue.
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth : "median" or float, default="median"
        Length scale ``sigma``; ``"median"`` takes the median pairwise distance of the
        seeded sample of 1000 rows used by :class:`~dsgd_dask.KernelPCA` (L1 for
        laplacian; the median row norm for arccos).
    kernel_params : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    n_features : int, default=1024
        Number of landmarks ``m`` (all rows when the data have fewer). The covariance
        costs ``m^2`` flops per row and ``O(m^2)`` memory, plus two ``m x m`` eigen-solves.
    center : bool, default=True
        Centre the features (kernel PCA of the centred covariance operator, as
        scikit-learn's ``KernelPCA``).
    random_state : int, RandomState instance or None, default=None
        Root seed of the landmark draw and of the bandwidth sample.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features_)
        Principal axes in the whitened Nyström feature space, in order of decreasing
        eigenvalue.
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of the feature covariance: estimates of the eigenvalues of the
        (centred) covariance operator, i.e. scikit-learn ``KernelPCA.eigenvalues_ / n``.
    mean_ : ndarray of shape (n_features_,)
        Mean feature vector (zeros when ``center=False``).
    landmarks_ : ndarray of shape (n_landmarks, n_features_in_)
        The landmark rows (float64).
    normalization_ : ndarray of shape (n_landmarks, n_features_)
        ``K_LL^{-1/2}`` restricted to the numerically nonzero eigenvalues of ``K_LL``.
    n_features_ : int
        Rank of ``K_LL`` kept: the dimension of the Nyström features.
    n_samples_seen_ : int
        Rows the moments were accumulated over.
    bandwidth_ : float
        The bandwidth used.
    kernel_ : KernelSpec
        The kernel with its bandwidth.
    seed_ : int
        Root seed of the landmark draw.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of str
        Input column names, when fitted on a DataFrame.

    See Also
    --------
    RandomFeaturePCA : the same with random Fourier features.
    ExactKernelPCA : the dense reference on small data.

    Notes
    -----
    With ``K_LL = U S U^T``, the features are ``k(x, L) U_r S_r^{-1/2}`` over the
    eigenvalues above ``m * eps * max(S)``. The landmarks are a seeded uniform draw of
    row indices, the same for numpy and dask inputs of the same data (a dask input has
    those rows gathered in one read before the pass over the data). Cost: ``n m d``
    kernel evaluations and ``2 n m^2`` flops, memory ``O(m^2)`` plus one chunk.

    References
    ----------
    C. Williams, M. Seeger, "Using the Nyström method to speed up kernel machines",
    NIPS 2001. D. Lopez-Paz, S. Sra, A. Smola, Z. Ghahramani, B. Schölkopf, "Randomized
    nonlinear component analysis", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import NystroemPCA
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> npca = NystroemPCA(n_components=2, n_features=200, random_state=0)
    >>> npca.fit_transform(X).shape
    (500, 2)
    """

    def __init__(self, n_components=5, *, kernel="gaussian", bandwidth="median", kernel_params=None,
                 n_features=1024, center=True, random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.n_features = n_features
        self.center = center
        self.random_state = random_state

    def _check_budget(self, k: int) -> None:
        budget = check_int(self.n_features, "n_features")
        if k > budget:
            raise ValueError(f"n_components={k} must be <= n_features={budget}")
        self._n_landmarks = budget

    def _feature_map(self, view, spec, sample):
        landmarks = landmark_rows(view, min(self._n_landmarks, view.n_samples), self.seed_)
        normalization = inverse_sqrt(kernel_matrix(spec, landmarks))
        if normalization.shape[1] == 0:
            raise ValueError(
                "the kernel is zero on every landmark (e.g. all-zero rows with the arccos kernel); "
                "no Nyström features can be formed"
            )
        self.landmarks_ = landmarks
        self.normalization_ = normalization
        key = (type(self).__name__, sorted(spec.to_dict().items()), landmarks, normalization)
        return NystroemMap(spec, landmarks, normalization), key

