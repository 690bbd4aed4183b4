"""Exact kernel CCA, kernel SVD and kernel sliced inverse regression on small data: the dense references.

Each view's centred kernel matrix ``K~ = U diag(lambda) U^T`` gives explicit coordinates
``Phi = U_r diag(lambda_r)^{1/2}`` (``Phi Phi^T = K~``) over the eigenvalues above
``n * eps * max(lambda)``; in these coordinates the RKHS norm is the Euclidean norm, the
covariance is ``diag(lambda_r) / n`` and the problems are the explicit-feature ones of
:mod:`dsgd_dask.rules.solutions`, solved exactly. A direction ``a`` is the function
``f(x) = k~(x, X_fit) U_r diag(lambda_r)^{-1/2} a``.
"""

from __future__ import annotations

import numbers

import dask
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._linalg import top_eigenpairs
from dsgd_dask._validation import check_choice, check_float, check_int
from dsgd_dask.baselines._common import fingerprint
from dsgd_dask.baselines._dense import CentredKernel, DualProjection
from dsgd_dask.estimators._base import RandomFeatureEstimatorMixin, kernel_spec
from dsgd_dask.estimators.kpca import N_SAMPLE
from dsgd_dask.features.kernels import KernelSpec, parse_kernel
from dsgd_dask.metrics import paired_correlations
from dsgd_dask.rules.solutions import (
    between_slice_factor,
    cross_svd,
    ridge_cca,
    slice_sums,
    sliced_directions,
)
from dsgd_dask.streams.batches import sample_rows
from dsgd_dask.streams.inputs import DataView, check_finite_block, stacked_view
from dsgd_dask.streams.slices import Slicer
from dsgd_dask.transform.lazy import apply_rows

#: Largest training set of the exact two-view estimators: two n x n kernel matrices and
#: their eigenvectors, and an SVD of up to n x n, at 5000 rows about 1 GB and minutes.
MAX_TWO_VIEW_SAMPLES = 5_000


def check_two_view_size(n_samples: int, name: str) -> None:
    """Refuse training sets above :data:`MAX_TWO_VIEW_SAMPLES` rows."""
    if n_samples > MAX_TWO_VIEW_SAMPLES:
        raise ValueError(
            f"{name} forms dense {n_samples} x {n_samples} kernel matrices and is limited to "
            f"n_samples <= {MAX_TWO_VIEW_SAMPLES} (got {n_samples}); use RandomFeatureCCA or NystroemCCA "
            "for larger data, or fit on a subsample"
        )


def check_kernel(kernel, bandwidth, kernel_params, suffix: str = "") -> KernelSpec:
    """The kernel of one view, its parameters checked before any data are read (bandwidth 1 if ``"median"``).

    Errors name the parameters ``kernel{suffix}``, ``bandwidth{suffix}``.
    """
    spec = parse_kernel(kernel, 1.0, kernel_params)
    if isinstance(bandwidth, str):
        check_choice(bandwidth, f"bandwidth{suffix}", ("median",))
        return spec
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real):
        raise TypeError(f"bandwidth{suffix} must be 'median' or a positive number, got {bandwidth!r}")
    return spec.with_bandwidth(bandwidth)


def view_kernel(kernel, bandwidth, kernel_params, sample: np.ndarray, suffix: str = "") -> KernelSpec:
    """The kernel of one view with its bandwidth (the median trick on ``sample``), ``bandwidth{suffix}`` in errors."""
    check_kernel(kernel, bandwidth, kernel_params, suffix)
    return kernel_spec(kernel, bandwidth, kernel_params, sample, what=f"bandwidth{suffix}")


def materialise_pair(vx: DataView, vy: DataView, what: tuple[str, str] = ("X", "Y")) -> tuple[np.ndarray, np.ndarray]:
    """The rows of two views as float64 numpy arrays (lazy inputs computed together, then checked)."""
    if vx.is_dask:
        x, y = dask.compute(vx.data, vy.data)
        check_finite_block(x, what[0])
        check_finite_block(y, what[1])
    else:
        x, y = vx.data, vy.data
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


def kernel_coordinates(kernel: KernelSpec, X: np.ndarray):
    """The centring on ``X``, and ``U_r``, ``lambda_r`` of its centred kernel matrix (nonzero eigenvalues)."""
    centred, K = CentredKernel.fit(kernel, X, True)
    n = K.shape[0]
    vals, vecs = top_eigenpairs(K, n, overwrite=True)
    del K
    keep = vals > max(vals[0], 0.0) * n * np.finfo(np.float64).eps
    if not keep.any():
        raise ValueError("the centred kernel matrix is zero: the data have no variance under this kernel; "
                         "check the bandwidth")
    return centred, vecs[:, keep], vals[keep]


