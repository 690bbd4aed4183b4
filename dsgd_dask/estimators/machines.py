"""Kernel machines: KernelRidge, KernelSVC, KernelLogisticRegression.

One base on the shared step engine (the rule :class:`~dsgd_dask.rules.machines.MachineRule`
with a loss): the same features, streams, checkpoints and saved models as the component
estimators. Targets travel with the rows (stacked as the last columns of every chunk);
class labels are encoded as codes before, so any label type works. Kernel ridge
regression also has full-data passes of conjugate gradients (``solver="cg"``,
:mod:`dsgd_dask.engine.ridge`) and the dense ``n x n`` solve (``solver="exact"``), all
three minimising the same objective.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import dask
import dask.array as da
import numpy as np
from scipy.linalg import LinAlgWarning, cho_factor, cho_solve, lstsq
from scipy.special import expit, softmax
from sklearn.base import ClassifierMixin, RegressorMixin, _fit_context
from sklearn.exceptions import DataConversionWarning
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.baselines._dense import MAX_SAMPLES, materialise
from dsgd_dask.engine.driver import run_passes
from dsgd_dask.engine.ridge import (
    AUTO_ALPHA_DECADES,
    AUTO_HELD_OUT,
    CGSolver,
    LeaveOneOutPath,
    feature_path,
    held_out_split,
    precision_ridge,
    search_alpha,
)
from dsgd_dask.engine.steps import StepConfig, StepState
from dsgd_dask.estimators._atomic import atomic_fit
from dsgd_dask.estimators._auto import JITTER_GRID, MIN_ROWS, held_out_jitter
from dsgd_dask.estimators._base import accepts_storage_options, kernel_spec
from dsgd_dask.estimators._constraints import (
    ALPHA,
    AUTO,
    COUNT,
    KERNEL,
    NON_NEGATIVE,
    STEP_PRECONDITIONER,
    STEPS,
    solver_constraint,
)
from dsgd_dask.estimators._solvers import Clock, check_partial_fit, check_solver, record
from dsgd_dask.estimators._steps import model_fingerprint, register
from dsgd_dask.estimators.components import JOINT_STEPS_MAX_FEATURES, N_SAMPLE, ComponentStepEstimator, sections
from dsgd_dask.features.kernels import kernel_matrix
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.rules.machines import BLOCK_JITTER, MachineRule
from dsgd_dask.streams.batches import sample_rows
from dsgd_dask.streams.inputs import numeric_array
from dsgd_dask.transform.lazy import apply_rows

#: A step whose functions reach a mean square above this many times ``max(1, E[y^2])``
#: (regression) or this bound (classification, margins of order 1) counts as diverged.
MACHINE_GUARD = 1e4
#: ``max_iter="auto"`` of ``solver="cg"``: full passes, the first (the right-hand side)
#: and 100 of conjugate gradients.
CG_MAX_PASSES = 101
#: ``solver="exact"`` forms the ``n x n`` float64 kernel matrix: at most this many rows
#: (3.2 GB of matrix at 20,000).
EXACT_MAX_SAMPLES = MAX_SAMPLES
#: ``preconditioner="auto"`` of ``solver="cg"`` takes the landmark preconditioner for Nyström
#: features of more than one block and at most this many features (its Cholesky factor is
#: ``M^2`` float64: 2 GiB at 16384 features, 8 GiB at 32768).
LANDMARK_MAX_FEATURES = 32768
#: ``KernelRidge(alpha="auto")``: the value :meth:`~KernelRidge.partial_fit` keeps (a stream is
#: not held out; the former default).
STREAM_ALPHA = 1e-4
#: ``KernelRidge(solver="auto")`` in :meth:`~KernelRidge.fit`: the dense solve up to this many
#: rows (a 512 MiB float64 kernel matrix), the passes beyond (or with Fourier features).
AUTO_EXACT_ROWS = 8192
#: ``KernelRidge(alpha="auto", solver="exact")``: at most this many sample rows are scored by
#: leave-one-out (one ``n x n`` eigendecomposition).
EXACT_AUTO_ROWS = 4096
#: Rows of the sample whose raw features' mean shifts the passes' sums (float32 accuracy).
N_SHIFT = 2000
#: ``eta_decay="auto"`` without a regulariser (no strong convexity): the schedule of the component rules.
AUTO_DECAY_UNREGULARISED = 0.01
#: ``eta_decay="auto"`` of block-preconditioned steps: Dai et al.'s ``eta_t = 1 / (1 + 1e-4 t)``.
AUTO_DECAY_PRECONDITIONED = 1e-4
#: The classifiers' defaults (``preconditioner="auto"``, Dai et al.'s recipe): batches of
#: ``RECIPE_BATCH`` rows (at most the data), blocks of a power of two at most half the batch
#: (between ``RECIPE_MIN_BLOCK`` and ``RECIPE_MAX_BLOCK`` features), a new block at every
#: step, and ``RECIPE_EPOCHS`` passes over the rows in steps, between ``RECIPE_MIN_STEPS``
#: and ``RECIPE_MAX_STEPS`` (step ``t`` regenerates ``t`` blocks, so the fit costs the
#: square of the steps): 8,192 rows, 4,096 features, 59 steps on 60,000 rows.
RECIPE_BATCH = 8192
RECIPE_MIN_BLOCK, RECIPE_MAX_BLOCK = 16, 4096
RECIPE_EPOCHS = 8
RECIPE_MIN_STEPS, RECIPE_MAX_STEPS = 16, 128
#: ``batch_size="auto"`` of plain steps (``preconditioner=None``).
PLAIN_BATCH = 256


@dataclass(frozen=True)
class Identity:
    """Regression targets: the target columns as they are."""

    def __call__(self, cols: np.ndarray) -> np.ndarray:
        return cols


@dataclass(frozen=True)
class Shifted:
    """Regression targets less the intercept: the target columns minus ``shift`` (one value per column)."""

    shift: tuple

    def __call__(self, cols: np.ndarray) -> np.ndarray:
        return np.asarray(cols, dtype=np.float64) - np.asarray(self.shift, dtype=np.float64)


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
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
    bandwidth : "median" or float, default="median"
    kernel_params : dict, optional
    features : {"auto", "nystroem", "fourier", "fourier_pairs"}, default="auto" ("nystroem" for KernelRidge)
        Nyström blocks (seeded landmark rows), random Fourier blocks (``cos`` with a random
        phase) or ``[cos, sin]`` pairs of each frequency
        (:class:`~dsgd_dask.features.FourierPairs`, the features of Dai et al.'s code).
        ``"auto"`` (the classifiers): ``"fourier"`` with the block preconditioner,
        ``"nystroem"`` with the plain steps.
    n_features : int or "auto", default="auto"
        Feature budget, met exactly (``n_features_``): an integer that cannot be met (not a
        multiple of an integer ``block_size``, or more Nyström landmarks than rows) is
        refused with a ``ValueError`` naming valid values. ``"auto"``:
        ``min(4096, max(1024, 2 n))`` in whole blocks (Nyström: at most the ``n`` rows);
        with the block preconditioner, ``max_iter`` blocks (a new one at every step), at
        most 128.
        The steps add one block per step, then revisit the blocks in turn; blocks not yet
        reached when the steps stop are in the model at zero. At most ``2**24``, as for
        :class:`~dsgd_dask.KernelPCA`.
    block_size : int or "auto", default="auto"
        1024 for Nyström blocks, 256 for Fourier blocks; with an integer ``n_features``,
        the fewest equal blocks of half that size to that size. With the block
        preconditioner: the largest power of two at most half the batch (at most the
        rows), between 16 and 4096.
    batch_size : int or "auto", default="auto" (256 for KernelRidge)
        Rows of a step (at most the rows of a slab of ``shuffle_chunks`` dask chunks).
        ``"auto"``: 8192 with the block preconditioner, 256 otherwise.
    max_iter : int or "auto", default="auto"
        Steps; ``"auto"``: ten passes over the data, between 500 and 5000 steps; with the
        block preconditioner, one step per block of an integer ``n_features``, else eight
        passes over the rows between 16 and 128 steps (step ``t`` regenerates ``t``
        blocks: the fit's cost grows as the square of the steps).
    shuffle_chunks, n_partitions : int, default=1
        As for :class:`~dsgd_dask.KernelPCA`.
    eta0 : float, default=0.5
        ``theta_0`` of the step ``eta_t = theta_0 / (L (1 + theta_1 t))``, relative to the
        curvature ``L`` of the loss (the top eigenvalue of the first block's second moment
        on a sample, times the loss's curvature bound, plus ``alpha``), so that the default
        works on any data scale. Block-preconditioned steps (``preconditioner="block"``)
        have a unit second moment in place of the eigenvalue: ``L`` is the loss's
        curvature bound plus ``alpha`` (1 squared and hinge, 1/4 logistic, 1/2 softmax),
        so the default ``eta0`` gives softmax steps Dai et al.'s ``theta_0 = 1``.
    eta_decay : float or "auto", default="auto"
        ``theta_1``; ``"auto"``: ``theta_0 alpha / L``, which makes the step
        ``1 / (alpha (t + t_0))``, the schedule of strongly convex stochastic gradient
        descent (0.01 when ``alpha = 0``); with ``preconditioner="block"``, ``1e-4``
        whatever ``alpha`` (Dai et al.'s ``eta_t = 1 / (1 + 1e-4 t)`` for softmax).
    average : bool or int, default=False
        The model is made of the mean of the steps' iterates, not of the last one, from
        the step given as for :class:`~dsgd_dask.KernelCCA` (``True``: every step; an
        integer: rows seen; ``False``: the last iterate). With ``preconditioner="block"``
        every step fits a new block, which the mean then weighs by the share of the
        averaged steps taken since it was added: start the mean late, if at all.
    compute_dtype, cache_bytes, checkpoint, checkpoint_every, verbose, random_state
        As for :class:`~dsgd_dask.KernelCCA`."""

