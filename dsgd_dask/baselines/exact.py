"""Exact kernel PCA on small data (``KernelPCA(solver="exact")``), and the dense base of the Hebbian baselines."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._linalg import top_eigenpairs
from dsgd_dask.baselines._common import fingerprint
from dsgd_dask.baselines._dense import CentredKernel, DualProjection, check_dense_size, materialise
from dsgd_dask.baselines.rca import DenseSolution, sections
from dsgd_dask.estimators._base import RandomFeatureEstimatorMixin
from dsgd_dask.estimators.kpca import N_SAMPLE
from dsgd_dask.features.kernels import KernelSpec
from dsgd_dask.streams.batches import sample_rows
from dsgd_dask.transform.lazy import apply_rows


class _DenseKernelEstimator(RandomFeatureEstimatorMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                            BaseEstimator):
    """Shared set-up of the dense estimators: validation, size limit, centred Gram matrix."""

    def _dense_setup(self, X):
        """The validated view, ``k``, and the centring and (centred) kernel matrix of ``X``."""
        view = self._validate_input(X, reset=True)
        k, center = int(self.n_components), bool(self.center)
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


def exact_pca(X: np.ndarray, spec: KernelSpec, k: int, center: bool, seed: int,
              feature_center=None) -> DenseSolution:
    """Exact kernel PCA of the rows ``X`` (``KernelPCA(solver="exact")``): the top eigenpairs of the dense kernel.

    With ``K~ = U diag(mu) U^T`` the (centred) ``n x n`` kernel matrix, component ``i`` is
    the unit-norm function ``f_i = sum_j U_ji phi~(x_j) / sqrt(mu_i)``, whose values on the
    training rows are ``U_i sqrt(mu_i)`` with variance ``mu_i / n`` (scikit-learn's
    ``KernelPCA.eigenvalues_ / n``). The centring of ``k~(x, X)`` is linear in
    ``k(x, X)``, so the functions are returned as coefficients of the kernel sections at
    every training row plus an offset: ``h(x) = k(x, X) (C - 1 1^T C / n) - (m^T C - t 1^T C)``
    for ``C = U diag(mu^{-1/2})``, ``m`` the column means of ``K`` and ``t`` their mean.
    Eigenvectors follow :func:`~dsgd_dask._linalg.fix_signs` (the entry of largest
    magnitude positive); eigenvalues below ``n eps mu_1`` count as zero, with zero
    components. Cost ``O(n^2 d)`` for the kernel and ``O(n^2 k)`` to ``O(n^3)`` for the
    eigenpairs; memory one ``n x n`` float64 matrix.
    """
    centred, K = CentredKernel.fit(spec, X, center)
    n = K.shape[0]
    vals, vecs = top_eigenpairs(K, k, overwrite=True)
    del K
    positive = vals > max(vals[0], 0.0) * n * np.finfo(np.float64).eps
    vals = np.where(positive, vals, 0.0)
    inv_root = np.divide(1.0, np.sqrt(vals), out=np.zeros_like(vals), where=positive)
    C = vecs * inv_root
    offset = np.zeros(k)
    if centred.col_mean is not None:
        total = C.sum(axis=0)
        offset = centred.col_mean @ C - centred.total_mean * total
        C = C - total / n
    return DenseSolution(sections(spec, X, seed, feature_center), C, offset, vals / n, n)