class _PairedEstimator(RandomFeatureEstimatorMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                       BaseEstimator):
    """Validation of row-aligned pairs ``(X, Y)`` and the lazy projections of the fitted functions."""

    #: Names of the two inputs in errors.
    _what = ("X", "Y")

    def _validate_pair(self, X, Y, reset: bool) -> tuple[DataView, DataView]:
        """Both views, checked without computing: shapes, dtypes, row counts, values of numpy inputs."""
        return self._validate_views(X, Y, reset, self._what)

    def _view_samples(self, vx: DataView, vy: DataView) -> tuple[np.ndarray, np.ndarray]:
        """The seeded sample of rows (the same rows of both views), split by view."""
        sample = sample_rows(stacked_view(vx, vy), N_SAMPLE, self.seed_)
        return sample[:, :vx.n_features], sample[:, vx.n_features:]

    def _projection(self, fn, n_out: int, parts: tuple, view: str):
        return fn, fingerprint(type(self).__name__, view, *parts), n_out

    def _apply(self, view: DataView, projection, suffix: str):
        fn, token, n_out = projection
        return apply_rows(view, fn, n_out, token, f"{type(self).__name__.lower()}{suffix}")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        return tags


class _TwoViewEstimator(_PairedEstimator):
    """Two views with their own kernels; ``transform(X, Y=None)`` gives the variates of one or both."""

    def _fit_views(self, X, Y) -> tuple[DataView, DataView, int]:
        vx, vy = self._validate_pair(X, Y, reset=True)
        self._check_n_features_y(vy, reset=True)
        k = check_int(self.n_components, "n_components")
        check_kernel(self.kernel_x, self.bandwidth_x, self.kernel_params_x, "_x")
        check_kernel(self.kernel_y, self.bandwidth_y, self.kernel_params_y, "_y")
        return vx, vy, k

    def _view_kernels(self, sx: np.ndarray, sy: np.ndarray) -> tuple[KernelSpec, KernelSpec]:
        spec_x = view_kernel(self.kernel_x, self.bandwidth_x, self.kernel_params_x, sx, "_x")
        spec_y = view_kernel(self.kernel_y, self.bandwidth_y, self.kernel_params_y, sy, "_y")
        self.kernel_x_, self.kernel_y_ = spec_x, spec_y
        self.bandwidth_x_, self.bandwidth_y_ = spec_x.bandwidth, spec_y.bandwidth
        return spec_x, spec_y

    def transform(self, X, Y=None):
        """The variates of the fitted components: ``f_i(X)``, and ``g_i(Y)`` when ``Y`` is given.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features_in_)
        Y : same kinds, of shape (n_samples, n_features_in_y_), optional
            Rows paired with those of ``X``.

        Returns
        -------
        U : ndarray, dask array or DataArray of shape (n_samples, n_components)
            ``f_i(X)``, centred on the training data. Numpy in, numpy out (float64); dask
            or Zarr in, a lazy dask array with one task per row chunk; a DataArray in, a
            DataArray with dims ``(sample_dim, "component")``.
        V : same kind, of shape (n_samples, n_components)
            ``g_i(Y)``, returned (as ``(U, V)``) only when ``Y`` is given.
        """
        check_is_fitted(self, "_projections")
        px, py = self._projections
        if Y is None:
            return self._apply(self._validate_input(X, reset=False), px, "-x")
        vx, vy = self._validate_pair(X, Y, reset=False)
        self._check_n_features_y(vy, reset=False)
        return self._apply(vx, px, "-x"), self._apply(vy, py, "-y")