_CLASSIFIER_ALPHA = """\
    alpha : float, default=1e-4
        The regulariser ``nu`` of ``E[l(f(x), y)] + nu/2 ||f||^2``: the mean loss over the
        rows plus the squared RKHS norm of ``f``. scikit-learn's ``SVC(C=C)`` and
        ``LogisticRegression(C=C)`` on the kernel minimise ``n C`` times it at
        ``alpha = 1 / (C n)`` (``n`` rows). The norm is that of the kernel the feature
        blocks represent, their average: for Fourier blocks (each an unbiased
        approximation of the kernel) ``J |A|^2`` with ``J`` blocks; for Nyström blocks,
        each whitened on its own, the average of their ``J`` Nyström kernels (the kernel
        itself on the landmarks' span when there is one block). A number only, no
        ``"auto"``: the steps' error falls as ``O(1 / (alpha t))``, so a regulariser
        scored after a short run of steps is not the one that wins after the whole
        budget (a short run favours a larger ``alpha``), and scoring each value of a grid
        after the whole budget costs one fit per value. :class:`KernelRidge` chooses its
        ``alpha`` from exact ridge solutions on the sample; the logistic and hinge losses
        have no such closed form. Choose it with a grid search (e.g. scikit-learn's
        ``GridSearchCV`` over ``alpha = 1 / (C n)``)."""

_CLASSIFIER_SOLVER = """\
    solver : {"auto", "dsgd"}, default="auto"
        ``"dsgd"``: doubly stochastic gradient steps (Dai et al. 2014), the only solver;
        ``"auto"`` picks it.
    preconditioner : {"auto", None, "block"}, default="auto"
        How a step feeds its block. ``"auto"``: ``"block"``, with the recipe's defaults of
        the other parameters (the user guide's *The defaults*), unless an integer
        ``batch_size`` is below twice an integer ``block_size`` (a block that wide would
        interpolate the batch): then ``None``. ``None``: the functional gradient through the block,
        ``-eta z^T g / B`` on a batch of ``B`` rows (``g`` the loss's gradient in ``f``).
        ``"block"``: Dai et al.'s own code, the gradient multiplied by the inverse of the
        block's second moment on the batch, ``-eta (C + epsilon I)^{-1} z^T g / B`` with
        ``C = z^T z / B`` and ``epsilon = preconditioner_jitter tr(C) / m``: a Newton-like fit of the
        residual by the new block, which takes far fewer steps, each ``O(B m^2 + m^3)``
        (large batches, blocks of a few thousand features; the batch must be several
        times the block, which would interpolate a batch as wide as itself: the paper
        takes 2048 frequencies on batches of 8192 rows, and a batch never spans more
        rows than a chunk of dask input). The steps start with no block and each adds a
        new one while the budget lasts, so with ``n_features = max_iter * block_size`` no
        block is visited twice, as in the paper. ``eta0`` and ``eta_decay`` resolve
        otherwise (below). Memory: the coefficients, ``n_features`` per output, and one
        block's ``m x m`` second moment.
    preconditioner_jitter : float or "auto", default="auto"
        ``preconditioner="block"``: the ridge ``epsilon`` added to the block's second
        moment, relative to its mean eigenvalue ``tr(C) / m``: the regulariser of each
        block's fit of the residual. Dai et al.'s ``1e-7`` on blocks of 8,192 features
        (unit total variance) is ``8.2e-4`` of it. Far smaller values let a block of ``m``
        features on a batch of a few ``m`` rows fit the batch's noise (on the MNIST
        recipe, ``1e-6`` stalls at 1.5 % test error where ``1e-3`` goes on below 1.4 %);
        on noisy labels the best value is far larger. ``"auto"``: chosen in :meth:`fit`
        from ``1e-4`` to ``10`` (two per decade) on the seeded sample of at most
        10,000 rows the fit reads anyway: the first block's least-squares fit of the
        ``{{-1, +1}}`` class codes (the targets, for :class:`KernelRidge`) on its first
        80 %, scored on the last 20 % (:attr:`preconditioner_jitter_`,
        :attr:`jitter_scores_`). It costs one ``m x m`` eigendecomposition and the block's
        moment on the sample, on one core: a few seconds at ``m = 4096``. The first
        :meth:`partial_fit` chooses it on its own rows, then keeps it."""

_STEP_ATTRIBUTES = """\
    solver_ : str
        The solver that ran (``"dsgd"``).
    n_iter_ : int
        Steps taken (what ``max_iter`` bounds; :meth:`partial_fit` adds its steps).
    convergence_ : list of dict
        One record per chunk task of steps: ``iteration`` (steps so far), ``rows`` (rows
        seen), ``seconds`` (since the start of the fit) and ``measure`` (NaN: the steps
        have no stopping test).
    preconditioner_jitter_ : float
        ``preconditioner="block"``: the relative jitter of the fit, given or chosen.
    jitter_grid_, jitter_scores_ : ndarray of shape (11,)
        ``preconditioner_jitter="auto"``: the jitters scored, increasing, and their
        held-out scores (negated mean squared error of the first block's fit; higher is
        better, ties to the larger jitter)."""


