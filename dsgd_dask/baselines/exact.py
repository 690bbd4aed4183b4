"""Exact kernel PCA on small data: the dense reference solution."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._linalg import top_eigenpairs
from dsgd_dask._validation import check_choice, check_int
from dsgd_dask.baselines._common import fingerprint
from dsgd_dask.baselines._dense import CentredKernel, DualProjection, check_dense_size, materialise
from dsgd_dask.estimators._base import RandomFeatureEstimatorMixin
from dsgd_dask.estimators.kpca import N_SAMPLE
from dsgd_dask.streams.batches import sample_rows
from dsgd_dask.transform.lazy import apply_rows


class _DenseKernelEstimator(RandomFeatureEstimatorMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                            BaseEstimator):
    """Shared set-up of the dense estimators: validation, size limit, centred Gram matrix."""

    def _dense_setup(self, X):
        """The validated view, ``k``, and the centring and (centred) kernel matrix of ``X``."""
        view = self._validate_input(X, reset=True)
        k = check_int(self.n_components, "n_components")
        center = bool(check_choice(self.center, "center", (True, False)))
        self._check_params()
        check_dense_size(view.n_samples, type(self).__name__)
        if k > view.n_samples:
            raise ValueError(f"n_components={k} must be <= n_samples={view.n_samples}")
        self.seed_ = self._seed(self.random_state)
        spec = self._kernel_spec(sample_rows(view, N_SAMPLE, self.seed_))
        X_fit = materialise(view)
        centred, K = CentredKernel.fit(spec, X_fit, center)
        self.X_fit_ = X_fit
        self.bandwidth_ = spec.bandwidth
        self.kernel_ = spec
        self._n_features_out = k
        return view, k, centred, K

    def _check_params(self) -> None:
        """Validate the estimator's own parameters (before any data are read)."""

    def _set_projection(self, centred: CentredKernel, coef: np.ndarray) -> None:
        self._projection = DualProjection(centred, coef)
        self._token = fingerprint(type(self).__name__, sorted(centred.kernel.to_dict().items()), centred.X_fit,
                                  centred.col_mean, coef)

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
        check_is_fitted(self, "X_fit_")
        view = self._validate_input(X, reset=False)
        return apply_rows(view, self._projection, self._n_features_out, self._token, type(self).__name__.lower())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


class ExactKernelPCA(_DenseKernelEstimator):
    """Exact kernel PCA: eigendecomposition of the dense, centred n x n kernel matrix.

    The reference solution for small data, with any kernel of the package (the exact
    kernel, not random features). Training sets above ``MAX_SAMPLES = 20000`` rows are
    refused: use :class:`~dsgd_dask.KernelPCA`, :class:`RandomFeaturePCA` or
    :class:`NystroemPCA` for those. A lazy input is computed (it is small).

    Parameters
    ----------
    n_components : int, default=5
        Number of principal components ``k`` (at most ``n_samples``).
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth : "median" or float, default="median"
        Length scale ``sigma``; ``"median"`` takes the median pairwise distance of the
        seeded sample of 1000 rows used by :class:`~dsgd_dask.KernelPCA` (so the same
        ``random_state`` gives the same bandwidth; L1 for laplacian, the median row norm
        for arccos).
    kernel_params : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    center : bool, default=True
        Centre the kernel matrix (kernel PCA of the centred covariance operator, as
        scikit-learn's ``KernelPCA``).
    random_state : int, RandomState instance or None, default=None
        Seed of the bandwidth sample (the fit is otherwise deterministic).

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of the (centred) covariance operator on the training data: those of
        the centred kernel matrix divided by ``n_samples`` (scikit-learn
        ``KernelPCA.eigenvalues_ / n``), in decreasing order.
    eigenvectors_ : ndarray of shape (n_samples, n_components)
        Unit eigenvectors of the centred kernel matrix (as scikit-learn's
        ``KernelPCA.eigenvectors_``; the entry of largest magnitude of each is positive).
    X_fit_ : ndarray of shape (n_samples, n_features_in_)
        The training data (float64).
    bandwidth_ : float
        The bandwidth used.
    kernel_ : KernelSpec
        The kernel with its bandwidth.
    seed_ : int
        Seed of the bandwidth sample.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of str
        Input column names, when fitted on a DataFrame.

    See Also
    --------
    KernelHebbianPCA : iterative kernel PCA on the same dense matrix.

    Notes
    -----
    With ``K~ = U diag(mu) U^T`` the centred kernel matrix, component ``i`` is the
    unit-norm function ``f_i = sum_j U_ji phi~(x_j) / sqrt(mu_i)`` and
    ``transform(x)_i = k~(x, X) U_i / sqrt(mu_i)``; on the training data these are
    ``U_i sqrt(mu_i)``, with variance ``mu_i / n``. Only the top ``k`` eigenpairs are
    computed. Cost ``O(n^2 d)`` for the kernel and ``O(n^2 k)`` to ``O(n^3)`` for the
    eigenpairs; memory one ``n x n`` float64 matrix.

    References
    ----------
    B. Schölkopf, A. Smola, K.-R. Müller, "Nonlinear component analysis as a kernel
    eigenvalue problem", Neural Computation 10 (1998).

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import ExactKernelPCA
    >>> X = np.random.default_rng(0).normal(size=(300, 3))
    >>> kpca = ExactKernelPCA(n_components=2, bandwidth=1.0).fit(X)
    >>> kpca.transform(X[:5]).shape
    (5, 2)
    >>> bool(np.all(np.diff(kpca.eigenvalues_) <= 0))
    True
    """

    def __init__(self, n_components=5, *, kernel="gaussian", bandwidth="median", kernel_params=None, center=True,
                 random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.center = center
        self.random_state = random_state

    def fit(self, X, y=None):
        """Fit the components: the dense centred kernel matrix and its top eigenpairs.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
            Training data, at most 20000 rows.
        y : None
            Ignored.

        Returns
        -------
        self : ExactKernelPCA
        """
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit, and return the projections of the training data.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
            Training data, at most 20000 rows.
        y : None
            Ignored.

        Returns
        -------
        ndarray, dask array or DataArray of shape (n_samples, n_components)
            ``U_i sqrt(mu_i)`` for numpy input (no second kernel matrix); otherwise
            :meth:`transform` of ``X`` (lazy for lazy input).
        """
        view, Z = self._fit(X)
        if view.is_dask or view.dims is not None:
            return self.transform(X)
        return Z

    def _fit(self, X):
        view, k, centred, K = self._dense_setup(X)
        n = K.shape[0]
        vals, vecs = top_eigenpairs(K, k, overwrite=True)
        del K
        positive = vals > max(vals[0], 0.0) * n * np.finfo(np.float64).eps
        vals = np.where(positive, vals, 0.0)
        root = np.sqrt(vals)
        inv_root = np.divide(1.0, root, out=np.zeros_like(root), where=positive)
        self.eigenvectors_ = vecs
        self.eigenvalues_ = vals / n
        self._set_projection(centred, vecs * inv_root)
        return view, vecs * root
