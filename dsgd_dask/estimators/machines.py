"""Doubly stochastic kernel machines: KernelRidge, KernelSVC, KernelLogisticRegression.

One base on the shared step engine (the rule :class:`~dsgd_dask.rules.machines.MachineRule`
with a loss): the same features, streams, checkpoints and saved models as the component
estimators. Targets travel with the rows (stacked as the last columns of every chunk);
class labels are encoded as codes before, so any label type works.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import dask.array as da
import numpy as np
from scipy.special import expit, softmax
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._threads import one_blas_thread
from dsgd_dask._validation import check_choice, check_float
from dsgd_dask.engine.distributed import active_client
from dsgd_dask.engine.passes import full_pass
from dsgd_dask.engine.ridge import (
    BlockJacobi,
    CGState,
    LandmarkPreconditioner,
    RKHSPenalty,
    precision_ridge,
    ridge_pass,
)
from dsgd_dask.engine.steps import StepState
from dsgd_dask.estimators._steps import model_fingerprint, register
from dsgd_dask.estimators.components import ComponentStepEstimator
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.progress import pass_bar
from dsgd_dask.rules.machines import MachineRule
from dsgd_dask.streams.inputs import numeric_array
from dsgd_dask.transform.lazy import apply_rows

#: A step whose functions reach a mean square above this many times ``max(1, E[y^2])``
#: (regression) or this bound (classification, margins of order 1) counts as diverged.
MACHINE_GUARD = 1e4
#: ``max_iter="auto"`` of ``solver="cg"``: passes of conjugate gradients after the first.
CG_MAX_PASSES = 100
#: ``preconditioner="auto"`` of ``solver="cg"`` takes the landmark preconditioner for Nyström
#: features of more than one block and at most this many features (its Cholesky factor is
#: ``M^2`` float64: 2 GiB at 16384 features, 8 GiB at 32768).
LANDMARK_MAX_FEATURES = 32768
#: Rows of the sample whose raw features' mean shifts the passes' sums (float32 accuracy).
N_SHIFT = 2000
#: ``eta_decay="auto"`` without a regulariser (no strong convexity): the schedule of the component rules.
AUTO_DECAY_UNREGULARISED = 0.01


@dataclass(frozen=True)
class Identity:
    """Regression targets: the target columns as they are."""

    def __call__(self, cols: np.ndarray) -> np.ndarray:
        return cols


@dataclass(frozen=True)
class Signs:
    """Class codes to ``{-1, +1}``: one column for two classes, one-vs-rest columns otherwise."""

    n_classes: int

    def __call__(self, cols: np.ndarray) -> np.ndarray:
        codes = cols[:, 0].astype(np.int64)
        if self.n_classes == 2:
            return np.where(codes == 1, 1.0, -1.0)[:, None]
        out = -np.ones((len(codes), self.n_classes))
        out[np.arange(len(codes)), codes] = 1.0
        return out


@dataclass(frozen=True)
class Codes:
    """Class codes as integers (softmax)."""

    def __call__(self, cols: np.ndarray) -> np.ndarray:
        return cols[:, 0].astype(np.int64)


_MACHINE_PARAMS = """\
    alpha : float, default=1e-4
        The RKHS regulariser ``nu`` of ``E[l(f(x), y)] + nu/2 ||f||^2``, in units of the
        kernel (scikit-learn's ``KernelRidge(alpha=a)`` on ``n`` rows is ``nu = a / n``).
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
    bandwidth : "median" or float, default="median"
    kernel_params : dict, optional
    features : {"nystroem", "fourier"}, default="nystroem"
        Nyström blocks (seeded landmark rows, whitened per block) or random Fourier blocks.
    n_features : int or "auto", default="auto"
        Feature budget (``"auto"``: ``min(4096, max(1024, 2 n))``), grown by one block per
        step, then revisited in turn.
    block_size : int or "auto", default="auto"
        1024 for Nyström blocks, 256 for Fourier blocks.
    batch_size : int, default=256
    max_iter : int or "auto", default="auto"
        Steps; ``"auto"``: ten passes over the data, between 500 and 5000 steps.
    shuffle_chunks, n_partitions : int, default=1
        As for :class:`~dsgd_dask.KernelPCA`.
    eta0 : float, default=0.5
        ``theta_0`` of the step ``eta_t = theta_0 / (L (1 + theta_1 t))``, relative to the
        curvature ``L`` of the loss (the top eigenvalue of the first block's second moment
        on a sample, times the loss's curvature bound, plus ``alpha``), so that the default
        works on any data scale.
    eta_decay : float or "auto", default="auto"
        ``theta_1``; ``"auto"``: ``theta_0 alpha / L``, which makes the step
        ``1 / (alpha (t + t_0))``, the schedule of strongly convex stochastic gradient
        descent (0.01 when ``alpha = 0``).
    compute_dtype, cache_bytes, checkpoint, checkpoint_every, verbose, random_state
        As for :class:`~dsgd_dask.KernelCCA`."""


class _KernelMachine(ComponentStepEstimator):
    _views = ("X",)
    _y_is_target = True
    _centred = False
    _auto_decay = True
    _loss = "squared"
    #: Bound of the loss's second derivative (squared 1, logistic 1/4, softmax 1/2, hinge: none, 1).
    _loss_curvature = 1.0

    def __init__(self, alpha=1e-4, *, kernel="gaussian", bandwidth="median", kernel_params=None,
                 features="nystroem", n_features="auto", block_size="auto", batch_size=256, max_iter="auto",
                 shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay="auto", compute_dtype="float32",
                 cache_bytes=None, checkpoint=None, checkpoint_every=100, verbose=False, random_state=None):
        self.alpha = alpha
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
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

    # -- the engine's hooks ----------------------------------------------------------------
    def _check_params(self, n_samples: int) -> dict:
        p = self._check_common(n_samples, k=self._n_outputs)
        p["alpha"] = check_float(self.alpha, "alpha", strict=False)
        return p

    def _eta_decay(self, lam: float) -> float:
        # eta_t = theta_0 / (L (1 + theta_1 t)) with theta_1 = theta_0 nu / L is 1 / (nu (t + t_0)):
        # the step of strongly convex stochastic gradient descent (Pegasos; Bottou's schedule),
        # starting at theta_0 / L
        p = self._params
        if self.eta_decay != "auto":
            return p["eta_decay"]
        return p["eta0"] * p["alpha"] / self._curvature(lam) if p["alpha"] > 0 else AUTO_DECAY_UNREGULARISED

    def _curvature(self, lam: float) -> float:
        return self._loss_curvature * lam + self._params["alpha"]

    def _guard_limit(self, lam: float, sample: np.ndarray) -> float:
        return MACHINE_GUARD

    def _make_rule(self, columns, guard_limit: float):
        return MachineRule(columns, guard_limit, self._loss, self._params["alpha"], self._encoder())

    def _initial(self, z, sample, k):
        return (np.zeros((z[0].shape[1], k)),)

    def _finish(self, sample: np.ndarray) -> None:
        model = KernelExpansion(self._features[0], self.state_.coef[0])
        model.token = model_fingerprint(model)
        self.models_ = (model,)
        self.n_features_ = model.coef.shape[0]

    @property
    def model_(self):
        return self.models_[0]

    # -- targets ---------------------------------------------------------------------------
    def fit(self, X, y, *, callback=None):
        """Fit the machine by doubly stochastic steps over the rows of ``(X, y)``.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d)
        y : array-like, dask array, Zarr array or DataArray of shape (n_samples,) (or (n_samples, c) for ridge)
            Row-aligned with ``X``.
        callback : callable, optional
            ``callback(n_steps, model)`` with the current expansion after every chunk of steps.

        Returns
        -------
        self
        """
        return self._fit(X, y, callback=callback)

    def _checked_target(self, y):
        """``y``'s values (numpy or dask) after the checks every target shares."""
        values = _target_values(y)
        if values.dtype.kind == "c":
            raise ValueError(f"Complex data not supported: y has dtype {values.dtype}")
        if values.dtype.kind == "O" and not isinstance(values, da.Array):
            values = numeric_array(values, "y") if self._numeric_target else values.astype(str)
        return values

    def partial_fit(self, X, y, classes=None):
        """One pass of steps over ``(X, y)`` as the next batch of a stream (the first call initialises).

        Parameters
        ----------
        X, y : as for :meth:`fit`
        classes : array-like, optional
            Classifiers: every class of the stream, required on the first call.

        Returns
        -------
        self
        """
        first = not hasattr(self, "state_")
        if first and classes is None and isinstance(self, ClassifierMixin):
            raise ValueError("classes must be passed on the first call to partial_fit: every class of the "
                             "stream, as scikit-learn's incremental classifiers need")
        return self._partial_fit(X, y, classes=classes)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


def _ravel_single(out):
    """Drop the output axis of a single-output result (numpy, dask or DataArray)."""
    if out.shape[1] != 1:
        return out
    if hasattr(out, "dims"):
        return out.isel({out.dims[1]: 0}, drop=True)
    return out[:, 0]


def _target_values(y):
    """``y`` as numpy or dask values (a DataArray's data, a Zarr path opened), for label checks."""
    import xarray as xr

    from dsgd_dask.streams.inputs import _is_zarr_array, open_zarr_path

    if isinstance(y, str):
        y = open_zarr_path(y, "y")
    if isinstance(y, xr.DataArray):
        y = y.data
    if _is_zarr_array(y):
        y = da.from_zarr(y)
    return y if isinstance(y, da.Array) else np.asarray(y)


@register
class KernelRidge(RegressorMixin, _KernelMachine):
    __doc__ = f"""Kernel ridge regression by doubly stochastic gradients (squared loss; multi-output ``y``).

    Minimises ``E[(f(x) - y)^2] / 2 + alpha/2 ||f||^2`` over ``f = sum_j z_j(x) A_j``. With
    ``solver="sgd"`` (Dai et al. 2014) each step on a mini-batch shrinks every block by
    ``1 - eta alpha`` and adds the functional gradient through one random block. With
    ``solver="cg"`` the feature blocks are fixed and full-data passes solve the normal
    equations by preconditioned conjugate gradients: the first pass gives the right-hand
    side, every later pass one product with the second moment of all the features (a
    reduction over the row chunks, on every worker at once), and the residual falls
    geometrically instead of as ``O(1/t)``. Memory ``O(M c)`` whatever the number of
    rows, plus the preconditioner's (``preconditioner``); inputs stream chunk by chunk.

    The passes on Nyström features penalise the RKHS norm of ``f`` itself,
    ``||z a||_H^2 = a^T W^T K_LL W a`` (``K_LL`` the kernel matrix of all ``M`` landmarks,
    ``W`` the blocks' whitenings): kernel ridge regression on the span of the landmarks,
    the problem of Nyström with ``M`` landmarks (FALKON's), whatever the blocks; with every
    row a landmark, kernel ridge regression itself. A precision ridge of ``100 eps^2
    E|r|^2`` on the coefficients of the kernel sections ``r`` keeps the solver from
    fitting the features' round-off where the blocks are redundant. The steps, and the
    passes on Fourier features, penalise ``J |A|^2`` (``J`` blocks, each approximating
    the kernel).

    Parameters
    ----------
    solver : {{"sgd", "cg"}}, default="sgd"
        Doubly stochastic steps, or full-data passes of preconditioned conjugate gradients
        (``max_iter`` then counts passes after the first, ``"auto"``: {CG_MAX_PASSES}; no
        checkpoints; :meth:`partial_fit` always takes steps).
    tol : float, default=1e-6
        ``solver="cg"``: stop once every output's residual ``|b - (E[z z^T] + alpha P) a|``
        (``P`` the penalty's matrix, above) is below ``tol |b|``.
    preconditioner : {{"auto", "block", "landmarks"}}, default="auto"
        ``solver="cg"``: the approximation of ``E[z z^T] + alpha P`` whose inverse
        preconditions the passes.

        - ``"block"``: block-Jacobi, each feature block's own second moment, gathered in
          the first pass (``M m`` floats). Blind to the redundancy between Nyström blocks
          (each approximates the same kernel): the more blocks, the slower.
        - ``"landmarks"`` (Nyström features only): after FALKON, the second moment of the
          features over their own ``M`` landmark rows, ``W^T K_LL^2 W / M`` (the landmarks
          are rows drawn from the data, ``K_LL`` their kernel matrix, ``W`` the blocks'
          whitenings), which couples the blocks; factorised once by Cholesky, without a
          data pass. ``M^2`` float64 of memory (2 GiB at ``M = 16384``), plus the
          penalty's ``M^2`` in the features' precision (1 GiB in float32), and
          ``O(M^3)`` time once (``1.4 M^3`` flops: a few minutes at ``M = 16384`` on one
          core), whatever the number of rows. (With ``"block"`` the penalty's products
          regenerate the landmarks' kernel rows instead: ``M^2 d`` flops a pass.)
        - ``"auto"``: ``"landmarks"`` for Nyström features of more than one block and at
          most {LANDMARK_MAX_FEATURES} features, else ``"block"`` (one block: block-Jacobi
          is the exact system matrix).

        The preconditioner is computed in the client process, so a fit on a cluster
        equals the local fit; it changes the path, not the solution.
{_MACHINE_PARAMS}

    Attributes
    ----------
    model_ : KernelExpansion
        The fitted function(s).
    n_features_ : int
    n_iter_ : int
        Steps, or passes after the first (``"cg"``).
    convergence_ : list of dict
        ``solver="cg"``: the relative residual after each pass.
    preconditioner_ : str
        ``solver="cg"``: the preconditioner used, ``"block"`` or ``"landmarks"``.
    bandwidth_ : float
    seed_ : int
    n_features_in_ : int

    References
    ----------
    B. Dai, B. Xie, N. He, Y. Liang, A. Raj, M.-F. Balcan, L. Song, "Scalable kernel methods
    via doubly stochastic gradients", NIPS 2014.

    A. Rudi, L. Carratino, L. Rosasco, "FALKON: An optimal large scale kernel method",
    NIPS 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(1000, 1)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=1000)
    >>> reg = KernelRidge(alpha=1e-3, n_features=512, random_state=0).fit(X, y)
    >>> bool(reg.score(X, y) > 0.9)
    True
    >>> passes = KernelRidge(alpha=1e-3, solver="cg", n_features=512, random_state=0).fit(X, y)
    >>> bool(passes.score(X, y) > 0.9), passes.convergence_[-1]["relative_residual"] <= 1e-6
    (True, True)
    """

    _numeric_target = True

    def __init__(self, alpha=1e-4, *, solver="sgd", tol=1e-6, preconditioner="auto", kernel="gaussian",
                 bandwidth="median", kernel_params=None, features="nystroem", n_features="auto", block_size="auto",
                 batch_size=256, max_iter="auto", shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay="auto",
                 compute_dtype="float32", cache_bytes=None, checkpoint=None, checkpoint_every=100, verbose=False,
                 random_state=None):
        super().__init__(alpha, kernel=kernel, bandwidth=bandwidth, kernel_params=kernel_params, features=features,
                         n_features=n_features, block_size=block_size, batch_size=batch_size, max_iter=max_iter,
                         shuffle_chunks=shuffle_chunks, n_partitions=n_partitions, eta0=eta0, eta_decay=eta_decay,
                         compute_dtype=compute_dtype, cache_bytes=cache_bytes, checkpoint=checkpoint,
                         checkpoint_every=checkpoint_every, verbose=verbose, random_state=random_state)
        self.solver = solver
        self.tol = tol
        self.preconditioner = preconditioner

    def _check_params(self, n_samples: int) -> dict:
        solver = check_choice(self.solver, "solver", ("sgd", "cg"))
        tol = check_float(self.tol, "tol", strict=False)
        pre = check_choice(self.preconditioner, "preconditioner", ("auto", "block", "landmarks"))
        p = super()._check_params(n_samples)
        if pre == "landmarks" and p["features"] != "nystroem":
            raise ValueError(f"preconditioner='landmarks' needs Nyström features (features='nystroem'), "
                             f"got features={p['features']!r}; use preconditioner='block' or 'auto'")
        if pre == "auto":
            M = p["n_blocks"] * p["block_size"]
            landmarks = p["features"] == "nystroem" and p["n_blocks"] > 1 and M <= LANDMARK_MAX_FEATURES
            pre = "landmarks" if landmarks else "block"
        if solver == "cg" and self.max_iter == "auto":
            p["max_iter"] = CG_MAX_PASSES
        return {**p, "solver": solver, "tol": tol, "preconditioner": pre}

    def fit(self, X, y, *, callback=None):
        """Fit the ridge by doubly stochastic steps (``solver="sgd"``) or by full-data passes (``"cg"``).

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d)
        y : array-like, dask array, Zarr array or DataArray of shape (n_samples,) or (n_samples, c)
            Row-aligned with ``X``.
        callback : callable, optional
            ``callback(n, model)`` with the current expansion after every chunk of steps
            (``n`` steps) or every pass (``n`` passes).

        Returns
        -------
        self
        """
        if self.solver != "cg":
            return self._fit(X, y, callback=callback)
        vx, _, view = self._validate_pair(X, y, reset=True)
        if self.checkpoint is not None:
            raise ValueError("checkpoint is supported with solver='sgd'; a solver='cg' fit is a few passes "
                             "over the data")
        with one_blas_thread():
            self._initialise(view)
            self._solve_by_passes(vx, view, callback)
            self._finish(self._sample)
        del self._sample
        return self

    def _solve_by_passes(self, vx, view, callback) -> None:
        p = self._params
        J = p["n_blocks"]
        features = self._features[0]
        x_cols, y_cols = self._columns()
        landmarks = p["preconditioner"] == "landmarks"
        client = active_client() if view.is_dask else None
        ref = client.scatter(features, broadcast=True, hash=False) if client is not None else None
        token = model_fingerprint(KernelExpansion(features, self.state_.coef[0]))
        sums = ridge_pass(view, features, J, x_cols, y_cols, token=token, features_ref=ref, with_blocks=not landmarks)
        # both from the features and the pass's reduced sums, in this process: the same on any scheduler
        raw = features.raw_transform(self._sample[:N_SHIFT, x_cols], 0, J)
        shift = raw.mean(axis=0, dtype=np.float64)
        if p["features"] == "nystroem":
            # the RKHS norm of f itself: Nyström kernel ridge on all M landmarks
            ridge = precision_ridge(raw, features.dtype, centre=False)
            if landmarks:
                precondition = LandmarkPreconditioner(features, J, p["alpha"], rkhs=True, ridge=ridge)
                # the same system as block-Jacobi's: the factor's floor stays in the preconditioner
                penalty = RKHSPenalty(features, J, p["alpha"], ridge, gram=precondition.gram)
            else:
                penalty = RKHSPenalty(features, J, p["alpha"], ridge)
                precondition = BlockJacobi(sums.blocks, 0.0, penalty.block_diagonal())
        else:
            # J blocks each approximate the kernel: |f|^2 = J |A|^2 (see _norms)
            precondition = BlockJacobi(sums.blocks, p["alpha"] * J)

            def penalty(P, ridge=p["alpha"] * J):
                return ridge * P
        self.preconditioner_ = p["preconditioner"]
        del raw
        cg = CGState.start(sums.cross, precondition)
        self.convergence_ = [{"pass": 1, "relative_residual": cg.relative_residual(sums.cross)}]
        passes = 0
        bar = pass_bar(p["max_iter"]) if self.verbose else nullcontext()
        with bar as progress:
            while passes < p["max_iter"] and self.convergence_[-1]["relative_residual"] > p["tol"]:
                Ap = full_pass(vx, features, J, cg.p, shift, False, token=token, features_ref=ref).cov_times
                cg.advance(Ap + penalty(cg.p), precondition)
                passes += 1
                res = cg.relative_residual(sums.cross)
                self.convergence_.append({"pass": passes + 1, "relative_residual": res})
                if progress is not None:
                    progress(passes, None, None, relative_residual=res)
                if callback is not None:
                    callback(passes, KernelExpansion(features, cg.x))
        del ref
        self.state_ = StepState((cg.x,), 0, self.state_.eta_scale)
        self.n_iter_ = passes
        self.n_passes_ = passes + 1

    def _target(self, y, first: bool, classes=None):
        values = self._checked_target(y)
        if values.ndim not in (1, 2):
            raise ValueError(f"y must be 1-D or 2-D, got shape {values.shape}")
        if values.dtype.kind not in "biuf":
            raise TypeError(f"y must be numeric for regression, got dtype {values.dtype}")
        if first:
            self._y_1d = values.ndim == 1
        return y  # the number of outputs is checked with the view, as the columns of X

    @property
    def _n_outputs(self) -> int:
        return self.n_features_in_y_

    def _encoder(self):
        return Identity()

    def _guard_limit(self, lam: float, sample: np.ndarray) -> float:
        y = sample[:, self._columns()[1]]
        return MACHINE_GUARD * max(1.0, float((y * y).sum(axis=1).mean()))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    def predict(self, X):
        """Predictions ``f(X)``: ``(n,)`` for a 1-D ``y`` in fit, else ``(n, c)``; lazy on lazy input."""
        check_is_fitted(self, "models_")
        out = self._transform_view(0, X, "prediction")
        return _ravel_single(out) if self._y_1d else out

    def _extra_payload(self) -> dict:
        return {"y_1d": self._y_1d}

    def _restore_extra(self, fitted: dict, arrays: dict) -> None:
        self._y_1d = fitted["y_1d"]


class _KernelClassifier(ClassifierMixin, _KernelMachine):
    _numeric_target = False

    def _target(self, y, first: bool, classes=None):
        values = self._checked_target(y)
        if values.ndim == 2 and values.shape[1] == 1:
            warnings.warn("A column-vector y was passed when a 1d array was expected. Please change the shape of "
                          "y to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=3)
            values = values[:, 0]
        if values.ndim != 1:
            raise ValueError(f"y must be 1-D class labels, got shape {values.shape}")
        seen = np.unique(da.unique(values).compute() if isinstance(values, da.Array) else values)
        if values.dtype.kind == "f" and not np.isfinite(seen).all():
            raise ValueError("y contains NaN or infinity; every row needs a class label")
        if first:
            given = np.unique(np.asarray(classes)) if classes is not None else seen
            kind = type_of_target(seen if isinstance(values, da.Array) else values)
            if kind not in ("binary", "multiclass"):
                raise ValueError(f"Unknown label type: {kind}; {type(self).__name__} needs class labels "
                                 "(use KernelRidge for a continuous target)")
            if len(given) < 2:
                raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                                 f"but the data contain only one class: {given[0]!r}")
            self.classes_ = given
            self._n_outputs = self._outputs(len(given))
        unseen = np.setdiff1d(seen, self.classes_)
        if len(unseen):
            raise ValueError(f"y contains classes {unseen.tolist()} not in classes_ {self.classes_.tolist()}")
        if isinstance(values, da.Array):
            return values.map_blocks(partial(np.searchsorted, self.classes_), dtype=np.intp).astype(np.float64)
        return np.searchsorted(self.classes_, values).astype(np.float64)

    def decision_function(self, X):
        """``f(X)``: the machine's outputs (one column for binary classifiers, raveled).

        Lazy for dask and dask-backed xarray inputs (one task per row chunk, the model one
        key of the graph).
        """
        check_is_fitted(self, "models_")
        out = self._transform_view(0, X, "decision")
        return _ravel_single(out)

    def _outputs(self, n_classes: int) -> int:
        return 1 if n_classes == 2 else n_classes

    def _encoder(self):
        return Signs(len(self.classes_))

    def predict(self, X):
        """The class of every row of ``X`` (lazy on lazy input)."""
        scores = self.decision_function(X)
        classes = self.classes_

        def label(block):
            block = np.asarray(block)
            codes = (block > 0).astype(np.int64) if block.ndim == 1 else block.argmax(axis=1)
            return classes[codes]

        labelled = hasattr(scores, "dims")  # a DataArray: keep the sample coordinates
        data = scores.data if labelled else scores
        if isinstance(data, da.Array):
            out = data.map_blocks(label, drop_axis=1 if data.ndim == 2 else (), dtype=classes.dtype)
        else:
            out = label(data)
        if not labelled:
            return out
        sample_only = scores.isel({scores.dims[1]: 0}, drop=True) if scores.ndim == 2 else scores
        return sample_only.copy(data=out)

    def _values_payload(self) -> dict:
        # numbers as an array; other labels (strings) in the attributes, as JSON: Zarr v3 has
        # no stable specification of fixed-length strings
        return {"classes": self.classes_} if self.classes_.dtype.kind in "biuf" else {}

    def _restore_values(self, arrays: dict) -> None:
        if "classes" in arrays:
            self.classes_ = arrays["classes"]

    def _extra_payload(self) -> dict:
        extra = {"n_outputs": self._n_outputs}
        if self.classes_.dtype.kind not in "biuf":
            extra.update(class_labels=self.classes_.tolist(), class_dtype=self.classes_.dtype.str)
        return extra

    def _restore_extra(self, fitted: dict, arrays: dict) -> None:
        self._n_outputs = fitted["n_outputs"]
        if "class_labels" in fitted:
            self.classes_ = np.array(fitted["class_labels"], dtype=fitted["class_dtype"])


@register
class KernelSVC(_KernelClassifier):
    __doc__ = f"""Kernel support vector classification by doubly stochastic gradients (hinge loss).

    Binary problems fit one function with the hinge loss on labels ``{{-1, +1}}``;
    ``c > 2`` classes fit ``c`` one-vs-rest functions in one pass, sharing the features.

    Parameters
    ----------
{_MACHINE_PARAMS}

    Attributes
    ----------
    classes_ : ndarray
    model_ : KernelExpansion
    n_features_, n_iter_, bandwidth_, seed_, n_features_in_

    References
    ----------
    B. Dai et al., "Scalable kernel methods via doubly stochastic gradients", NIPS 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelSVC
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2)); y = (X[:, 0] ** 2 + X[:, 1] ** 2 > 1.4).astype(int)
    >>> svc = KernelSVC(n_features=512, random_state=0).fit(X, y)
    >>> bool(svc.score(X, y) > 0.9)
    True
    """

    _loss = "hinge"


@register
class KernelLogisticRegression(_KernelClassifier):
    __doc__ = f"""Kernel logistic regression by doubly stochastic gradients (binary; multinomial softmax).

    Parameters
    ----------
{_MACHINE_PARAMS}

    Attributes
    ----------
    classes_ : ndarray
    model_ : KernelExpansion
    n_features_, n_iter_, bandwidth_, seed_, n_features_in_

    References
    ----------
    B. Dai et al., "Scalable kernel methods via doubly stochastic gradients", NIPS 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelLogisticRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2)); y = np.where(X[:, 0] * X[:, 1] > 0, "same", "opposite")
    >>> clf = KernelLogisticRegression(n_features=512, random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 2)
    """

    @property
    def _loss(self):
        return "logistic" if len(self.classes_) == 2 else "softmax"

    @property
    def _loss_curvature(self):
        return 0.25 if len(self.classes_) == 2 else 0.5

    def _encoder(self):
        return Signs(2) if len(self.classes_) == 2 else Codes()

    def predict_proba(self, X):
        """Class probabilities ``(n, n_classes)``, columns in the order of ``classes_`` (lazy on lazy input)."""
        check_is_fitted(self, "models_")
        model = self.models_[0]
        binary = len(self.classes_) == 2

        def proba(rows):
            f = model.evaluate(rows)
            if binary:
                p = expit(f[:, 0])
                return np.column_stack([1.0 - p, p])
            return softmax(f, axis=1)

        view = self._validate_input(X, reset=False)
        return apply_rows(view, proba, len(self.classes_), model.token, "kernellogisticregression-proba",
                          out_dim="class")