class _DenseTwoView(_TwoViewEstimator):
    """Both views in the kernel-PCA coordinates of their centred kernel matrices; ``_solve`` poses the problem."""

    def _check_reg(self) -> float:
        return check_float(self.reg, "reg", 0.0, strict=False)

    def _fit(self, X, Y):
        vx, vy, k = self._fit_views(X, Y)
        reg = self._check_reg()
        n = vx.n_samples
        check_two_view_size(n, type(self).__name__)
        if k > n:
            raise ValueError(f"n_components={k} must be <= n_samples={n}")
        self.seed_ = self._seed(self.random_state)
        spec_x, spec_y = self._view_kernels(*self._view_samples(vx, vy))
        self.X_fit_, self.Y_fit_ = materialise_pair(vx, vy)
        cx, Ux, lx = kernel_coordinates(spec_x, self.X_fit_)
        cy, Uy, ly = kernel_coordinates(spec_y, self.Y_fit_)
        rx, ry = np.sqrt(lx), np.sqrt(ly)
        Cxy = rx[:, None] * (Ux.T @ Uy) * ry / n
        A, B = self._solve(lx / n, ly / n, Cxy, reg, k)
        self.dual_coef_x_ = Ux @ (A / rx[:, None])
        self.dual_coef_y_ = Uy @ (B / ry[:, None])
        self._n_features_out = k
        self._projections = (
            self._projection(DualProjection(cx, self.dual_coef_x_), k,
                             (sorted(spec_x.to_dict().items()), cx.X_fit, cx.col_mean, self.dual_coef_x_), "x"),
            self._projection(DualProjection(cy, self.dual_coef_y_), k,
                             (sorted(spec_y.to_dict().items()), cy.X_fit, cy.col_mean, self.dual_coef_y_), "y"),
        )
        return self


class _CorrelationScore:
    """``score``: the sum of the test correlations of the canonical variates."""

    def score(self, X, Y):
        """Sum over the components of the Pearson correlations of ``f_i(X)`` and ``g_i(Y)``.

        The "top-k test correlation sum" of the kernel CCA literature, on any paired rows
        (lazy inputs are projected and the variates computed with one ``dask.compute``).

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features_in_)
        Y : same kinds, of shape (n_samples, n_features_in_y_)
            Rows paired with those of ``X``.

        Returns
        -------
        float
            At most ``n_components``; a component with a constant variate counts 0.
        """
        U, V = dask.compute(*self.transform(X, Y))
        return float(paired_correlations(np.asarray(U), np.asarray(V)).sum())