class _KernelMachine(ComponentStepEstimator):
    _views = ("X",)
    _y_is_target = True
    _centred = False
    _loss = "squared"
    #: Bound of the loss's second derivative (squared 1, logistic 1/4, softmax 1/2, hinge: none, 1).
    _loss_curvature = 1.0
    #: The classifiers have no other solver: their steps whiten each Nyström block on its own
    #: and penalise the norm under the blocks' average kernel (of ``J`` Nyström kernels).
    _joint_steps = False
    _parameter_constraints: ClassVar[dict] = {**STEPS, **KERNEL, **STEP_PRECONDITIONER, "alpha": NON_NEGATIVE,
                                              "eta_decay": [*NON_NEGATIVE, AUTO],
                                              "features": [StrOptions({"nystroem", "fourier", "fourier_pairs"})]}

    def __init__(self, alpha=1e-4, *, solver="auto", preconditioner="auto", preconditioner_jitter="auto",
                 kernel="gaussian", bandwidth="median", kernel_params=None, features="auto", n_features="auto",
                 block_size="auto", batch_size="auto",
                 max_iter="auto", shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay="auto", average=False,
                 compute_dtype="float32", cache_bytes=None, checkpoint=None, checkpoint_every=100, verbose=False,
                 random_state=None):
        self.alpha = alpha
        self.solver = solver
        self.preconditioner = preconditioner
        self.preconditioner_jitter = preconditioner_jitter
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
        self.average = average
        self.compute_dtype = compute_dtype
        self.cache_bytes = cache_bytes
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.verbose = verbose
        self.random_state = random_state

    # -- the engine's hooks ----------------------------------------------------------------
    def _solver(self) -> str:
        """The solver to run: ``solver`` checked against the table, ``"auto"`` resolved (to ``"dsgd"``)."""
        solver = check_solver(self, self._features_kind())
        return "dsgd" if solver == "auto" else solver

    def _features_kind(self) -> str:
        """``features`` as the fit takes it."""
        return self.features

    def _check_params(self, n_samples: int) -> dict:
        solver = self._solver()
        p = self._check_common(n_samples, k=self._n_outputs)
        p["alpha"] = self._alpha_value()
        p["solver"] = solver
        p["whitening"] = self._steps_whitening(p)
        p["step_preconditioner"] = self._step_preconditioner()
        return p

    def _alpha_value(self) -> float:
        """``alpha`` as the fit starts with it."""
        return float(self.alpha)

    def _step_preconditioner(self):
        """The preconditioner of the steps: ``None`` or ``"block"``."""
        return self.preconditioner

    def _eta_decay(self, lam: float) -> float:
        # eta_t = theta_0 / (L (1 + theta_1 t)) with theta_1 = theta_0 nu / L is 1 / (nu (t + t_0)):
        # the step of strongly convex stochastic gradient descent (Pegasos; Bottou's schedule),
        # starting at theta_0 / L
        p = self._params
        if self.eta_decay != "auto":
            return p["eta_decay"]
        if p.get("step_preconditioner") == "block":
            return AUTO_DECAY_PRECONDITIONED
        return p["eta0"] * p["alpha"] / self._curvature(lam) if p["alpha"] > 0 else AUTO_DECAY_UNREGULARISED

    def _curvature(self, lam: float) -> float:
        if self._params.get("step_preconditioner") == "block":
            lam = 1.0  # the preconditioned block has a unit second moment
        return self._loss_curvature * lam + self._params["alpha"]

    def _guard_limit(self, lam: float, sample: np.ndarray) -> float:
        return MACHINE_GUARD

    def _make_rule(self, columns, guard_limit: float):
        return MachineRule(columns, guard_limit, self._loss, self._params["alpha"], self._encoder(),
                           preconditioner=self._params.get("step_preconditioner"), jitter=self._jitter())

    def _jitter(self) -> float:
        """The block preconditioner's relative jitter: as given, or as ``"auto"`` chose it."""
        if "jitter" in self._params:
            return self._params["jitter"]
        return BLOCK_JITTER if self.preconditioner_jitter == "auto" else float(self.preconditioner_jitter)

    def _initial(self, z, sample, k):
        for name in ("jitter_grid_", "jitter_scores_", "preconditioner_jitter_"):  # of an earlier fit
            self.__dict__.pop(name, None)
        if self._params.get("step_preconditioner") == "block":
            self._params["jitter"] = self._choose_jitter() if self.preconditioner_jitter == "auto" else \
                float(self.preconditioner_jitter)
            # no block yet: step t feeds block t while the budget lasts, so that with
            # n_features = max_iter * block_size every step has a new block
            return (np.zeros((0, k)),)
        return (np.zeros((z[0].shape[1], k)),)

    def _choose_jitter(self) -> float:
        """``preconditioner_jitter="auto"``: :func:`~dsgd_dask.estimators._auto.held_out_jitter` on the sample."""
        S = self._sample
        if len(S) < MIN_ROWS:  # too few rows to hold any out
            self.jitter_grid_, self.jitter_scores_ = np.array([BLOCK_JITTER]), np.array([np.nan])
            return BLOCK_JITTER
        x_cols, y_cols = self._columns()
        z = self._features[0].transform(S[:, x_cols], 0, 1)
        targets = self._encoder()(S[:, y_cols])
        jitter, self.jitter_scores_ = held_out_jitter(z, targets, held_out_split(len(S)))
        self.jitter_grid_ = JITTER_GRID
        return jitter

    def _values_payload(self) -> dict:
        if "jitter_scores_" not in self.__dict__:
            return {}
        return {"jitter_grid": self.jitter_grid_, "jitter_scores": self.jitter_scores_}

    def _restore_values(self, arrays: dict) -> None:
        if "jitter" in self._params:
            self.preconditioner_jitter_ = float(self._params["jitter"])
        if "jitter_grid" in arrays:
            self.jitter_grid_ = np.asarray(arrays["jitter_grid"])
            self.jitter_scores_ = np.asarray(arrays["jitter_scores"])

    def _finish(self, sample: np.ndarray) -> None:
        if self._params.get("step_preconditioner") == "block":
            self.preconditioner_jitter_ = self._jitter()
        features, coef = sections(self._features[0], self.state_.model_coef[0],
                                  self._params["n_blocks"] * self._params["block_size"])
        model = KernelExpansion(features, coef, self._set_offset(0))
        model.token = model_fingerprint(model)
        self.models_ = (model,)
        self.n_features_ = model.coef.shape[0]
        self._n_features_out = model.n_outputs

    @property
    def model_(self):
        return self.models_[0]

    # -- fitting ---------------------------------------------------------------------------
    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
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
        self._solver()  # a bad solver or features is refused before anything is read
        return self._fit_steps(X, y, callback)

    def _fit_steps(self, X, y, callback):
        self.convergence_ = []
        self._fit(X, y, callback=callback)
        self.solver_ = "dsgd"
        return self

    def _checked_target(self, y):
        """``y``'s values (numpy or dask) after the checks every target shares."""
        values = _target_values(y)
        if values.dtype.kind == "c":
            raise ValueError(f"Complex data not supported: y has dtype {values.dtype}")
        if self._numeric_target and values.dtype.kind == "O" and not isinstance(values, da.Array):
            values = numeric_array(values, "y")
        return values

    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def partial_fit(self, X, y, classes=None):
        """Doubly stochastic steps over ``(X, y)`` as the next batch of a stream (the first call initialises).

        One step per ``batch_size`` rows given. Only ``solver="dsgd"`` (or ``"auto"``)
        streams, and only a model fitted by steps continues.

        Parameters
        ----------
        X, y : as for :meth:`fit`
        classes : array-like, optional
            Classifiers: every class of the stream, required on the first call.

        Returns
        -------
        self
        """
        check_partial_fit(self)
        first = not hasattr(self, "state_")
        if hasattr(self, "models_") and getattr(self, "solver_", "dsgd") != "dsgd":
            raise ValueError(f"this model was fitted by solver={self.solver_!r}; partial_fit continues a model "
                             "fitted by steps (solver='dsgd'): fit it with solver='dsgd' first")
        if first and classes is None and isinstance(self, ClassifierMixin):
            raise ValueError("classes must be passed on the first call to partial_fit: every class of the "
                             "stream, as scikit-learn's incremental classifiers need")
        self._partial_fit(X, y, classes=classes)
        self.solver_ = "dsgd"
        return self

    # -- persistence -----------------------------------------------------------------------
    @classmethod
    def _from_payload(cls, attrs: dict, arrays: dict):
        est = super()._from_payload(attrs, arrays)
        if getattr(est, "solver_", None) is None:  # classifiers saved before they had a solver: steps
            est.solver_ = "dsgd"
        return est

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


