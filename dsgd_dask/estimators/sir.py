"""KernelSIR: kernel sliced inverse regression by doubly stochastic steps."""

from __future__ import annotations

from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._validation import check_float, check_int
from dsgd_dask.estimators._steps import register
from dsgd_dask.estimators.components import ComponentStepEstimator
from dsgd_dask.rules.sir import KSIRRule
from dsgd_dask.rules.solutions import between_slice_covariance, slice_sums, sliced_directions
from dsgd_dask.streams.slices import Slicer


@register
class KernelSIR(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ComponentStepEstimator):
    """Kernel sliced inverse regression by doubly stochastic gradients.

    Finds the functions ``f_i`` of ``x`` whose values best explain the response ``y``
    through its slices: the top solutions of ``Cov(E[phi(x) | slice(y)]) f = lambda
    (Cov(phi(x)) + reg) f`` (kernel SIR; Xie, Liang & Song 2015). ``y`` is cut into
    ``n_slices`` slices from a seeded sample: quantiles of a 1-D response, one slice per
    value when it takes at most ``n_slices`` values (classes), k-means for a response of
    several columns. The projections ``f_i(x)`` are a reduced representation for a
    regression or classification of ``y``.

    Parameters
    ----------
    n_components : int, default=2
        Number of directions ``k`` (at most ``n_slices - 1``).
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
    bandwidth : "median" or float, default="median"
    kernel_params : dict, optional
    n_slices : int, default=10
        Slices of the response (classes: one per class, when there are at most this many).
    reg : float, default=1e-3
        Ridge ``gamma > 0`` in units of the kernel.
    features : {"nystroem", "fourier"}, default="nystroem"
    n_features : int or "auto", default="auto"
        Feature budget (``"auto"``: ``min(4096, max(1024, 2 n))``), grown by one block per step.
    block_size : int or "auto", default="auto"
        1024 for Nyström blocks, 256 for Fourier blocks.
    batch_size : int, default=256
        Rows per step; the slice means of a step are taken over its batch.
    max_iter : int or "auto", default="auto"
        Steps; ``"auto"``: ten passes over the data, between 500 and 5000 steps.
    shuffle_chunks, n_partitions, eta0, eta_decay, compute_dtype, cache_bytes, checkpoint, checkpoint_every, \
verbose, random_state
        As for :class:`~dsgd_dask.KernelCCA`.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        The generalised eigenvalues ``lambda_i`` on the fit sample, decreasing: the share
        of the regularised variance of ``f_i(x)`` explained by the slice means.
    slicer_ : Slicer
        The slices of ``y``.
    model_ : KernelExpansion
        The fitted functions.
    bandwidth_ : float
    n_features_ : int
    n_iter_ : int
    seed_ : int
    n_features_in_ : int
    n_features_in_y_ : int
        Columns of ``y`` (1 for a 1-D response).

    Notes
    -----
    With ``h = H(x)`` on a batch and ``M`` the batch's slice means of ``h`` (row by row),
    ``W = Cov(M)``; every block ``A_j <- A_j (I - eta reg W)`` and the step's block gains
    ``eta (Cov(z(x), M) - Cov(z(x), h) W)``. A batch's slice means include each row
    itself, which adds ``Cov(h) / n_s`` to ``W`` for slices of ``n_s`` rows: with
    ``reg -> 0`` this moves the eigenvalues, not the directions. At the end the
    directions are rotated to the solutions of the ``k x k`` problem on a seeded sample
    of 10,000 rows from every chunk.

    References
    ----------
    K.-C. Li, "Sliced inverse regression for dimension reduction", JASA 1991.
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelSIR
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(800, 4))
    >>> y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=800)
    >>> sir = KernelSIR(n_components=2, n_features=512, max_iter=300, random_state=0).fit(X, y)
    >>> sir.transform(X).shape
    (800, 2)
    """

    _views = ("X",)
    _y_is_target = True

    def __init__(self, n_components=2, *, kernel="gaussian", bandwidth="median", kernel_params=None, n_slices=10,
                 reg=1e-3, features="nystroem", n_features="auto", block_size="auto", batch_size=256,
                 max_iter="auto", shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay=0.01,
                 compute_dtype="float32", cache_bytes=None, checkpoint=None, checkpoint_every=100, verbose=False,
                 random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.n_slices = n_slices
        self.reg = reg
        self.features = features
        self.n_features = n_features
        self.block_size = block_size
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.shuffle_chunks = shuffle_chunks
        self.n_partitions = n_partitions
        self.eta0 = eta0
        self.eta_decay = eta_decay
        self.compute_dtype = compute_dtype
        self.cache_bytes = cache_bytes
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.verbose = verbose
        self.random_state = random_state

    def fit(self, X, y, *, callback=None):
        """Fit the directions by doubly stochastic steps over the rows of ``(X, y)``.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d)
        y : array-like, dask array, Zarr array or DataArray of shape (n_samples,) or (n_samples, d_y)
            Numeric response, row-aligned with ``X``.
        callback : callable, optional
            ``callback(n_steps, model)`` with the raw expansion of the current functions.

        Returns
        -------
        self
        """
        return self._fit(X, y, callback=callback)

    def partial_fit(self, X, y):
        """One pass of steps over ``(X, y)`` as the next batch of a stream (the first call initialises).

        Returns
        -------
        self
        """
        return self._partial_fit(X, y)

    def transform(self, X):
        """The fitted directions ``f_i(X)``, centred on the fit sample.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, d)

        Returns
        -------
        ndarray, dask array or DataArray of shape (n_samples, n_components)
            Lazy for dask and dask-backed xarray inputs.
        """
        check_is_fitted(self, "models_")
        return self._transform_view(0, X, "x")

    @property
    def model_(self):
        return self.models_[0]

    def _check_params(self, n_samples: int) -> dict:
        p = self._check_common(n_samples)
        p["reg"] = check_float(self.reg, "reg")
        p["n_slices"] = check_int(self.n_slices, "n_slices", 2)
        if p["n_slices"] > n_samples:
            raise ValueError(f"n_slices={p['n_slices']} must be <= n_samples={n_samples}")
        if p["n_components"] > p["n_slices"] - 1:
            raise ValueError(f"n_components={p['n_components']} must be <= n_slices - 1 = {p['n_slices'] - 1}: "
                             "the slice means span at most that many directions")
        return p

    def _make_rule(self, columns, guard_limit: float):
        return KSIRRule(columns, True, guard_limit, self._params["reg"], self.slicer_)

    def _initial(self, z, sample, k):
        y = sample[:, self._columns()[1]]
        self.slicer_ = Slicer.fit(self._sample[:, self._columns()[1]], self._params["n_slices"], self.seed_)
        if k > self.slicer_.n_slices - 1:
            raise ValueError(f"n_components={k} must be <= {self.slicer_.n_slices - 1}: y gives only "
                             f"{self.slicer_.n_slices} slices")
        labels = self.slicer_.assign(y)
        counts, sums = slice_sums(z[0], labels, self.slicer_.n_slices)
        _, A = sliced_directions(z[0].T @ z[0] / len(z[0]), between_slice_covariance(counts, sums),
                                 self._params["reg"], k)
        return (A,)

    def _final(self, h, norms, sample):
        (u,) = h
        labels = self.slicer_.assign(sample[:, self._columns()[1]])
        counts, sums = slice_sums(u, labels, self.slicer_.n_slices)
        vals, A = sliced_directions(u.T @ u / len(u) + self._params["reg"] * norms[0],
                                    between_slice_covariance(counts, sums), 0.0, u.shape[1])
        self.eigenvalues_ = vals
        return (A,)

    def _restore_values(self, arrays: dict) -> None:
        self.eigenvalues_ = arrays["eigenvalues"]

    def _extra_payload(self) -> dict:
        s = self.slicer_
        return {"slicer": {"kind": s.kind, "n_slices": s.n_slices, "n_outputs": s.n_outputs}}

    def _values_payload(self) -> dict:
        out = {"eigenvalues": self.eigenvalues_}
        for name in ("values", "edges", "centroids", "mean", "scale"):
            if getattr(self.slicer_, name) is not None:
                out["slicer_" + name] = getattr(self.slicer_, name)
        return out

    def _restore_extra(self, fitted: dict, arrays: dict) -> None:
        fields = {name: arrays.get("slicer_" + name) for name in ("values", "edges", "centroids", "mean", "scale")}
        self.slicer_ = Slicer(**fitted["slicer"], **fields)