class ExactKernelCCA(_CorrelationScore, _DenseTwoView):
    """Exact regularised kernel CCA: the dense solution on small data, one kernel per view.

    Finds functions ``f_i`` of ``x`` and ``g_i`` of ``y`` in the two RKHSs maximising
    ``Cov(f, g)`` under ``Var(f) + reg ||f||^2 = 1 = Var(g) + reg ||g||^2``, uncorrelated
    across components: the reference for :class:`RandomFeatureCCA`, :class:`NystroemCCA`
    and the doubly stochastic kernel CCA. Training sets above
    ``MAX_TWO_VIEW_SAMPLES = 5000`` rows are refused; a lazy input is computed (it is small).

    Parameters
    ----------
    n_components : int, default=2
        Number of canonical pairs ``k`` (at most ``n_samples``; pairs beyond the rank
        of the problem have correlation 0 and zero coefficients).
    kernel_x, kernel_y : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family of each view (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth_x, bandwidth_y : "median" or float, default="median"
        Length scale of each view; ``"median"`` takes the median pairwise distance of the
        view on a seeded sample of 1000 rows (the same rows for both views; L1 for
        laplacian, the median row norm for arccos).
    kernel_params_x, kernel_params_y : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    reg : float, default=1e-3
        Ridge ``gamma >= 0`` on the RKHS norms, in kernel units (``k(x, x) = 1`` for the
        shift-invariant kernels). With ``reg = 0`` the problem is degenerate on a
        full-rank kernel (correlations 1).
    random_state : int, RandomState instance or None, default=None
        Seed of the bandwidth sample (the fit is otherwise deterministic).

    Attributes
    ----------
    correlations_ : ndarray of shape (n_components,)
        Regularised canonical correlations ``rho_i``, decreasing:
        ``Cov(f_i, g_i) / sqrt((Var(f_i) + reg ||f_i||^2)(Var(g_i) + reg ||g_i||^2))``
        on the training data.
    dual_coef_x_ : ndarray of shape (n_samples, n_components)
        ``f_i = sum_j dual_coef_x_[j, i] phi~(x_j)`` over the centred training features.
    dual_coef_y_ : ndarray of shape (n_samples, n_components)
        The same for ``g_i``.
    X_fit_ : ndarray of shape (n_samples, n_features_in_)
        The training data of the first view (float64).
    Y_fit_ : ndarray of shape (n_samples, n_features_in_y_)
        The training data of the second view (float64).
    kernel_x_, kernel_y_ : KernelSpec
        The kernels with their bandwidths.
    bandwidth_x_, bandwidth_y_ : float
        The bandwidths used.
    seed_ : int
        Seed of the bandwidth sample.
    n_features_in_ : int
        Number of features of ``X``.
    n_features_in_y_ : int
        Number of features of ``Y``.
    feature_names_in_ : ndarray of str
        Column names of ``X``, when fitted on a DataFrame.

    See Also
    --------
    RandomFeatureCCA : randomized kernel CCA on random Fourier features, out of core.
    NystroemCCA : the same with Nyström features.

    Notes
    -----
    With the centred kernel matrices ``K~x = Ux diag(lx) Ux^T`` (and ``K~y``), the
    coordinates ``Phi_x = Ux diag(lx)^{1/2}`` turn the problem into regularised linear
    CCA with ``Cxx = diag(lx) / n``, ``Cyy = diag(ly) / n``, ``Cxy = Phi_x^T Phi_y / n``,
    solved by :func:`~dsgd_dask.rules.solutions.ridge_cca` (an SVD of the whitened
    cross-covariance). The directions satisfy ``a^T (Cxx + reg I) a = 1`` and
    ``a^T Cxy b = rho``; in dual form this is the generalised eigenproblem
    ``[0, K~x K~y; K~y K~x, 0] w = rho [K~x^2 + n reg K~x, 0; 0, K~y^2 + n reg K~y] w``.
    ``transform`` evaluates ``f_i(x) = k~(x, X_fit) dual_coef_x_[:, i]``, centred on the
    training data. Cost ``O(n^2 d)`` for the kernels, ``O(n^3)`` for two
    eigendecompositions and one SVD; memory a few ``n x n`` float64 matrices.

    References
    ----------
    K. Fukumizu, F. Bach, A. Gretton, "Statistical consistency of kernel canonical
    correlation analysis", JMLR 8 (2007). F. Bach, M. Jordan, "Kernel independent
    component analysis", JMLR 3 (2002).

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import ExactKernelCCA
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(-2, 2, size=(300, 1))
    >>> X = np.hstack([t, rng.normal(size=(300, 1))])
    >>> Y = np.hstack([t**2, rng.normal(size=(300, 1))])
    >>> cca = ExactKernelCCA(n_components=2, random_state=0).fit(X, Y)
    >>> U, V = cca.transform(X, Y)
    >>> U.shape, V.shape
    ((300, 2), (300, 2))
    >>> bool(cca.correlations_[0] > 0.9)
    True
    """

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, reg=1e-3, random_state=None):
        self.n_components = n_components
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.bandwidth_x = bandwidth_x
        self.bandwidth_y = bandwidth_y
        self.kernel_params_x = kernel_params_x
        self.kernel_params_y = kernel_params_y
        self.reg = reg
        self.random_state = random_state

    def fit(self, X, Y):
        """Fit the canonical pairs: two dense centred kernel matrices and one SVD.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
            First view, at most 5000 rows.
        Y : same kinds, of shape (n_samples, n_features_y) or (n_samples,)
            Second view, row ``i`` paired with row ``i`` of ``X``.

        Returns
        -------
        self : ExactKernelCCA
        """
        return self._fit(X, Y)

    def _solve(self, Cxx, Cyy, Cxy, reg, k):
        self.correlations_, A, B = ridge_cca(Cxx, Cyy, Cxy, reg, k)
        return A, B