def class_labels(values, what: str = "y"):
    """Class labels checked, and numbers or strings whatever the array's dtype.

    Labels are numbers or strings, as scikit-learn's classifiers take them: an object
    array of numbers becomes an array of their common numeric type (object ``0``/``1``
    are the integers ``0`` and ``1``, never the strings ``"0"`` and ``"1"``), an object
    array of strings a string array.

    Parameters
    ----------
    values : ndarray or dask array of shape (n,)
        The labels. A dask array stays lazy; its distinct labels are computed (one pass).
    what : str, default="y"
        The labels' name in messages.

    Returns
    -------
    values : ndarray or dask array of shape (n,)
        The labels with a numeric or string dtype.
    seen : ndarray
        Their distinct values, sorted.

    Raises
    ------
    ValueError
        For missing labels (``None``, NaN, infinity), a mix of numbers and strings, or
        labels that are neither.
    """
    lazy = isinstance(values, da.Array)
    if values.dtype.kind == "O":
        if lazy:
            parts = dask.compute(*[dask.delayed(_distinct)(b) for b in values.to_delayed().ravel()])
            distinct = set().union(*parts)
        else:
            distinct = _distinct(values)
        dtype = _label_dtype(distinct, what)
        values = values.astype(dtype)
        seen = np.unique(np.array(list(distinct), dtype=dtype))
    else:
        seen = np.unique(da.unique(values).compute() if lazy else values)
    if seen.dtype.kind in "fc" and not np.isfinite(seen).all():
        raise ValueError(f"{what} contains NaN or infinity; every row needs a class label")
    return values, seen


def _distinct(block) -> set:
    return set(np.asarray(block).ravel().tolist())


def _label_dtype(distinct: set, what: str) -> np.dtype:
    """The numeric or string dtype of a set of labels from an object array; missing or mixed labels refused."""
    reals, strings, others = [], [], []
    for v in distinct:
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, numbers.Real):
            reals.append(v)
        else:
            others.append(v)
    missing = [v for v in reals if v != v] + [v for v in others if v is None or repr(v) in ("<NA>", "NaT")]
    if missing:
        advice = ("every row needs a class label: drop the rows without one or fill them in" if what == "y" else
                  "pass the class labels alone")
        raise ValueError(f"{what} contains missing labels ({missing[0]!r}); {advice}")
    if others:
        raise ValueError(f"{what} contains {others[0]!r} of type {type(others[0]).__name__}; class labels are "
                         "numbers or strings")
    if reals and strings:
        raise ValueError(f"{what} mixes numbers and strings (e.g. {reals[0]!r} and {strings[0]!r}); class labels "
                         "are all numbers or all strings: convert them first, e.g. y.astype(str)")
    dtype = np.array(strings or reals).dtype
    if not strings and dtype.kind not in "biuf":
        raise ValueError(f"{what} has labels that fit no numeric type (e.g. {max(reals)!r}); use numbers of at "
                         "most 64 bits or strings")
    return dtype


def _same_kind(seen: np.ndarray, classes: np.ndarray, what: str) -> None:
    """Refuse labels of ``y`` that are strings where ``classes`` are numbers, or the other way round."""
    numeric = seen.dtype.kind in "biuf"
    if len(seen) and numeric != (classes.dtype.kind in "biuf"):
        raise ValueError(f"y has {'numeric' if numeric else 'string'} labels but {what} "
                         f"{classes.tolist()} {'are not numbers' if numeric else 'are numbers'}; use labels of "
                         "one kind")


