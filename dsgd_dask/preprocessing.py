"""Row-wise preprocessing for numpy and dask inputs: unit-norm rows and PCA fitted on a sample.

Dai et al. (2014) feed their kernel machines images scaled to unit Euclidean norm and
projected on their top principal components. Both steps here are scikit-learn
transformers (usable in a :class:`~sklearn.pipeline.Pipeline`) that keep dask arrays
lazy: :meth:`transform` maps every row chunk on its own (``map_blocks``), and
:class:`SamplePCA` computes only the rows of its seeded sample to fit. On a numpy array
and on a dask array of the same rows they give the same values.
"""

from __future__ import annotations

from numbers import Integral
from typing import ClassVar

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.decomposition import PCA
from sklearn.preprocessing import normalize
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from dsgd_dask.estimators._constraints import RANDOM_STATE

__all__ = ["SamplePCA", "UnitNorm"]


def _rows(X, what: str = "X"):
    """``X`` as a 2-D float numpy or dask array (float32 kept, anything else float64)."""
    if not isinstance(X, da.Array):
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{what} must be 2-D (rows x features), got shape {X.shape}; reshape it, e.g. "
                         "X.reshape(len(X), -1) for images")
    if X.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be numeric, got dtype {X.dtype}")
    dtype = X.dtype if X.dtype == np.float32 else np.float64
    return X.astype(dtype, copy=False) if isinstance(X, np.ndarray) else X.astype(dtype)


class UnitNorm(TransformerMixin, BaseEstimator):
    """Scale every row to unit Euclidean norm (rows of zeros stay zero): scikit-learn's ``normalize``, lazy on dask.

    Stateless: :meth:`fit` only records the number of columns. Dask input stays lazy,
    one task per chunk; a dask array chunked along its columns is first rechunked to
    whole rows.

    Attributes
    ----------
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import UnitNorm
    >>> UnitNorm().fit_transform(np.array([[3.0, 4.0], [0.0, 0.0]]))
    array([[0.6, 0.8],
           [0. , 0. ]])
    """

    _parameter_constraints: ClassVar[dict] = {}

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Record the number of columns of ``X`` (numpy or dask, nothing computed).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        self.n_features_in_ = _rows(X).shape[1]
        return self

    def transform(self, X):
        """Rows of ``X`` divided by their norms.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_features)
            float32 for float32 input, else float64; lazy for dask input.
        """
        check_is_fitted(self, "n_features_in_")
        X = _rows(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but UnitNorm was fitted with {self.n_features_in_}")
        if isinstance(X, da.Array):
            if X.numblocks[1] != 1:
                X = X.rechunk({1: -1})
            return X.map_blocks(normalize, dtype=X.dtype)
        return normalize(X)


def _project(X: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    return (X - mean) @ components.T


class SamplePCA(TransformerMixin, BaseEstimator):
    """Projection on the top principal components of a seeded sample of the rows.

    :meth:`fit` draws ``n_samples`` rows without replacement (all of them when there are
    fewer), computes them (for dask input, only those rows are read) and fits
    :class:`sklearn.decomposition.PCA` on them; :meth:`transform` centres every row on
    the sample mean and projects it on the components, chunk by chunk for dask input.
    The same seed draws the same rows from a numpy array and a dask array of it, so both
    fit the same components.

    Parameters
    ----------
    n_components : int, default=100
        Dimensions kept: at most the number of columns and of sampled rows.
    n_samples : int, default=10000
        Rows of the sample the components are fitted on.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the sample (and of sklearn's randomised SVD, should it choose one).

    Attributes
    ----------
    pca_ : sklearn.decomposition.PCA
        The PCA fitted on the sample.
    components_ : ndarray of shape (n_components, n_features_in_)
    mean_ : ndarray of shape (n_features_in_,)
        The sample mean, subtracted before the projection.
    explained_variance_ratio_ : ndarray of shape (n_components,)
        Of the sample.
    sample_indices_ : ndarray of int
        The sampled rows, sorted.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import SamplePCA
    >>> X = np.random.default_rng(0).normal(size=(500, 10))
    >>> SamplePCA(n_components=3, n_samples=200, random_state=0).fit_transform(X).shape
    (500, 3)
    """

    _parameter_constraints: ClassVar[dict] = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        **RANDOM_STATE,
    }

    def __init__(self, n_components=100, *, n_samples=10000, random_state=None):
        self.n_components = n_components
        self.n_samples = n_samples
        self.random_state = random_state

    def _seed_rng(self) -> np.random.Generator:
        rs = self.random_state
        if isinstance(rs, np.random.Generator):
            return rs
        if isinstance(rs, np.random.RandomState):
            return np.random.default_rng(rs.randint(2**31))
        return np.random.default_rng(rs)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Fit the components on a seeded sample of the rows of ``X``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        X = _rows(X)
        n, d = X.shape
        k = int(self.n_components)
        size = min(n, int(self.n_samples))
        if k > min(size, d):
            raise ValueError(f"n_components={k} must be at most the number of columns ({d}) and of sampled rows "
                             f"({size}); lower n_components or raise n_samples")
        rng = self._seed_rng()
        idx = np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)
        sample = X[idx]
        if isinstance(sample, da.Array):
            sample = sample.compute()
        if not np.isfinite(sample).all():
            raise ValueError("X contains NaN or infinity in the sampled rows; clean the data first")
        seed = int(rng.integers(2**31))
        self.pca_ = PCA(n_components=k, random_state=seed).fit(sample)
        self.components_ = self.pca_.components_
        self.mean_ = self.pca_.mean_
        self.explained_variance_ratio_ = self.pca_.explained_variance_ratio_
        self.sample_indices_ = idx
        self.n_features_in_ = d
        return self

    def transform(self, X):
        """Rows of ``X`` centred on the sample mean and projected on the components.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components)
            float64; lazy for dask input (one task per row chunk).
        """
        check_is_fitted(self, "components_")
        X = _rows(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but SamplePCA was fitted with {self.n_features_in_}")
        mean, comp = self.mean_, self.components_
        if isinstance(X, da.Array):
            if X.numblocks[1] != 1:
                X = X.rechunk({1: -1})
            return X.map_blocks(_project, mean, comp, dtype=np.result_type(X.dtype, comp.dtype),
                                chunks=(X.chunks[0], (comp.shape[0],)))
        return _project(X, mean, comp)