class ExactKernelSVD(_DenseTwoView):
    """Exact kernel SVD: the top singular functions of the cross-covariance operator, on small data.

    Finds RKHS-orthonormal functions ``f_i`` of ``x`` and ``g_i`` of ``y`` with
    ``Cov(f_i, g_j) = s_i`` if ``i = j`` else 0, ``s`` decreasing: the dense reference for
    the doubly stochastic kernel SVD. Training sets above ``MAX_TWO_VIEW_SAMPLES = 5000``
    rows are refused; a lazy input is computed (it is small).

    Parameters
    ----------
    n_components : int, default=2
        Number of singular triples ``k`` (at most ``n_samples``; triples beyond the rank
        of the cross-covariance have value 0 and zero coefficients).
    kernel_x, kernel_y : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family of each view.
    bandwidth_x, bandwidth_y : "median" or float, default="median"
        Length scale of each view (``"median"``: as :class:`ExactKernelCCA`).
    kernel_params_x, kernel_params_y : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    random_state : int, RandomState instance or None, default=None
        Seed of the bandwidth sample.

    Attributes
    ----------
    singular_values_ : ndarray of shape (n_components,)
        Singular values of the centred cross-covariance operator on the training data,
        decreasing.
    dual_coef_x_, dual_coef_y_ : ndarray of shape (n_samples, n_components)
        ``f_i = sum_j dual_coef_x_[j, i] phi~(x_j)``, and the same for ``g_i``.
    X_fit_, Y_fit_ : ndarray
        The training data of the two views (float64).
    kernel_x_, kernel_y_ : KernelSpec
        The kernels with their bandwidths.
    bandwidth_x_, bandwidth_y_ : float
        The bandwidths used.
    seed_ : int
        Seed of the bandwidth sample.
    n_features_in_, n_features_in_y_ : int
        Number of features of ``X`` and ``Y``.
    feature_names_in_ : ndarray of str
        Column names of ``X``, when fitted on a DataFrame.

    Notes
    -----
    In the kernel-PCA coordinates of :class:`ExactKernelCCA` the operator is
    ``Cxy = Phi_x^T Phi_y / n``; its SVD (:func:`~dsgd_dask.rules.solutions.cross_svd`)
    gives orthonormal coordinate vectors, i.e. RKHS-orthonormal functions.

    References
    ----------
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import ExactKernelSVD
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2))
    >>> Y = X + 0.1 * rng.normal(size=(200, 2))
    >>> svd = ExactKernelSVD(n_components=3, random_state=0).fit(X, Y)
    >>> bool(np.all(np.diff(svd.singular_values_) <= 0))
    True
    """

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, random_state=None):
        self.n_components = n_components
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.bandwidth_x = bandwidth_x
        self.bandwidth_y = bandwidth_y
        self.kernel_params_x = kernel_params_x
        self.kernel_params_y = kernel_params_y
        self.random_state = random_state

    def fit(self, X, Y):
        """Fit the singular triples: two dense centred kernel matrices and one SVD.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
            First view, at most 5000 rows.
        Y : same kinds, of shape (n_samples, n_features_y) or (n_samples,)
            Second view, row ``i`` paired with row ``i`` of ``X``.

        Returns
        -------
        self : ExactKernelSVD
        """
        return self._fit(X, Y)

    def _check_reg(self) -> float:
        return 0.0

    def _solve(self, Cxx, Cyy, Cxy, reg, k):
        self.singular_values_, A, B = cross_svd(Cxy, k)
        return A, B