@register
class KernelRidge(RegressorMixin, _KernelMachine):
    __doc__ = f"""Kernel ridge regression (squared loss; multi-output ``y``): steps, full-data passes or a dense solve.

    Minimises ``E[(f(x) + b - y)^2] / 2 + alpha/2 ||f||_H^2`` over the functions ``f`` of
    the features' span, with the intercept ``b`` the targets' mean (``fit_intercept``;
    ``b = 0`` without): the mean over the ``n`` rows, so scikit-learn's
    ``KernelRidge(alpha=a)`` is ``alpha = a / n`` with ``fit_intercept=False``. ``||f||_H`` is the RKHS norm of the
    kernel itself on Nyström features (whatever their blocks: the problem of Nyström
    kernel ridge on all ``M`` landmarks, FALKON's; with every row a landmark, kernel
    ridge regression itself), and of the blocks' average kernel on Fourier features
    (``J |A|^2`` for ``f = sum_j z_j A_j``, ``J`` blocks each approximating the kernel).
    Every solver minimises this same function; they differ in the path:

    - ``"dsgd"``: doubly stochastic gradient steps (Dai et al. 2014). Each step on a
      mini-batch shrinks every block by ``1 - eta alpha`` and adds the functional
      gradient through one block. On Nyström features of several blocks the landmarks
      are whitened together (``sqrt(J) K_LL^{{-1/2}}``, split into blocks: one ``O(M^3)``
      eigendecomposition per fit, and the sections of all ``M`` landmarks in every step),
      so that the blocks' average kernel is the Nyström kernel of all the landmarks and
      the steps penalise the same norm as the passes (at most {JOINT_STEPS_MAX_FEATURES}
      such features: a ``ValueError`` beyond). Streams (:meth:`partial_fit`) and
      checkpoints. The error of the steps falls as ``O(1 / (alpha t))`` after ``t``
      steps.
    - ``"cg"``: the feature blocks are fixed and full-data passes solve the normal
      equations by preconditioned conjugate gradients: the first pass gives the
      right-hand side, every later pass one product with the second moment of all the
      features (a reduction over the row chunks, on every worker at once), and the
      residual falls geometrically. Memory ``O(M c)`` whatever the number of rows, plus
      the preconditioner's (``preconditioner``); inputs stream chunk by chunk. A precision
      ridge of ``100 eps^2 E|r|^2`` on the coefficients of the kernel sections ``r`` keeps
      the solver from fitting the features' round-off where the blocks are redundant.
      Runs on the pass driver: with ``checkpoint``, its state is saved after every pass
      (``checkpoint_every`` does not apply), and a fit interrupted then run again with the
      same parameters and data resumes after the last pass saved, ending bit for bit where
      an uninterrupted fit does.
    - ``"exact"``: the ``n x n`` kernel matrix, ``(K + alpha n I) c = y`` by Cholesky,
      in float64 whatever ``compute_dtype``; at most {EXACT_MAX_SAMPLES:,} rows (a
      ``ValueError`` beyond). Every training row is a landmark: ``n_features`` is
      ignored, the model holds the training rows and ``c`` (``n_features_ == n``).
    - ``"auto"``: in :meth:`fit`, ``"exact"`` on at most {AUTO_EXACT_ROWS:,} rows with the
      default Nyström features and ``n_features="auto"`` (a {AUTO_EXACT_ROWS:,}-row kernel
      matrix is 512 MiB), ``"cg"`` otherwise; :attr:`solver_` records which. On three
      regression sets no default was chosen on (``python -m benchmarks run defaults``:
      SARCOS, Friedman #1, a sine-square problem) the steps with their other defaults
      reached R² 0.89, 0.78 and 0.57, the passes 0.97, 0.95 and 0.90 and the dense solve
      0.98, 0.95 and 0.95, both in less time (on the fourth, diabetes, all three 0.37;
      with the intercept, 0.40).
      In :meth:`partial_fit`, ``"dsgd"`` (a stream is taken by steps).

    Parameters
    ----------
    alpha : float or "auto", default="auto"
        The regulariser of the objective above, in units of the kernel per row:
        scikit-learn's ``KernelRidge(alpha=a)`` on ``n`` rows is ``alpha = a / n``. A
        number is used as given (no rows held out: the fit is the same, bit for bit,
        as without the selection). ``"auto"``: chosen in :meth:`fit` on the seeded sample
        of at most {N_SAMPLE:,} rows that the fit reads anyway (for the bandwidth and the
        step scale; no extra pass over the data): its first {1 - AUTO_HELD_OUT:.0%} are
        fitted and the last {AUTO_HELD_OUT:.0%} scored (held-out R², :attr:`alpha_scores_`)
        for every ``alpha`` of the grid ``s 10^d``, ``d`` = {int(AUTO_ALPHA_DECADES[0])}
        to {int(AUTO_ALPHA_DECADES[-1])}, then the two half decades either side of the best
        (``s`` the kernel's mean diagonal ``E[k(x, x)]``, 1 for the Gaussian kernel). The
        fitted problem is the solver's own: the same features and the same RKHS norm
        (Nyström: in the basis of the kernel sections, ``K_LL`` plus the precision ridge;
        Fourier: ``J I``), solved exactly for each ``alpha`` from the fitted rows'
        moments ``Z^T Z`` (``M^2`` float64, ``n_s M^2`` multiply-adds once for ``n_s``
        fitted rows) by one Cholesky factorisation (``M^3 / 3``). ``"exact"`` scores
        ``(K + alpha n_s I) c = y`` on at most {EXACT_AUTO_ROWS} sample rows by exact
        leave-one-out instead (as scikit-learn's ``RidgeCV``; every row scored, none set
        aside): one eigendecomposition of their ``n_s x n_s`` kernel matrix (``2 n_s^2``
        float64, about ``4 n_s^3`` flops), then ``O(n_s^2)`` per ``alpha``
        (:attr:`alpha_scores_`: the leave-one-out R²). Then the solver runs
        once at the chosen ``alpha`` (:attr:`alpha_`) on all the rows: the passes of
        ``"cg"`` and the steps of ``"dsgd"`` are those of a numeric ``alpha``. The
        extra cost is the moments and 11 factorisations, on one core, and no pass: on
        SARCOS (3,449 rows, ``M = 3072``, a busy two-core machine) 8 s and 21 s, where
        the passes at one ``alpha`` took 40 s. ``"exact"`` on USPS (7,291 rows, 10
        one-hot outputs, the selection on 4,096) took 10.6 s against 3.0 s at a numeric
        ``alpha`` (an idle two-core machine). The sample holds fewer rows
        than a large data set, and the best regulariser falls as the rows grow: on
        more than {N_SAMPLE:,} rows ``"auto"`` errs on the side of a larger ``alpha``.
        :meth:`partial_fit` keeps a fixed value: ``"auto"`` streams at ``alpha =``
        {STREAM_ALPHA:g} (a stream has no held-out rows).
    fit_intercept : bool, default=True
        Predict ``f(x) + b`` with ``b`` (:attr:`intercept_`) the mean of the targets on
        the seeded sample of at most {N_SAMPLE:,} rows the fit reads anyway (every row of
        a smaller data set), fixed before the solve; ``f`` fits ``y - b``. Without it
        (scikit-learn's ``KernelRidge``) the ridge shrinks the predictions towards 0
        rather than towards the mean, and far from the training rows a shift-invariant
        kernel predicts 0: on targets far from 0 (diabetes progression, mean 153 and
        standard deviation 79) the dense solve's test R² was 0.3685 without and 0.3975
        with it. On more rows than the sample the mean is the sample's (within about
        ``std(y) / 100``), and the function absorbs the rest. :meth:`partial_fit` takes
        the first call's sample and keeps it.
    solver : {{"auto", "dsgd", "cg", "exact"}}, default="auto"
        How the objective is minimised (above). ``"dsgd"`` and ``"cg"`` take
        ``features="nystroem"``, ``"fourier"`` or ``"fourier_pairs"``, ``"exact"`` only the default
        ``"nystroem"`` (its features are the kernel sections at the training rows); any
        other combination is a ``ValueError`` before anything is read. Only ``"dsgd"``
        (and ``"auto"``, by steps) stream by :meth:`partial_fit`.
        ``max_iter`` bounds the solver's iterations: steps (``"dsgd"``, below), full
        passes, the first (the right-hand side) included (``"cg"``; ``max_iter="auto"``:
        {CG_MAX_PASSES}, the first and 100 of conjugate gradients); ``"exact"`` ignores it.
    tol : float, default=1e-6
        ``solver="cg"``: stop once every output's residual ``|b - (E[z z^T] + alpha P) a|``
        (``P`` the penalty's matrix) is below ``tol |b|``; or, with a ``RuntimeWarning``,
        where round-off leaves the system without curvature along the search direction
        (no step moves the solution; the record of that pass has ``indefinite=True``).
    preconditioner : {{"auto", "block", "landmarks"}}, default="auto"
        ``solver="dsgd"``: ``"block"`` preconditions every step by the inverse of its
        block's second moment on the batch (Dai et al.'s own code: at ``eta = 1``, the
        least-squares fit of the batch's residual by the new block; as for
        :class:`~dsgd_dask.KernelLogisticRegression`'s ``preconditioner``), ``"auto"``
        takes the plain steps (the functional gradient) and ``"landmarks"`` is refused.

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
        The fitted function(s): Nyström landmarks (or Fourier seeds) and coefficients;
        ``"exact"``, and ``"dsgd"`` on jointly whitened landmarks, keep the coefficients
        of the kernel sections (unwhitened Nyström features).
    solver_ : str
        The solver that ran: ``"dsgd"``, ``"cg"`` or ``"exact"``.
    n_features_ : int
        Features of the model (``n`` for ``"exact"``).
    n_iter_ : int
        Iterations, what ``max_iter`` bounds: steps (``"dsgd"``), full passes, the first
        included (``"cg"``), 1 (``"exact"``).
    convergence_ : list of dict
        Records with the keys ``iteration``, ``rows`` (rows read so far), ``seconds``
        (since the start of the fit) and ``measure``: one per chunk task of steps
        (``"dsgd"``, ``measure`` NaN), one per pass (``"cg"``, ``measure`` the largest
        relative residual over the outputs, which ``tol`` bounds), one for the dense
        solve (``"exact"``, NaN).
    preconditioner_ : str
        ``solver="cg"``: the preconditioner used, ``"block"`` or ``"landmarks"``.
    alpha_ : float
        The regulariser of the fitted model: ``alpha`` when it is a number, else the one
        chosen (:meth:`partial_fit` from scratch: {STREAM_ALPHA:g}).
    alpha_grid_ : ndarray of shape (n_alphas,)
        ``alpha="auto"`` in :meth:`fit`: the regularisers scored, increasing.
    alpha_scores_ : ndarray of shape (n_alphas,)
        Their held-out (``"exact"``: leave-one-out) scores, ``1 - E[(y - f)^2] / Var(y)``
        averaged over the outputs (``Var(y)`` on all the sample rows; higher is better,
        ``-inf`` for a system that did not factorise or rows their own fit interpolates);
        ``alpha_`` has the highest (ties: the larger ``alpha``).
    intercept_ : float or ndarray of shape (n_outputs,)
        The intercept ``b`` added to ``f`` (0 without ``fit_intercept``); a float for a
        1-D ``y``.
    preconditioner_jitter_, jitter_grid_, jitter_scores_
        ``solver="dsgd", preconditioner="block"``: as for
        :class:`~dsgd_dask.KernelLogisticRegression`.
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
    >>> reg.solver_, bool(reg.score(X, y) > 0.9)
    ('dsgd', True)
    >>> passes = KernelRidge(alpha=1e-3, solver="cg", n_features=512, random_state=0).fit(X, y)
    >>> bool(passes.score(X, y) > 0.9), passes.convergence_[-1]["measure"] <= 1e-6
    (True, True)
    >>> exact = KernelRidge(alpha=1e-3, solver="exact", random_state=0).fit(X, y)
    >>> exact.n_features_, bool(abs(exact.score(X, y) - passes.score(X, y)) < 0.01)
    (1000, True)
    """

    _numeric_target = True
    _joint_steps = True
    _parameter_constraints: ClassVar[dict] = {
        **_KernelMachine._parameter_constraints, **solver_constraint("KernelRidge"), "tol": NON_NEGATIVE,
        "preconditioner": [StrOptions({"auto", "block", "landmarks"})], "alpha": ALPHA, "fit_intercept": ["boolean"]}

    def __init__(self, alpha="auto", *, fit_intercept=True, solver="auto", tol=1e-6, preconditioner="auto",
                 preconditioner_jitter="auto", kernel="gaussian",
                 bandwidth="median", kernel_params=None, features="nystroem", n_features="auto", block_size="auto",
                 batch_size=256, max_iter="auto", shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay="auto",
                 average=False,
                 compute_dtype="float32", cache_bytes=None, checkpoint=None, checkpoint_every=100, verbose=False,
                 random_state=None):
        super().__init__(alpha, solver=solver, preconditioner=preconditioner,
                         preconditioner_jitter=preconditioner_jitter, kernel=kernel, bandwidth=bandwidth,
                         kernel_params=kernel_params,
                         features=features, n_features=n_features, block_size=block_size, batch_size=batch_size,
                         max_iter=max_iter, shuffle_chunks=shuffle_chunks, n_partitions=n_partitions, eta0=eta0,
                         eta_decay=eta_decay, average=average, compute_dtype=compute_dtype, cache_bytes=cache_bytes,
                         checkpoint=checkpoint, checkpoint_every=checkpoint_every, verbose=verbose,
                         random_state=random_state)
        self.fit_intercept = fit_intercept
        self.tol = tol

    def _step_preconditioner(self):
        if self._solver() != "dsgd":
            return None
        if self.preconditioner == "landmarks":
            raise ValueError("preconditioner='landmarks' is a preconditioner of the passes (solver='cg'); "
                             "solver='dsgd' takes preconditioner='block' (preconditioned steps) or 'auto' (plain "
                             "steps)")
        return "block" if self.preconditioner == "block" else None

    def _check_params(self, n_samples: int) -> dict:
        tol, pre = float(self.tol), self.preconditioner
        if self._solver() == "exact":
            # every training row a landmark, in one block: the budget and the steps' parameters do not apply
            return {"solver": "exact", "alpha": self._alpha_value(), "tol": tol,
                    "features": "nystroem", "block_size": n_samples, "n_blocks": 1, "max_iter": 1,
                    "batch_size": int(self.batch_size), "whitening": "block",
                    "preconditioner": pre}
        p = super()._check_params(n_samples)
        if pre == "landmarks" and p["features"] != "nystroem":
            raise ValueError(f"preconditioner='landmarks' needs Nyström features (features='nystroem'), "
                             f"got features={p['features']!r}; use preconditioner='block' or 'auto'")
        if pre == "auto":
            M = p["n_blocks"] * p["block_size"]
            landmarks = p["features"] == "nystroem" and p["n_blocks"] > 1 and M <= LANDMARK_MAX_FEATURES
            pre = "landmarks" if landmarks else "block"
        if p["solver"] == "cg" and self.max_iter == "auto":
            p["max_iter"] = CG_MAX_PASSES
        return {**p, "tol": tol, "preconditioner": pre}

    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y, *, callback=None):
        """Fit the ridge by steps (``"dsgd"``), full-data passes (``"cg"``) or the dense solve (``"exact"``).

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d)
        y : array-like, dask array, Zarr array or DataArray of shape (n_samples,) or (n_samples, c)
            Row-aligned with ``X``.
        callback : callable, optional
            ``callback(n, model)`` with the current expansion after every chunk of steps
            (``n`` steps), every full pass (``n`` passes, the first included: its model is
            zero; called once the pass's checkpoint is written, so an exception raised by
            the callback interrupts a fit that resumes after that pass) or the dense solve
            (``n = 1``).

        Returns
        -------
        self
        """
        solver = self._solver()  # a bad combination is refused before anything is read
        for name in ("preconditioner_", "alpha_grid_", "alpha_scores_"):  # of an earlier fit
            self.__dict__.pop(name, None)
        views = self._validate_pair(X, y, reset=True)
        if self.solver == "auto":
            solver = self._auto_solver(views[2].n_samples)
        self._alpha_auto = isinstance(self.alpha, str)  # taken by the first use: partial_fit keeps a value
        self._fit_solver = solver
        try:
            if solver == "exact":
                return self._fit_exact(views[2], callback)
            self.convergence_ = []
            self._fit(X, y, callback=callback, views=views)
        finally:
            self.__dict__.pop("_alpha_auto", None)
            self.__dict__.pop("_fit_solver", None)
        self.solver_ = solver
        return self

    def _auto_solver(self, n_samples: int) -> str:
        """What ``solver="auto"`` runs in :meth:`fit`: the dense solve on small Nyström problems, else the passes."""
        small = (n_samples <= AUTO_EXACT_ROWS and self._features_kind() == "nystroem"
                 and self.n_features == "auto")
        return "exact" if small else "cg"

    def _solver(self) -> str:
        # during fit, what "auto" chose; otherwise (partial_fit) the steps
        chosen = self.__dict__.get("_fit_solver")
        return chosen if chosen is not None else super()._solver()

    # -- alpha="auto" ----------------------------------------------------------------------
    def _alpha_value(self) -> float:
        # "auto": the stream's value until fit chooses one
        return STREAM_ALPHA if isinstance(self.alpha, str) else float(self.alpha)

    def _initial(self, z, sample, k):
        # the features and the sample are made, the step scale and the rule not yet: alpha is chosen here
        self._set_intercept(self._sample)
        if self.__dict__.pop("_alpha_auto", False):
            p, (x_cols, y_cols), S = self._params, self._columns(), self._sample
            path, scale = feature_path(self._features[0], p["n_blocks"], S[:, x_cols], self._encoder()(S[:, y_cols]),
                                       held_out_split(S.shape[0]))
            self._use_alpha_path(search_alpha(path, scale))
        return super()._initial(z, sample, k)

    def _exact_alpha_path(self, spec, sample: np.ndarray):
        """``alpha="auto"`` of the dense solve: exact leave-one-out scores of kernel ridge on the sample's rows."""
        x_cols, y_cols = self._columns()
        rows = min(sample.shape[0], EXACT_AUTO_ROWS)
        K = kernel_matrix(spec, np.asarray(sample[:rows, x_cols], dtype=np.float64))
        scale = float(np.mean(np.diag(K)))
        return search_alpha(LeaveOneOutPath(K, self._encoder()(sample[:rows, y_cols])), scale)

    @classmethod
    def _legacy_params(cls, params: dict) -> dict:
        params = super()._legacy_params(params)
        if "random_state" in params:  # the constructor's (not the resolved) parameters
            params.setdefault("fit_intercept", False)  # a store written before the intercept: fitted without
        return params

    # -- the intercept -------------------------------------------------------------------------
    def _set_intercept(self, sample: np.ndarray) -> None:
        """``fit_intercept``: the targets' mean on the fit's sample, in the resolved parameters (saved with them)."""
        self._params.pop("intercept", None)
        if self.fit_intercept:
            y = np.asarray(sample[:, self._columns()[1]], dtype=np.float64)
            self._params["intercept"] = [float(v) for v in y.mean(axis=0)]

    def _intercept(self) -> np.ndarray | None:
        """The intercept of the fit (one value per output), or ``None`` without one."""
        values = self._params.get("intercept")
        return None if values is None else np.asarray(values, dtype=np.float64)

    def _set_offset(self, i: int) -> np.ndarray | None:
        b = self._intercept()
        return None if b is None else -b  # an expansion evaluates to h(X) - offset

    def _use_alpha_path(self, found) -> None:
        self._params["alpha"] = found.alpha
        self.alpha_grid_, self.alpha_scores_ = found.grid, found.scores

    def _finish(self, sample: np.ndarray) -> None:
        super()._finish(sample)
        self.alpha_ = self._params["alpha"]
        self._record_intercept()

    def _record_intercept(self) -> None:
        b = self._intercept()
        b = np.zeros(self._n_outputs) if b is None else b
        self.intercept_ = float(b[0]) if self._y_1d else b

    # -- the passes ("cg") ---------------------------------------------------------------------
    def _by_passes(self) -> bool:
        return self._solver() == "cg"

    def _solve(self, view, callback, checkpointer) -> None:
        if self._params["solver"] != "cg":
            super()._solve(view, callback, checkpointer)
            return
        self._fit_passes(view, callback, checkpointer)
        self._finish(self._sample)

    def _fit_passes(self, view, callback=None, checkpoint=None) -> None:
        """Preconditioned conjugate gradients on the pass driver (:class:`~dsgd_dask.engine.ridge.CGSolver`)."""
        p = self._params
        J = p["n_blocks"]
        features = self._features[0]
        x_cols, y_cols = self._columns()
        # both from the features and the sample, in this process: the same on any scheduler
        raw = features.raw_transform(self._sample[:N_SHIFT, x_cols], 0, J)
        shift = raw.mean(axis=0, dtype=np.float64)
        # Nyström: the precision ridge of the RKHS penalty (Fourier blocks: the penalty J |A|^2 alone)
        ridge = precision_ridge(raw, features.dtype, centre=False) if p["features"] == "nystroem" else 0.0
        del raw
        solver = CGSolver(features, J, (x_cols, y_cols), p["alpha"], shift, p["preconditioner"], ridge=ridge,
                          tol=p["tol"], target_shift=self._intercept())
        run = run_passes(solver, view, p["max_iter"], callback=callback, checkpoint=checkpoint,
                         verbose=self.verbose, desc="KernelRidge(solver='cg')" if self.verbose else None)
        del solver  # the preconditioner: M^2 float64 for the landmarks'
        self.preconditioner_ = p["preconditioner"]
        self.convergence_ = run.records
        self.n_iter_ = run.n_iter
        self.state_ = StepState((run.state["x"],), 0, self.state_.eta_scale)

    def _fit_exact(self, view, callback):
        """``(K + alpha n I) c = y`` on the ``n`` training rows; the model's features: the kernel sections at them."""
        n = view.n_samples
        if n > EXACT_MAX_SAMPLES:
            raise ValueError(f"KernelRidge(solver='exact') forms the dense {n} x {n} kernel matrix and is limited to "
                             f"n_samples <= {EXACT_MAX_SAMPLES} (got {n}); use solver='cg' or 'dsgd' for larger "
                             "data, or fit on a subsample")
        clock = Clock()
        p = self._params = self._check_params(n)
        self.seed_ = self._seed(self.random_state)
        x_cols, y_cols = self._columns()
        # the bandwidth of the other solvers on the same seed: the same kernel
        sample = sample_rows(view, N_SAMPLE, self.seed_)
        spec = kernel_spec(self.kernel, self.bandwidth, self.kernel_params, sample[:, x_cols])
        self._set_intercept(sample)
        if self.__dict__.pop("_alpha_auto", False):
            self._use_alpha_path(self._exact_alpha_path(spec, sample))
        del sample
        data = materialise(view)
        X, Y = data[:, x_cols], self._encoder()(data[:, y_cols])
        del data
        K = kernel_matrix(spec, X)
        K.flat[::n + 1] += p["alpha"] * n
        with one_blas_thread():  # OpenBLAS's threaded potrf crashes on large matrices on some machines
            try:
                coef = cho_solve(cho_factor(K, lower=True, overwrite_a=True, check_finite=False), Y,
                                 check_finite=False)
            except np.linalg.LinAlgError:
                warnings.warn("the kernel matrix plus alpha n I is singular: the least-squares solution instead "
                              "(as scikit-learn's KernelRidge)", LinAlgWarning, stacklevel=3)
                K = kernel_matrix(spec, X)
                K.flat[::n + 1] += p["alpha"] * n
                coef = lstsq(K, Y)[0]
        del K
        center = X.mean(axis=0) if spec.shift_invariant else None
        features = NystroemFeatures(spec, X, n, self.seed_, "float64", center=center, whiten=False)
        self._features = (features,)
        # a step state (the solution; no step taken), as every machine keeps: saved and loaded alike
        self.state_ = StepState((coef,), 0, 1.0)
        self._config = StepConfig(n_blocks=1, batch_size=p["batch_size"], eta_decay=0.0)
        self._rule = self._make_rule(self._columns(), MACHINE_GUARD)
        self._n_calls = 0
        self.kernel_, self.bandwidth_ = spec, spec.bandwidth
        self._finish(None)
        self.n_iter_ = 1
        self.convergence_ = [record(1, n, clock(), None)]
        self.solver_ = "exact"
        if callback is not None:
            callback(1, self.model_)
        return self

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
        b = self._intercept()
        return Identity() if b is None else Shifted(tuple(b.tolist()))

    def _guard_limit(self, lam: float, sample: np.ndarray) -> float:
        y = self._encoder()(sample[:, self._columns()[1]])
        return MACHINE_GUARD * max(1.0, float((y * y).sum(axis=1).mean()))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    @accepts_storage_options
    def predict(self, X):
        """Predictions ``f(X)``: ``(n,)`` for a 1-D ``y`` in fit, else ``(n, c)``; lazy on lazy input."""
        check_is_fitted(self, "models_")
        out = self._transform_view(0, X, "prediction")
        return _ravel_single(out) if self._y_1d else out

    def _extra_payload(self) -> dict:
        return {"y_1d": self._y_1d}

    def _restore_extra(self, fitted: dict, arrays: dict) -> None:
        self._y_1d = fitted["y_1d"]

    def _values_payload(self) -> dict:
        out = super()._values_payload()
        if "alpha_grid_" not in self.__dict__:
            return out
        return {**out, "alpha_grid": self.alpha_grid_, "alpha_scores": self.alpha_scores_}

    def _restore_values(self, arrays: dict) -> None:
        super()._restore_values(arrays)
        self.alpha_ = float(self._params["alpha"])
        self._record_intercept()
        if "alpha_grid" in arrays:
            self.alpha_grid_ = np.asarray(arrays["alpha_grid"])
            self.alpha_scores_ = np.asarray(arrays["alpha_scores"])