class ExactKernelSIR(_PairedEstimator):
    """Exact kernel sliced inverse regression: the dense solution on small data.

    The response ``y`` is cut into slices (:class:`~dsgd_dask.streams.slices.Slicer`:
    one per class, quantiles, or k-means for several outputs); the directions are the
    functions ``f_i`` of ``x`` whose slice means vary most relative to their regularised
    variance: ``Cb f = lambda (Cxx + reg I) f`` with ``Cb`` the covariance of the slice
    means of the centred features. The dense reference for the doubly stochastic kernel
    SIR; training sets above ``MAX_TWO_VIEW_SAMPLES = 5000`` rows are refused.

    Parameters
    ----------
    n_components : int, default=2
        Number of directions ``k``, at most ``n_slices - 1``.
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family on ``x``.
    bandwidth : "median" or float, default="median"
        Length scale; ``"median"`` takes the median pairwise distance of a seeded sample
        of 1000 rows.
    kernel_params : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    n_slices : int, default=10
        Number of slices wanted (at least 2); a response with fewer distinct values, or
        heavy ties, gives fewer (``n_slices_``).
    reg : float, default=1e-3
        Ridge ``gamma >= 0`` on the RKHS norm, in kernel units.
    random_state : int, RandomState instance or None, default=None
        Seed of the sample behind the bandwidth and the slices (and of k-means).

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        Generalised eigenvalues ``lambda_i``, decreasing: the share of the regularised
        variance of ``f_i`` explained by the slice means.
    dual_coef_ : ndarray of shape (n_samples, n_components)
        ``f_i = sum_j dual_coef_[j, i] phi~(x_j)``.
    slicer_ : Slicer
        The slices, fitted on the seeded sample of rows of ``y``.
    n_slices_ : int
        Number of slices used.
    X_fit_ : ndarray of shape (n_samples, n_features_in_)
        The training data (float64).
    bandwidth_ : float
        The bandwidth used.
    kernel_ : KernelSpec
        The kernel with its bandwidth.
    seed_ : int
        Seed of the sample.
    n_features_in_ : int
        Number of features of ``X``.
    feature_names_in_ : ndarray of str
        Column names of ``X``, when fitted on a DataFrame.

    Notes
    -----
    In the kernel-PCA coordinates ``Phi = U_r diag(lambda_r)^{1/2}`` of the centred kernel
    matrix, ``Cxx = diag(lambda_r) / n`` and ``Cb = sum_s p_s mu_s mu_s^T`` with ``mu_s``
    the mean of ``Phi`` over slice ``s`` and ``p_s`` its share of the rows (``Phi`` is
    centred); :func:`~dsgd_dask.rules.solutions.sliced_directions` solves the problem
    from the ``S x r`` factor of ``Cb`` (an SVD, never ``Cb`` itself). ``Cb`` has rank at
    most ``S - 1``, hence ``n_components <= n_slices - 1``.

    References
    ----------
    K.-C. Li, "Sliced inverse regression for dimension reduction", JASA 86 (1991).
    H.-M. Wu, "Kernel sliced inverse regression with applications to classification",
    JCGS 17 (2008).

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import ExactKernelSIR
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 3))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=300)
    >>> sir = ExactKernelSIR(n_components=2, n_slices=5, random_state=0).fit(X, y)
    >>> sir.transform(X).shape, sir.slicer_.kind
    ((300, 2), 'quantiles')
    """

    _what = ("X", "y")

    def __init__(self, n_components=2, *, kernel="gaussian", bandwidth="median", kernel_params=None, n_slices=10,
                 reg=1e-3, random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.n_slices = n_slices
        self.reg = reg
        self.random_state = random_state

    def fit(self, X, y):
        """Fit the directions: slices of ``y``, the dense centred kernel matrix of ``X``, one SVD.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
            Training data, at most 5000 rows.
        y : same kinds, of shape (n_samples,) or (n_samples, n_outputs)
            Numeric response (encode string labels as integers first).

        Returns
        -------
        self : ExactKernelSIR
        """
        vx, vy = self._validate_pair(X, y, reset=True)
        k = check_int(self.n_components, "n_components")
        n_slices = check_int(self.n_slices, "n_slices", 2)
        reg = check_float(self.reg, "reg", 0.0, strict=False)
        check_kernel(self.kernel, self.bandwidth, self.kernel_params)
        n = vx.n_samples
        if k > n_slices - 1:
            raise ValueError(f"n_components={k} must be <= n_slices - 1 = {n_slices - 1}: the between-slice "
                             "covariance has rank at most n_slices - 1")
        if n < n_slices:
            raise ValueError(f"y has {n} samples, fewer than n_slices={n_slices}; lower n_slices or pass more rows")
        check_two_view_size(n, type(self).__name__)
        self.seed_ = self._seed(self.random_state)
        sx, sy = self._view_samples(vx, vy)
        spec = self._kernel_spec(sx)
        slicer = Slicer.fit(sy, n_slices, self.seed_)
        if k > slicer.n_slices - 1:
            raise ValueError(f"n_components={k} must be <= {slicer.n_slices - 1}: y gives only {slicer.n_slices} "
                             f"slices ({slicer.kind}: fewer distinct values than n_slices={n_slices}, or ties)")
        self.X_fit_, y_fit = materialise_pair(vx, vy, self._what)
        labels = slicer.assign(y_fit)
        centred, U, lam = kernel_coordinates(spec, self.X_fit_)
        root = np.sqrt(lam)
        counts, sums = slice_sums(U, labels, slicer.n_slices)
        G = between_slice_factor(counts, sums * root)
        self.eigenvalues_, A = sliced_directions(lam / n, G, reg, k, factor=True)
        self.dual_coef_ = U @ (A / root[:, None])
        self.slicer_ = slicer
        self.n_slices_ = slicer.n_slices
        self.bandwidth_ = spec.bandwidth
        self.kernel_ = spec
        self._n_features_out = k
        self._projection_x = self._projection(
            DualProjection(centred, self.dual_coef_), k,
            (sorted(spec.to_dict().items()), centred.X_fit, centred.col_mean, self.dual_coef_), "x")
        return self

    def transform(self, X):
        """Project ``X`` on the fitted directions.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)

        Returns
        -------
        ndarray, dask array or DataArray of shape (n_samples, n_components)
            ``f_i(X)``, centred on the training data. Numpy in, numpy out (float64); dask
            or Zarr in, a lazy dask array with one task per row chunk; a DataArray in, a
            DataArray with dims ``(sample_dim, "component")``.
        """
        check_is_fitted(self, "_projection_x")
        return self._apply(self._validate_input(X, reset=False), self._projection_x, "")