class _KernelClassifier(ClassifierMixin, _KernelMachine):
    _numeric_target = False
    _parameter_constraints: ClassVar[dict] = {
        **_KernelMachine._parameter_constraints,
        "features": [StrOptions({"auto", "nystroem", "fourier", "fourier_pairs"})],
        "preconditioner": [StrOptions({"auto", "block"}), None], "batch_size": [*COUNT, AUTO]}

    # -- the recipe's defaults ---------------------------------------------------------------
    def _step_preconditioner(self):
        """``"auto"``: ``"block"``, unless an integer ``batch_size`` is below twice an integer ``block_size``."""
        if self.preconditioner != "auto":
            return self.preconditioner
        narrow = (self.batch_size != "auto" and self.block_size != "auto"
                  and int(self.batch_size) < 2 * int(self.block_size))
        return None if narrow else "block"

    def _features_kind(self) -> str:
        """``"auto"``: Fourier blocks with the block preconditioner (a new block each step), else Nyström."""
        if self.features != "auto":
            return self.features
        return "fourier" if self._step_preconditioner() == "block" else "nystroem"

    def _step_settings(self, n_samples: int) -> dict:
        """The recipe's batch, block, steps and budget for what is ``"auto"`` (see :data:`RECIPE_BATCH`)."""
        s = {**super()._step_settings(n_samples), "features": self._features_kind()}
        block_steps = self._step_preconditioner() == "block"
        if s["batch_size"] == "auto":
            s["batch_size"] = RECIPE_BATCH if block_steps else PLAIN_BATCH
        if not block_steps:
            return s
        batch = min(int(s["batch_size"]), n_samples)
        budget = s["n_features"]
        if s["block_size"] == "auto" and (budget == "auto" or s["features"] != "nystroem"):
            block = 1 << max(0, (batch // 2).bit_length() - 1)  # a power of two, at most half the batch
            block = max(RECIPE_MIN_BLOCK, min(block, RECIPE_MAX_BLOCK))
            if budget == "auto" or int(budget) % block == 0:
                s["block_size"] = block
        if s["max_iter"] == "auto":
            if budget != "auto" and s["block_size"] != "auto":
                s["max_iter"] = max(1, -(-int(budget) // int(s["block_size"])))  # one new block per step
            else:
                s["max_iter"] = int(np.clip(-(-RECIPE_EPOCHS * n_samples // batch), RECIPE_MIN_STEPS,
                                            RECIPE_MAX_STEPS))
        if budget == "auto" and s["block_size"] != "auto":
            # a new block at every step, up to RECIPE_MAX_STEPS blocks (then the steps revisit them)
            s["n_features"] = min(int(s["max_iter"]), RECIPE_MAX_STEPS) * int(s["block_size"])
        return s

    def _target(self, y, first: bool, classes=None):
        values = self._checked_target(y)
        if values.ndim == 2 and values.shape[1] == 1:
            warnings.warn("A column-vector y was passed when a 1d array was expected. Please change the shape of "
                          "y to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=3)
            values = values[:, 0]
        if values.ndim != 1:
            raise ValueError(f"y must be 1-D class labels, got shape {values.shape}")
        values, seen = class_labels(values, "y")
        if first:
            given = seen
            if classes is not None:
                given = class_labels(np.asarray(classes).reshape(-1), "classes")[1]
                _same_kind(seen, given, "classes")
            for labels in (seen, given):
                kind = type_of_target(labels)
                if kind not in ("binary", "multiclass"):
                    raise ValueError(f"Unknown label type: {kind}; {type(self).__name__} needs class labels "
                                     "(use KernelRidge for a continuous target)")
            if len(given) < 2:
                raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                                 f"but the data contain only one class: {given[0]!r}")
            self.classes_ = given
            self._n_outputs = self._outputs(len(given))
        _same_kind(seen, self.classes_, "classes_")
        unseen = np.setdiff1d(seen, self.classes_)
        if len(unseen):
            raise ValueError(f"y contains classes {unseen.tolist()} not in classes_ {self.classes_.tolist()}")
        if isinstance(values, da.Array):
            return values.map_blocks(partial(np.searchsorted, self.classes_), dtype=np.intp).astype(np.float64)
        return np.searchsorted(self.classes_, values).astype(np.float64)

    @accepts_storage_options
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

    @accepts_storage_options
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

    @accepts_storage_options
    def score(self, X, y, sample_weight=None):
        """Mean accuracy of :meth:`predict` on ``X`` against ``y``.

        Parameters
        ----------
        X : as for :meth:`fit`
        y : array-like of shape (n_samples,)
            The true labels, as :meth:`fit` takes them: an object array of numbers
            compares as numbers.
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        float
        """
        values = _target_values(y)
        if values.dtype.kind == "O" and values.ndim == 1 and not isinstance(values, da.Array):
            y = class_labels(values, "y")[0]
        return super().score(X, y, sample_weight=sample_weight)

    def _values_payload(self) -> dict:
        # numbers as an array; other labels (strings) in the attributes, as JSON: Zarr v3 has
        # no stable specification of fixed-length strings
        out = super()._values_payload()
        return {**out, "classes": self.classes_} if self.classes_.dtype.kind in "biuf" else out

    def _restore_values(self, arrays: dict) -> None:
        super()._restore_values(arrays)
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

    Minimises ``E[l(f(x), y)] + alpha/2 ||f||^2`` with the hinge loss
    ``l = max(0, 1 - y f(x))``: binary problems fit one function on labels ``{{-1, +1}}``;
    ``c > 2`` classes fit ``c`` one-vs-rest functions in one pass, sharing the features.

    Parameters
    ----------
{_CLASSIFIER_ALPHA}
{_CLASSIFIER_SOLVER}
{_MACHINE_PARAMS}

    Attributes
    ----------
    classes_ : ndarray
    model_ : KernelExpansion
{_STEP_ATTRIBUTES}
    n_features_, bandwidth_, seed_, n_features_in_

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
    >>> svc.solver_, bool(svc.score(X, y) > 0.9)
    ('dsgd', True)
    """

    _loss = "hinge"
    _parameter_constraints: ClassVar[dict] = {**_KernelClassifier._parameter_constraints,
                                              **solver_constraint("KernelSVC")}


@register
class KernelLogisticRegression(_KernelClassifier):
    __doc__ = f"""Kernel logistic regression by doubly stochastic gradients (binary; multinomial softmax).

    Minimises ``E[l(f(x), y)] + alpha/2 ||f||^2`` with the logistic loss
    ``log(1 + exp(-y f(x)))`` (binary, one function) or the multinomial loss
    ``-log softmax(f(x))_y`` (``c > 2`` classes, ``c`` functions).

    Parameters
    ----------
{_CLASSIFIER_ALPHA}
{_CLASSIFIER_SOLVER}
{_MACHINE_PARAMS}

    Attributes
    ----------
    classes_ : ndarray
    model_ : KernelExpansion
{_STEP_ATTRIBUTES}
    n_features_, bandwidth_, seed_, n_features_in_

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

    _parameter_constraints: ClassVar[dict] = {**_KernelClassifier._parameter_constraints,
                                              **solver_constraint("KernelLogisticRegression")}

    @property
    def _loss(self):
        return "logistic" if len(self.classes_) == 2 else "softmax"

    @property
    def _loss_curvature(self):
        return 0.25 if len(self.classes_) == 2 else 0.5

    def _encoder(self):
        return Signs(2) if len(self.classes_) == 2 else Codes()

    @accepts_storage_options
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
