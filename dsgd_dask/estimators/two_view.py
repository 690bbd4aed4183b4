"""KernelSVD and KernelCCA: two-view component analysis by doubly stochastic steps, full-data passes, one pass
of feature moments, or the dense kernel matrix."""

from __future__ import annotations

from numbers import Real
from typing import ClassVar

import dask
import numpy as np
import scipy.linalg
from scipy.sparse.linalg import ArpackNoConvergence, svds
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.baselines.exact_two_view import check_two_view_size, exact_two_view, materialise_pair
from dsgd_dask.baselines.rcca import randomized_cca
from dsgd_dask.engine.driver import Update, run_passes
from dsgd_dask.engine.passes import cross_covariances, cross_request
from dsgd_dask.engine.rca import Moments, pooled_moments, rca_moments, split_moments
from dsgd_dask.engine.ridge import LandmarkPreconditioner, precision_ridge
from dsgd_dask.engine.steps import StepState
from dsgd_dask.estimators._atomic import atomic_fit
from dsgd_dask.estimators._auto import (
    FALLBACK,
    MIN_ROWS,
    ChosenRidge,
    best_index,
    covariance_eigen,
    held_out_view,
    log_grid,
)
from dsgd_dask.estimators._base import accepts_storage_options
from dsgd_dask.estimators._constraints import (
    COUNT,
    POSITIVE,
    RIDGE,
    STEP_PRECONDITIONER,
    STEPS,
    TWO_VIEW_KERNELS,
    solver_constraint,
)
from dsgd_dask.estimators._solvers import Clock, check_partial_fit, check_solver, record
from dsgd_dask.estimators._steps import model_fingerprint, register
from dsgd_dask.estimators.components import N_INIT, N_SAMPLE, ComponentStepEstimator
from dsgd_dask.features.kernels import parse_kernel
from dsgd_dask.metrics import paired_correlations
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.rules.preconditioners import SampleBlockPreconditioner
from dsgd_dask.rules.solutions import cca_ritz, cross_svd, ridge_cca
from dsgd_dask.rules.subspace import orthonormal
from dsgd_dask.rules.two_view import KCCARule, KSVDRule
from dsgd_dask.streams.batches import sample_rows, view_seed

#: Directions carried beyond ``n_components`` by the passes of kernel CCA.
CCA_OVERSAMPLES = 10
#: Default largest number of full-data passes of kernel CCA (``solver="lobpcg"``).
CCA_MAX_PASSES = 30
#: Floats of raw features of the sample rows that set the passes' shift.
SHIFT_FLOATS = 1 << 24
#: Solvers that fit in one go, without a step state (their models cannot continue by steps).
DIRECT_SOLVERS = ("rca", "exact")
#: Features per view of the moments that choose ``reg="auto"`` for the solvers other than ``"rca"``.
AUTO_FEATURES = 1024


def default_reg_grid() -> np.ndarray:
    """The ridges ``reg="auto"`` chooses from: ``1e-8`` to ``1``, two per decade (17 values)."""
    return log_grid(1e-8, 1.0, 2)


#: ``preconditioner="sample"``: the fit's sample has at least this many rows per feature of a
#: block (32,768 rows for blocks of 4096), so that each block's covariance is measured on
#: several times as many rows as it has features.
SAMPLE_ROWS_PER_FEATURE = 8
#: Largest side of the whitened cross-covariance whose top singular vectors come from the
#: eigenvectors of its smaller Gram matrix (LAPACK, any multiplicity); above it, ARPACK.
GRAM_SIDE = 2048


def _top_singular(T: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` left and right singular vectors of ``T``.

    Up to :data:`GRAM_SIDE` columns or rows: the top eigenvectors of the smaller Gram
    matrix (``T^T T`` or ``T T^T``), the other side by ``T v / sigma``. ARPACK needs
    thousands of products when the top singular values repeat (few rows against many
    features: many correlations of 1), the Gram matrix does not. Larger: ARPACK from a
    fixed start, the dense SVD if it does not converge.
    """
    if 2 * k >= min(T.shape) or min(T.shape) <= 512:
        try:
            U, _, Vt = scipy.linalg.svd(T, full_matrices=False, check_finite=False)
        except np.linalg.LinAlgError:  # gesdd fails to converge on some BLAS kernels: the slower QR iteration
            U, _, Vt = scipy.linalg.svd(T, full_matrices=False, check_finite=False, lapack_driver="gesvd")
        return U[:, :k], Vt[:k].T
    if min(T.shape) <= GRAM_SIDE:
        wide = T.shape[1] > T.shape[0]
        S = T.T if wide else T
        n = S.shape[1]
        w, V = scipy.linalg.eigh(S.T @ S, subset_by_index=[n - k, n - 1], check_finite=False)
        w, V = w[::-1], V[:, ::-1]
        sv = np.sqrt(np.maximum(w, 0))
        U = S @ V
        U = np.divide(U, sv, out=np.zeros_like(U), where=sv > np.finfo(np.float64).eps * max(sv[0], 1e-300))
        return (V, U) if wide else (U, V)
    try:
        U, sv, Vt = svds(T, k=k, v0=np.ones(min(T.shape)) / np.sqrt(min(T.shape)), random_state=0)
    except ArpackNoConvergence:  # (nearly) repeated singular values at the k-th: the dense SVD
        U, _, Vt = scipy.linalg.svd(T, full_matrices=False, check_finite=False)
        return U[:, :k], Vt[:k].T
    order = np.argsort(sv)[::-1]
    return U[:, order], Vt[order].T


def cca_held_out_scores(fit: Moments, held: Moments, mx: int, grid: np.ndarray, k: int) -> np.ndarray:
    """For each ridge of ``grid``: the held-out correlation sum of the top ``k`` canonical pairs fitted on ``fit``.

    The pairs solve regularised CCA on the moments ``fit`` of the features (the first ``mx``
    of ``X``, then those of ``Y``); each pair's correlation is then taken on the moments
    ``held`` of other rows: ``a^T Hxy b / sqrt(a^T Hxx a b^T Hyy b)``, what
    :meth:`KernelCCA.score` gives on those rows (a constant variate counts 0). One
    eigendecomposition per view serves every ridge; each ridge then costs a top-``k``
    SVD of the ``Mx x My`` whitened cross-covariance.
    """
    wx, Vx = covariance_eigen(fit.cov[:mx, :mx])
    wy, Vy = covariance_eigen(fit.cov[mx:, mx:])
    P = Vx.T @ fit.cov[:mx, mx:] @ Vy
    Hxx, Hyy, Hxy = held.cov[:mx, :mx], held.cov[mx:, mx:], held.cov[:mx, mx:]
    scores = np.empty(len(grid))
    for i, reg in enumerate(grid):
        dx, dy = 1.0 / np.sqrt(wx + reg), 1.0 / np.sqrt(wy + reg)
        U, V = _top_singular(dx[:, None] * P * dy, k)
        A, B = Vx @ (dx[:, None] * U), Vy @ (dy[:, None] * V)  # the directions on the features
        num = np.einsum("ij,ij->j", A, Hxy @ B)
        var_u = np.maximum(np.einsum("ij,ij->j", A, Hxx @ A), 0)
        den = np.sqrt(var_u * np.maximum(np.einsum("ij,ij->j", B, Hyy @ B), 0))
        scores[i] = float(np.divide(num, den, out=np.zeros_like(num), where=den > 0).sum())
    return scores


class HeldOutRidge:
    """``reg="auto"`` of the rca moments: fit on most row chunks, score on the held-out ones, solve on all.

    Called by :func:`~dsgd_dask.baselines.rcca.randomized_cca` in place of its moments pass:
    one read of the rows (:func:`~dsgd_dask.engine.rca.split_moments` on the held-out split
    of :func:`~dsgd_dask.estimators._auto.held_out_view`), every ridge of ``grid`` scored by
    :func:`cca_held_out_scores`, and the moments of all the rows
    (:func:`~dsgd_dask.engine.rca.pooled_moments`) returned with the best ridge. After the
    call ``reg``, ``grid`` and ``scores`` hold the choice.
    """

    def __init__(self, k: int, grid: np.ndarray, verbose: bool = False, desc: str = "KernelCCA(solver='rca')"):
        self.k, self.grid, self.verbose, self.desc = int(k), np.asarray(grid, dtype=np.float64), verbose, desc

    def __call__(self, view, fmap, shift, mx: int, clock):
        if view.n_samples < MIN_ROWS:  # too few rows to hold any out: the fallback ridge, one pass
            self.reg, self.grid, self.scores = FALLBACK, np.array([FALLBACK]), np.array([np.nan])
            _, mean, cov, run = rca_moments(view, fmap, shift, center=True, clock=clock, verbose=self.verbose,
                                            desc=self.desc if self.verbose else None, name="rcca-moments")
            return mean, cov, self.reg, run
        chunked, fit_chunks, held_chunks = held_out_view(view)
        fit, held, run = split_moments(chunked, fmap, shift, fit_chunks, held_chunks, clock=clock,
                                       verbose=self.verbose, desc=self.desc if self.verbose else None,
                                       name="rcca-moments")
        with one_blas_thread():  # the same scores, so the same choice, on any machine
            self.scores = cca_held_out_scores(fit, held, mx, self.grid, self.k)
        self.reg = float(self.grid[best_index(self.scores)])
        pooled = pooled_moments(fit, held)
        return pooled.mean, pooled.cov, self.reg, run

_SHARED_PARAMS = """\
    n_components : int, default=2
        Number of pairs of functions ``k``.
    kernel_x, kernel_y : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family of each view.
    bandwidth_x, bandwidth_y : "median" or float, default="median"
        Length scale of each view's kernel; ``"median"``: the median trick on a seeded
        sample of that view (the same sample for every solver).
    kernel_params_x, kernel_params_y : dict, optional
        Shape parameters of each view's kernel (``{"nu": ...}`` for matern,
        ``{"order": ...}`` for arccos).
    features : {"nystroem", "fourier", "fourier_pairs"}, default="nystroem"
        How the functions are represented: kernel sections at seeded landmark rows (the
        same rows of both views), or random Fourier blocks regenerated from their seeds
        (the papers' blocks: cosines with random phases), or ``[cos, sin]`` pairs of each
        frequency (``"fourier_pairs"``: Dai et al.'s features, less variance for as many
        features and half the products; ``"dsgd"`` and, for kernel CCA, ``"rca"``); each
        view has its own seeds. ``solver="exact"`` takes every training row as a landmark
        (``"nystroem"`` only).
    n_features : int or "auto", default="auto"
        Feature budget ``M`` per view, met exactly: an integer that no blocks can make
        up (see ``block_size``), or more Nyström landmarks than rows, is a
        ``ValueError`` naming valid budgets. ``"auto"``: ``min(4096, max(1024, 2 n))``
        in whole blocks (Nyström: at most the ``n`` rows). ``solver="exact"`` ignores
        it (``n_features_`` is then ``n``). An integer from 1 to ``2**24`` (128 MiB of
        float64 coefficients per function): a larger budget, or one that is not an
        integer, is refused before any data are read, naming the range.
    block_size : int or "auto", default="auto"
        Features per block, at least ``n_components``; an integer ``n_features`` must
        be a multiple of it. ``"auto"``: ``n_features`` in equal blocks of at most 1024
        Nyström landmarks or 256 Fourier features (for ``n_features="auto"``: blocks of
        1024, at most ``n``, or 256). ``"dsgd"`` grows the functions by one block per
        step; the passes and ``"rca"`` use all blocks at once.
    batch_size : int, default=256
        Rows per step (``"dsgd"``).
    max_iter : int or "auto", default="auto"
        Most iterations (``n_iter_``): steps for ``"dsgd"`` (``"auto"``: ten passes over
        the data, between 500 and 5000 steps); full-data passes for ``"lobpcg"``
        (``"auto"``: 30). ``"rca"`` and ``"exact"`` have one iteration and ignore it.
    shuffle_chunks : int, default=1
        ``"dsgd"``: for chunked inputs, how many chunks (in a seeded random order per
        epoch) have their rows shuffled together.
    n_partitions : int, default=1
        ``"dsgd"``: every mini-batch split over this many slabs of the data, each part's
        sums computed where its rows live, reduced before one update.
    eta0 : float, default=0.5
        ``"dsgd"``: ``theta_0`` of the step size ``eta_t = theta_0 / (lambda_1 (1 + theta_1 t))``,
        relative to the largest eigenvalue ``lambda_1`` of the first block's covariance
        (either view) on a sample, so that the default works on any data scale.
    eta_decay : float, default=0.01
        ``"dsgd"``: ``theta_1`` of the step size.
    average : bool or int, default=False
        ``"dsgd"``: the model is made of the mean of the iterates (Polyak-Ruppert
        averaging), not of the last one: at a decaying step size the mean carries less
        of the steps' noise. ``True``: the iterates of every step; an integer ``r``: of
        every step from the one at whose end the rows seen reach ``r`` (rows, as
        scikit-learn's ``SGDClassifier(average=r)`` counts them); ``False`` or 0: the
        last iterate. A block added after the mean began counts as zero in the iterates
        before it. The mean is kept beside the coefficients (twice their memory), saved
        with checkpoints and models, and goes on through :meth:`partial_fit`. The other
        solvers ignore it.
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the features of ``"dsgd"``, ``"lobpcg"`` and ``"rca"`` with Fourier
        features; sums and coefficients are float64. ``"rca"`` with Nyström features
        and ``"exact"`` compute in float64.
    cache_bytes : int >= 0, optional
        Memory budget for cached Fourier blocks, in bytes (``None``: a quarter of the free
        memory, at most 4 GiB; 0 regenerates every block at every use).
    checkpoint : str or Path, optional
        Zarr group where :meth:`fit` saves its state (``"dsgd"``: every
        ``checkpoint_every`` steps; ``"lobpcg"``: after every pass, with its
        ``convergence_`` records), atomically; an existing checkpoint of the same fit is
        resumed (the same final model, bit for bit), one of another fit, or of another
        solver, refused. ``"rca"`` (one pass) and ``"exact"`` ignore it. :meth:`partial_fit`
        refuses it (a ``ValueError``): the state of a stream is the estimator, saved by
        :meth:`save`.
    checkpoint_every : int, default=100
        Steps between checkpoints (``"dsgd"``).
    verbose : bool, default=False
        Show a progress bar of the steps or passes (``"lobpcg"``: with the measure of
        the last pass; ``"rca"``: its one pass).
    random_state : int, RandomState instance or None, default=None
        Root seed of the bandwidth sample, the feature blocks, the landmarks and the
        mini-batch shuffles (the same landmarks and Fourier blocks for every solver)."""

_SHARED_ATTRIBUTES = """\
    solver_ : str
        The solver that ran (``"auto"`` resolved); ``"dsgd"`` after :meth:`partial_fit`.
    models_ : tuple of KernelExpansion
        The fitted ``f`` (on ``x``'s features) and ``g`` (on ``y``'s), centred on the fit
        sample (``"rca"``, ``"exact"``: on the training rows). ``"exact"``: kernel sections
        at every training row, their coefficients the centred dual coefficients;
        ``"rca"`` with Nyström features: sections at the landmarks, the joint whitening
        folded into the coefficients.
    bandwidth_ : tuple of float
        The bandwidths of the two views.
    kernel_ : tuple of KernelSpec
        The kernels of the two views, with their bandwidths.
    n_features_ : int
        Features per view in the model: ``n_features`` when it is an integer (``"dsgd"``
        grows one block per step, so :meth:`fit` refuses ``max_iter`` below the number of
        blocks, and a stream reaches it after that many steps); the training rows for
        ``"exact"``.
    n_iter_ : int
        Iterations: steps taken (``"dsgd"``), full-data passes (``"lobpcg"``), 1 for
        ``"rca"`` (its pass) and ``"exact"`` (its solve).
    convergence_ : list of dict
        One record per iteration run: per chunk task of steps for ``"dsgd"`` (at its
        last step), per pass for ``"lobpcg"``, one for ``"rca"`` and ``"exact"``. Each
        holds ``iteration`` (steps or passes so far, or 1), ``rows`` (rows seen so far),
        ``seconds`` (since the start of the fit) and ``measure`` (what ``tol`` is
        compared with: ``"lobpcg"``, the largest change of one of the top
        ``n_components`` canonical correlations over the pass, ``inf`` after the
        first; NaN for the other solvers, which have no stopping test); ``"lobpcg"``
        records add ``correlations`` (the top ``n_components`` after the pass).
    seed_ : int
        Root seed of the fit.
    n_features_in_, n_features_in_y_ : int
        Columns of ``X`` and of ``Y``."""


class _TwoViewEstimator(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ComponentStepEstimator):
    _views = ("X", "Y")
    _parameter_constraints: ClassVar[dict] = {"n_components": COUNT, **TWO_VIEW_KERNELS, **STEPS}

    def _auto_solver(self, features: str) -> str:
        """The solver ``solver="auto"`` runs with these features."""
        return "dsgd"

    def _resolved_solver(self) -> str:
        """``solver`` checked against the solver table (before any work), ``"auto"`` resolved."""
        solver = check_solver(self, self.features)
        return self._auto_solver(self.features) if solver == "auto" else solver

    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, Y, *, callback=None):
        """Fit the pairs of functions on the rows of ``(X, Y)`` with the chosen solver.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d_x)
        Y : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d_y)
            Row-aligned with ``X`` (same number of rows; dask inputs are rechunked lazily
            to the same row chunks).
        callback : callable, optional
            ``callback(n_iter, (model_x, model_y))`` with the raw expansions of the current
            functions: after every chunk task of steps (``"dsgd"``; fetches the state from
            a cluster) or every pass (``"lobpcg"``: the top ``n_components`` Ritz pairs,
            after the pass's checkpoint is written, so that an exception raised by the
            callback interrupts a fit that resumes after that pass). Not called by
            ``"rca"`` and ``"exact"``.

        Returns
        -------
        self
        """
        solver = self._resolved_solver()
        self.convergence_ = []
        self._run_solver = solver
        self._begin_reg()
        try:
            if solver != "rca" and self._reg_is_auto():
                self._chosen_reg = self._select_reg(X, Y)
            if solver in DIRECT_SOLVERS:
                self._fit_direct(X, Y, solver)
            else:
                self._fit(X, Y, callback=callback)
        finally:
            del self._run_solver
            self.__dict__.pop("_chosen_reg", None)
        self.solver_ = solver
        return self

    # -- the ridge ("auto": chosen on held-out row chunks) ------------------------------------
    def _reg_is_auto(self) -> bool:
        """Whether the ridge is chosen during :meth:`fit` (``reg="auto"``)."""
        return False

    def _begin_reg(self) -> None:
        """Forget an earlier fit's choice of the ridge."""

    def _select_reg(self, X, Y) -> float:
        """The ridge ``reg="auto"`` gives the solvers other than ``"rca"`` (an extra pass)."""
        raise NotImplementedError

    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def partial_fit(self, X, Y):
        """One pass of doubly stochastic steps over ``(X, Y)`` as the next batch of a stream.

        The first call initialises (as ``solver="dsgd"``). Only with ``solver="auto"`` or
        ``"dsgd"``, and only on a model fitted by steps (a model fitted by another solver,
        ``"lobpcg"`` under ``"auto"`` included, raises a ``ValueError``). The ridge of a
        :class:`KernelCCA` stays fixed over the stream: a numeric ``reg``; with
        ``reg="auto"``, the ``reg_`` of the fit the stream continues, or on a first call
        the value chosen on held-out row chunks of that first batch (as :meth:`fit` does
        for ``"dsgd"``: one extra pass over the batch).

        Parameters
        ----------
        X, Y : row-aligned inputs as for :meth:`fit`

        Returns
        -------
        self
        """
        check_partial_fit(self)
        if getattr(self, "solver_", "dsgd") != "dsgd":
            raise ValueError(f"this model was fitted by solver={self.solver_!r}; partial_fit continues fits of "
                             f"doubly stochastic steps only: stream into a new {type(self).__name__}, or fit with "
                             "solver='dsgd'")
        first = not hasattr(self, "state_")
        if first:
            self.convergence_ = []
        self._run_solver = "dsgd-stream"
        try:
            if first:
                self._begin_reg()
                if self._reg_is_auto():  # chosen on the first batch, then fixed for the stream
                    self._chosen_reg = self._select_reg(X, Y)
            self._partial_fit(X, Y)
        finally:
            del self._run_solver
            self.__dict__.pop("_chosen_reg", None)
        self.solver_ = "dsgd"
        return self

    @accepts_storage_options
    def transform(self, X, Y=None):
        """The fitted functions on ``X`` (and ``Y``).

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, d_x)
        Y : same kinds, of shape (n_samples, d_y), optional

        Returns
        -------
        U : ndarray, dask array or DataArray of shape (n_samples, n_components)
            ``f_i(X)``, centred on the fit sample; lazy for dask and dask-backed xarray
            inputs (one task per row chunk, the model one key of the graph); a DataArray
            in gives a DataArray with dims ``(sample_dim, "component")``.
        V : same, only when ``Y`` is given
            ``g_i(Y)``.
        """
        check_is_fitted(self, "models_")
        U = self._transform_view(0, X, "x")
        if Y is None:
            return U
        return U, self._transform_view(1, Y, "y")

    @accepts_storage_options
    def score(self, X, Y):
        """Sum over the components of the correlation of ``f_i(X)`` with ``g_i(Y)`` (computed).

        The papers' measure (top-``k`` correlation sum on held-out rows); lazy inputs are
        projected and the variates computed with one ``dask.compute``. A component with a
        constant variate counts 0.
        """
        U, V = dask.compute(*self.transform(X, Y))
        return float(paired_correlations(np.asarray(U), np.asarray(V)).sum())

    # -- parameters --------------------------------------------------------------------------
    def _check_params(self, n_samples: int, solver: str | None = None) -> dict:
        solver = solver or self.__dict__.get("_run_solver", "dsgd")
        stream = solver == "dsgd-stream"
        solver = "dsgd" if stream else solver
        for v in (0, 1):  # each kernel with its kernel_params, before any data are read
            parse_kernel(self._view_param("kernel", v), 1.0, self._view_param("kernel_params", v))
        if solver == "exact":  # every row a landmark: no budget, blocks or steps
            k = int(self.n_components)
            if k > n_samples:
                raise ValueError(f"n_components={k} must be <= n_samples={n_samples}")
            check_two_view_size(n_samples, f"{type(self).__name__}(solver='exact')")
            p = {"n_components": k, "features": "nystroem"}
        else:
            p = self._check_common(n_samples, whole_budget=solver == "rca")
        if solver == "dsgd" and not stream and self.n_features != "auto" and p["max_iter"] < p["n_blocks"]:
            # the steps grow the functions by one block per step
            raise ValueError(f"max_iter={p['max_iter']} steps grow only {p['max_iter']} of the {p['n_blocks']} "
                             f"blocks of n_features={self.n_features}: use max_iter >= {p['n_blocks']}, or fewer "
                             "features")
        p["solver"] = solver
        return p

    # -- one pass ("rca") and the dense kernel ("exact") --------------------------------------
    def _direct_reg(self) -> float | None:
        """The ridge of the direct solves (``None``: the cross-covariance SVD)."""
        return None

    def _rca_choice(self, k: int):
        """The :class:`HeldOutRidge` of an rca fit with ``reg="auto"``, else ``None``."""
        return None

    def _set_reg(self, reg: float, grid: np.ndarray, scores: np.ndarray) -> None:
        """Record the ridge of the fit (no ridge here)."""

    def _fit_direct(self, X, Y, solver: str) -> None:
        """Fit by one pass of feature moments (``"rca"``) or by the dense kernel matrices (``"exact"``)."""
        vx, vy, view = self._validate_pair(X, Y, reset=True)
        n = view.n_samples
        p = self._params = self._check_params(n, solver)
        k = p["n_components"]
        dtype, cache = self.compute_dtype, self.cache_bytes
        self.seed_ = self._seed(self.random_state)
        clock = Clock()
        sample = sample_rows(view, N_SAMPLE, self.seed_)
        specs = tuple(self._view_kernels(sample))
        if solver == "exact":
            X_fit, Y_fit = materialise_pair(vx, vy)
            values, models = exact_two_view(*specs, X_fit, Y_fit, self._direct_reg(), k,
                                            (view_seed(self.seed_, 0), view_seed(self.seed_, 1)))
            records = [record(1, n, clock(), None)]
        else:  # one pass of the driver for the moments, then the dense solve
            choose = self._rca_choice(k)
            values, models, run = randomized_cca(view, self.n_features_in_, specs, sample, k, self._direct_reg(),
                                                 p["features"], p["n_blocks"], p["block_size"], self.seed_, dtype,
                                                 cache, clock=clock, verbose=self.verbose, choose=choose)
            records = run.records
            if choose is not None:
                self._set_reg(choose.reg, choose.grid, choose.scores)
        for name in ("state_", "_config", "_rule", "_sample", "_n_calls"):  # a previous fit's steps
            self.__dict__.pop(name, None)
        for model in models:
            model.token = model_fingerprint(model)
        self._features = tuple(m.features for m in models)
        self.models_ = models
        self._set_values(values)
        self.kernel_ = specs
        self.bandwidth_ = tuple(s.bandwidth for s in specs)
        self.n_features_ = models[0].coef.shape[0]
        self._n_features_out = k
        self.n_iter_ = 1
        self.convergence_ = records

    def _set_values(self, values: np.ndarray) -> None:
        raise NotImplementedError

    # -- persistence -------------------------------------------------------------------------
    @classmethod
    def _from_payload(cls, attrs: dict, arrays: dict):
        est = super()._from_payload(attrs, arrays)
        if not hasattr(est, "solver_"):  # a store written before the solver was a parameter: steps
            est.solver_ = "dsgd"
        return est


class _LobpcgSolver:
    """Block LOBPCG for kernel CCA (``KernelCCA(solver="lobpcg")``) as a pass solver of the driver.

    Each pass gives ``Cxx A``, ``Cxy B``, ``Cyy B`` and ``Cyx A`` for the bases ``A``, ``B``
    (:func:`~dsgd_dask.engine.passes.cross_request`); :func:`~dsgd_dask.rules.solutions.cca_ritz`
    solves the problem restricted to them, and the next bases hold the Ritz vectors, the
    preconditioned residuals of the top ``k`` and the previous top ``k`` Ritz vectors.

    The state: the bases ``Ax``, ``By``; after a pass also the Ritz values ``rho`` (all of
    the bases' width), the top ``k`` Ritz vectors ``a``, ``b`` and the mean features
    ``mean_x``, ``mean_y``. The measure is the largest change of one of the top ``k``
    correlations over the pass (``inf`` after the first); a record's extra entry
    ``correlations`` holds the top ``k``.
    """

    name = "lobpcg"
    measure_name = "correlation_change"

    def __init__(self, features: tuple, n_blocks: int, cols: tuple, shifts: tuple, preconditioners, start: tuple,
                 k: int, width: int, tol: float):
        self.features = tuple(features)
        self.n_blocks = int(n_blocks)
        self.cols = cols
        self.shifts = shifts
        self.precond = preconditioners
        self._start = start
        self.k, self.width, self.tol = int(k), int(width), float(tol)

    def start(self) -> dict:
        return {"Ax": self._start[0], "By": self._start[1]}

    def plan(self, state: dict):
        return cross_request(self.features, self.n_blocks, state["Ax"], state["By"], self.shifts, self.cols)

    def update(self, state: dict, totals) -> Update:
        Ax, By, k = state["Ax"], state["By"], self.k
        sums = cross_covariances(totals, self.features, self.shifts)
        rho, a, b, res_a, res_b = cca_ritz(Ax, By, sums, self.precond[0].penalty(Ax), self.precond[1].penalty(By),
                                           self.width)
        change = float(np.abs(rho[:k] - state["rho"][:k]).max()) if "rho" in state else float("inf")
        keep = [a, self.precond[0](res_a[:, :k])], [b, self.precond[1](res_b[:, :k])]
        if "a" in state:  # the previous Ritz vectors: the "locally optimal" third block
            keep[0].append(state["a"])
            keep[1].append(state["b"])
        new = {"Ax": orthonormal(np.hstack(keep[0])), "By": orthonormal(np.hstack(keep[1])), "rho": rho,
               # contiguous, as they come back from a checkpoint: the same products either way
               "a": np.ascontiguousarray(a[:, :k]), "b": np.ascontiguousarray(b[:, :k]), "mean_x": sums.mean_x,
               "mean_y": sums.mean_y}
        return Update(new, change, extra={"correlations": [float(r) for r in rho[:k]]})

    def done(self, rec: dict) -> bool:
        return rec["measure"] <= self.tol

    def model(self, state: dict) -> tuple:
        """What the callback gets: the raw expansions of the current top ``k`` pairs of functions."""
        return KernelExpansion(self.features[0], state["a"]), KernelExpansion(self.features[1], state["b"])


@register
class KernelSVD(_TwoViewEstimator):
    __doc__ = f"""Kernel SVD: the top singular functions of the cross-covariance operator of two views.

    Finds functions ``f_i`` of ``x`` and ``g_i`` of ``y`` that maximise ``Cov(f_i(x), g_i(y))``
    with ``||f_i||_H = ||g_i||_H = 1``, orthogonal in each RKHS: the top singular
    functions of the (centred) cross-covariance operator ``Cxy`` (Xie, Liang & Song 2015,
    Alg. 3). Every solver has this destination; they differ in the path.

    Parameters
    ----------
{_SHARED_PARAMS}
    solver : {{"auto", "dsgd", "exact"}}, default="auto"
        How the problem is solved:

        * ``"dsgd"``: doubly stochastic gradient steps (Xie, Liang & Song 2015, Alg. 3):
          each step on a mini-batch adds (or revisits) a feature block of both function
          sets and applies Oja's rule to ``[0 Cxy; Cyx 0]``; then a rotation on a sample
          (see Notes). Streams (:meth:`partial_fit`) and checkpoints.
        * ``"exact"``: the dense ``n x n`` centred kernel matrices of both views and one
          SVD, every training row a landmark (``n_features`` ignored); at most 5000 rows.
        * ``"auto"``: ``"dsgd"``.

    Attributes
    ----------
    singular_values_ : ndarray of shape (n_components,)
        ``Cov(f_i(x), g_i(y))``, decreasing (``"dsgd"``: on the fit sample of 10,000
        rows; ``"exact"``: on all rows).
{_SHARED_ATTRIBUTES}

    Notes
    -----
    **dsgd.** With ``u = F(x)``, ``v = G(y)`` on a batch, ``W = Cov(u, v) + Cov(v, u)``; every
    block ``A_j <- A_j (I - eta W)`` and the step's block gains ``eta Cov(z(x), v)`` (for ``F``;
    symmetrically for ``G``). At the end the pairs are rotated to the singular vectors of
    the ``k x k`` problem on a seeded sample of 10,000 rows from every chunk, with the
    functions' norms taken in the blocks' feature space (``J`` blocks each approximate
    the kernel: their average kernel; several Nyström blocks are the landmarks whitened
    together and split, so that this average is the Nyström kernel of all of them). The
    functions are orthonormal in the RKHS the features represent: the kernel itself when
    every training row is a landmark.

    **exact.** In the kernel-PCA coordinates ``Phi = U diag(lambda)^{{1/2}}`` of each
    centred kernel matrix the operator is ``Cxy = Phi_x^T Phi_y / n``; its SVD gives
    orthonormal coordinate vectors, i.e. RKHS-orthonormal functions. Cost ``O(n^2 d)``
    for the kernels, ``O(n^3)`` for two eigendecompositions and the SVD.

    References
    ----------
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelSVD
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 3)); Y = np.tanh(X[:, :2]) + 0.1 * rng.normal(size=(600, 2))
    >>> svd = KernelSVD(n_components=2, n_features=512, max_iter=200, random_state=0).fit(X, Y)
    >>> U, V = svd.transform(X, Y)
    >>> svd.solver_, U.shape, V.shape
    ('dsgd', (600, 2), (600, 2))
    >>> exact = KernelSVD(n_components=2, solver="exact", random_state=0).fit(X, Y)
    >>> exact.n_features_
    600
    """

    _parameter_constraints: ClassVar[dict] = {**_TwoViewEstimator._parameter_constraints,
                                              **solver_constraint("KernelSVD")}

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, solver="auto",
                 features="nystroem", n_features="auto", block_size="auto", batch_size=256, max_iter="auto",
                 shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay=0.01, average=False,
                 compute_dtype="float32", cache_bytes=None, checkpoint=None, checkpoint_every=100, verbose=False,
                 random_state=None):
        self.n_components = n_components
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.bandwidth_x = bandwidth_x
        self.bandwidth_y = bandwidth_y
        self.kernel_params_x = kernel_params_x
        self.kernel_params_y = kernel_params_y
        self.solver = solver
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

    def _make_rule(self, columns, guard_limit: float):
        return KSVDRule(columns, True, guard_limit)

    def _initial(self, z, sample, k):
        n = z[0].shape[0]
        _, A, B = cross_svd(z[0].T @ z[1] / n, k)
        return A / np.sqrt(2), B / np.sqrt(2)

    def _final(self, h, norms, sample):
        # the SVD of Cov(u, v) with each set orthonormal in the RKHS: the CCA problem with
        # the norms' Gram matrices as the covariances
        u, v = h
        s, A, B = ridge_cca(norms[0], norms[1], u.T @ v / len(u), 0.0, u.shape[1])
        self.singular_values_ = s
        return A, B

    def _set_values(self, values: np.ndarray) -> None:
        self.singular_values_ = values

    def _values_payload(self) -> dict:
        return {"singular_values": self.singular_values_}

    def _restore_values(self, arrays: dict) -> None:
        self.singular_values_ = arrays["singular_values"]


@register
class KernelCCA(ChosenRidge, _TwoViewEstimator):
    __doc__ = f"""Kernel CCA with a ridge: the top canonical pairs of functions of two views.

    Finds functions ``f_i`` of ``x`` and ``g_i`` of ``y`` solving the regularised kernel
    CCA problem ``Cxy g = rho (Cxx + reg I) f``, ``Cyx f = rho (Cyy + reg I) g`` with the
    (centred) covariance operators of each view: the pairs of maximal
    ``Cov(f, g) / sqrt((Var f + reg ||f||_H^2) (Var g + reg ||g||_H^2))``, uncorrelated
    across pairs (Fukumizu, Bach & Gretton 2007). Every solver has this destination,
    with the same ``reg`` in the same unit; they differ in the path (and in how exactly
    their features represent the kernel: see ``reg``).

    Parameters
    ----------
{_SHARED_PARAMS}
    reg : float or "auto", default="auto"
        The ridge ``reg > 0`` added to each view's covariance operator, absolute, in
        units of the kernel (``k(x, x) = 1`` for the shift-invariant kernels): it
        penalises ``reg ||f||_H^2`` against ``Var f``, the same for every solver. In the
        dual on ``n`` centred training rows the problem is
        ``[0, K~x K~y; K~y K~x, 0] w = rho [K~x^2 + n reg K~x, 0; 0, K~y^2 + n reg K~y] w``.
        ``||.||_H`` is the norm of the RKHS the features represent: the kernel itself
        for ``"exact"``, and for Nyström features under ``"lobpcg"`` and ``"rca"``
        (functions in the span of the landmarks' kernel sections: with every training
        row a landmark, the exact problem); the random-feature kernel ``z z^T / J`` of
        Fourier features; under ``"dsgd"`` the same (several Nyström blocks are the
        landmarks whitened together and split; see Notes). Without ``reg``
        kernel CCA is ill-posed: any two views of distinct rows reach correlation 1.
        (scikit-learn has no kernel CCA.)

        ``"auto"``: chosen during :meth:`fit` from :func:`default_reg_grid` (``1e-8`` to
        ``1``, two per decade) by the sum of the top ``n_components`` canonical
        correlations on held-out rows: the rows are cut into at least 10 row chunks
        (each input chunk into equal parts) and every fifth chunk by index is held out
        (about 20 %, the same chunks on any machine); the pairs are fitted on the other
        chunks for every ridge and scored on the held-out ones, then the model is
        fitted on all the rows with the best (ties: the larger ridge). ``"rca"`` takes
        the moments of both parts in its one read of the rows (two reductions instead of
        one, no extra pass; one ``M x M`` eigendecomposition per view and a top-``k``
        SVD per ridge, and twice the ``(2M)^2`` float64 moments in memory while
        choosing). ``"lobpcg"``, ``"dsgd"`` and ``"exact"``: one extra pass before the
        fit, the same choice on the moments of at most 1024 features per view
        (Nyström: that many of the seeded landmarks whitened together; Fourier: the
        first seeded blocks), about ``2 (2 * 1024)^2`` float64 (64 MiB) while choosing.
        A number is used as given, without the split (the fit of earlier versions, bit
        for bit). :meth:`partial_fit` needs a fixed ridge: see there.
    solver : {{"auto", "dsgd", "lobpcg", "rca", "exact"}}, default="auto"
        How the problem is solved:

        * ``"dsgd"``: doubly stochastic gradient steps (Xie, Liang & Song 2015, Alg. 4),
          one mini-batch and one feature block per step, then a rotation on a sample
          (see Notes). Streams (:meth:`partial_fit`) and checkpoints.
        * ``"lobpcg"``: full-data passes of a preconditioned block eigensolver on the
          Nyström features (see Notes), until no canonical correlation moves by more
          than ``tol``; checkpoints after every pass. Nyström features only.
        * ``"rca"``: one pass over the data for the mean and joint covariance of both
          views' ``M`` features, then one dense solve (randomized kernel CCA,
          Lopez-Paz et al. 2014); Nyström landmarks whitened jointly, or the seeded
          Fourier blocks of ``"dsgd"`` scaled by ``1 / sqrt(J)``. ``O(M^2)`` memory.
        * ``"exact"``: the dense ``n x n`` centred kernel matrices and one SVD, every
          training row a landmark (``n_features`` ignored); at most 5000 rows.
        * ``"auto"``: ``"lobpcg"`` with Nyström features, ``"dsgd"`` with Fourier
          features.
    tol : float, default=1e-3
        ``"lobpcg"``: stop after the first pass that changes none of the top
        ``n_components`` canonical correlations by more than ``tol`` (the ``measure`` of
        its ``convergence_`` records).
    preconditioner : {{None, "block", "sample"}}, default=None
        ``"dsgd"``: how a step feeds its block. ``None``: the gradient through the block
        (Alg. 4 of the paper), which moves a direction of the features by its variance,
        so the directions of small variance that kernel CCA at a small ridge needs take
        about ``1 / (eta variance)`` steps. ``"block"``: that gradient multiplied by the
        inverse of the block's covariance on the batch, ``(C + epsilon I)^{{-1}}`` with
        ``C = Cov(z)`` and ``epsilon = preconditioner_jitter tr(C) / m``: every direction
        of the block moves at the same rate (a generalised Oja step in the metric of the
        covariance operator). ``eta0`` is then relative to 1, not to the top eigenvalue;
        each step costs ``O(B m^2 + m^3)`` more. The ridge still shrinks every block, so
        at the fixed points ``reg`` penalises ``J`` times each block's ``Var z_t A_t +
        epsilon |A_t|^2`` instead of ``||f||_H^2``: the pairs of the other solvers as
        ``reg`` goes to 0 (the small ridges where the plain steps do not converge), not
        at larger ridges. ``"sample"``: ``C`` is the block's covariance on the fit's sample
        (10,000 rows, or 8 per feature of a block if that is more: 32,768 for blocks of
        4096) instead of the batch's, measured and factored once per block (in
        each process that runs steps) and reused by every step that feeds the block: a
        metric of full rank when the batch is narrower than the block, and no ``B m^2``
        moment per step, for ``n_blocks m^2`` float64 numbers per view in memory (334 MB
        for 10 blocks of 2048). On the 60,000 MNIST halves at the paper's settings
        (20,480 features in blocks of 2048, batches of 1024, ``reg=1e-7``, 300 steps,
        top-50 sum on the test digits) both reach 40.4 at ``eta0=0.1``, ``"sample"`` in
        half the time per step; at the default ``eta0=0.5`` the steps stall (26.1 for
        ``"block"``). With ``"sample"`` the steps start from the first block's canonical
        pairs on the whole sample in that block's metric (``Cxx + epsilon I``, its factor
        kept for the steps), not from a ridge CCA on 2000 sample rows: on 50,000 MNIST
        training halves at the paper's settings (blocks of 4096 features, jitter 0.8,
        ``eta0=0.2``, ``eta_decay=0.003``; top-50 sum on 10,000 held-out training digits)
        42.36, 43.34 and 43.54 after 49, 196 and 343 steps, against 40.37, 42.22 and 42.60
        from the former start. A model loaded from a store has no sample and
        cannot continue by steps with ``"sample"``.
    preconditioner_jitter : float, default=0.1
        ``"block"`` and ``"sample"``: ``epsilon`` relative to the mean eigenvalue ``tr(C) / m``
        of the block's covariance; a batch of ``B`` rows gives a covariance of rank below
        ``B``, so the jitter is what keeps a block as wide as the batch from fitting its
        noise. On the 60,000 MNIST halves (``reg=1e-7``, top-50 correlation sum on the
        10,000 test digits): the paper's blocks of 2048 Fourier features on batches of
        1024, 4096 features per view, 200 steps: 38.4 at ``0.1``, 29.2 at ``0.01`` (500
        steps: 40.2 at ``0.1``; the plain steps 29.5); blocks of 256 on batches of 1024,
        1024 features, 500 steps: 34.8, 35.1, 35.8 and 34.6 at ``1e-3`` to ``1`` (plain:
        24.3; ``"rca"`` on the same blocks: 37.6). Blocks of 512 on batches of 256 (1024
        features, 800 steps) preferred ``0.01`` (32.0 against 29.7).

    Attributes
    ----------
    correlations_ : ndarray of shape (n_components,)
        The regularised canonical correlations ``rho_i``, decreasing (``"dsgd"``: on the
        fit sample, 10,000 rows or more with ``preconditioner="sample"``; the other
        solvers: on all rows).
    reg_ : float
        The ridge of the fit: ``reg``, or the value ``reg="auto"`` chose.
    reg_grid_ : ndarray of shape (n_reg,)
        The ridges scored, increasing (a numeric ``reg``: that one value).
    reg_scores_ : ndarray of shape (n_reg,)
        Their held-out scores, the sum of the top ``n_components`` canonical correlations
        on the held-out rows (higher is better; NaN for a numeric ``reg``, not scored).
{_SHARED_ATTRIBUTES}

    Notes
    -----
    **lobpcg.** The functions are ``f = z_x a`` and ``g = z_y b`` on all ``M`` Nyström
    features of each view (``J`` blocks whitened each on its own, ``W`` the
    block-diagonal whitening), and the penalty is ``reg ||f||_H^2 = reg a^T W^T K_LL W a``:
    the problem is kernel CCA on the span of the ``M`` landmarks' kernel sections, the
    one ``"rca"`` with the same ``M`` landmarks solves, without an ``M x M``
    covariance. Each pass over the rows gives ``Cxx A``, ``Cxy B``, ``Cyy B`` and
    ``Cyx A`` for bases ``A``, ``B`` of ``q`` directions each (a tree reduction over row
    chunks, every worker at once), then a Rayleigh–Ritz step: the CCA problem restricted to
    the bases. The next bases hold the Ritz vectors, the residuals preconditioned by
    ``(W^T K_LL^2 W / M + reg W^T K_LL W + ridge W^T W)^{{-1}}`` (the features' second moment on their
    own landmark rows: one Cholesky factor per view, ``M^2`` float64, and the Gram matrix
    ``W^T K_LL W`` in float32, no data pass) and the previous Ritz vectors: a block
    LOBPCG (Knyazev 2001) on the generalized eigenproblem of CCA. A precision ridge
    ``100 eps^2 E|r|^2 |c|^2`` on the coefficients ``c = W a`` of the kernel sections ``r``
    (``eps`` of ``compute_dtype``) is added to each view's penalty: a function whose
    variance is below the round-off of ``r c`` is not resolved by the features (about
    ``1e-10`` here against ``reg``).

    **dsgd.** With ``u = F(x)``, ``v = G(y)`` on a batch and ``W = Cov(u, v) + Cov(v, u)``, every
    block ``A_j <- A_j (I - eta reg W)`` and the step's block gains
    ``eta (Cov(z(x), v) - Cov(z(x), u) W)`` (for ``F``; symmetrically for ``G``). Cycling
    through ``J`` blocks, the fixed points solve the problem above with ``reg`` on
    ``J |A|^2``, the norm in the RKHS of the blocks' average kernel ``z z^T / J``. At the
    end the pairs are rotated to the canonical pairs of the ``k x k`` problem on a seeded
    sample of 10,000 rows from every chunk (more with ``preconditioner="sample"``), and scaled so that
    ``Var f_i + reg ||f_i||^2 = 1``. Fourier blocks are independent draws: their average
    kernel is the random-feature kernel of ``"rca"`` with the same blocks. One Nyström
    block (``n_features <= 1024`` by default, or ``block_size=n_features``) represents the
    kernel on its landmarks exactly: on 600 MNIST half-digits with every row a landmark
    the default 500 steps reach the exact top-5 correlations to 1.5e-4 to 2.1e-4 relative
    and the ordered subspaces to ``sin^2 < 3.3e-3`` (seeds 0 to 3); this is the noise of
    the steps. Several Nyström blocks are the landmarks whitened together
    (``sqrt(J) K_LL^{{-1/2}}``, one ``M x M`` eigendecomposition per fit, at most 8,192
    features) and split into blocks, so that their average kernel is the Nyström kernel
    of all the landmarks, the other solvers' (blocks whitened each on its own would
    average ``J`` coarser kernels: on the same 600 rows in two blocks of 300, 1.1 % to
    1.3 % below the exact correlations). Each step then evaluates the sections of all the
    landmarks; on those two blocks 1000 steps reach the exact correlations to 2.4e-3.

    ``transform`` gives the canonical variates; :meth:`score` the sum of their
    correlations on held-out rows.

    References
    ----------
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015. K. Fukumizu, F. Bach, A. Gretton, "Statistical
    consistency of kernel canonical correlation analysis", JMLR 2007. D. Lopez-Paz,
    S. Sra, A. Smola, Z. Ghahramani, B. Schölkopf, "Randomized nonlinear component
    analysis", ICML 2014. A. Knyazev, "Toward the optimal preconditioned eigensolver:
    locally optimal block preconditioned conjugate gradient method", SISC 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelCCA
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(-2, 2, size=600)
    >>> X = np.c_[np.cos(t), np.sin(t)] + 0.05 * rng.normal(size=(600, 2))
    >>> Y = np.c_[t ** 2, rng.normal(size=600)]
    >>> cca = KernelCCA(n_components=1, n_features=512, random_state=0).fit(X, Y)
    >>> cca.solver_, bool(cca.correlations_[0] > 0.5)
    ('lobpcg', True)
    >>> exact = KernelCCA(n_components=1, solver="exact", random_state=0).fit(X, Y)
    >>> bool(abs(exact.correlations_[0] - cca.correlations_[0]) < 0.01)
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        **_TwoViewEstimator._parameter_constraints, **solver_constraint("KernelCCA"), "reg": RIDGE,
        "tol": POSITIVE, **STEP_PRECONDITIONER, "preconditioner": [StrOptions({"block", "sample"}), None],
        "preconditioner_jitter": [Interval(Real, 0, None, closed="neither")]}

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, reg="auto", solver="auto",
                 tol=1e-3, features="nystroem", n_features="auto", block_size="auto", batch_size=256,
                 max_iter="auto", shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay=0.01, average=False,
                 compute_dtype="float32", cache_bytes=None, preconditioner=None, preconditioner_jitter=0.1,
                 checkpoint=None, checkpoint_every=100, verbose=False, random_state=None):
        self.n_components = n_components
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.bandwidth_x = bandwidth_x
        self.bandwidth_y = bandwidth_y
        self.kernel_params_x = kernel_params_x
        self.kernel_params_y = kernel_params_y
        self.reg = reg
        self.solver = solver
        self.tol = tol
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
        self.preconditioner = preconditioner
        self.preconditioner_jitter = preconditioner_jitter
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.verbose = verbose
        self.random_state = random_state

    def _auto_solver(self, features: str) -> str:
        return "lobpcg" if features == "nystroem" else "dsgd"

    def _check_params(self, n_samples: int, solver: str | None = None) -> dict:
        p = super()._check_params(n_samples, solver)
        # "auto": the value chosen on held-out rows (None until an rca pass chooses it)
        p["reg"] = self.__dict__.get("_chosen_reg") if self._reg_is_auto() else float(self.reg)
        p["tol"] = float(self.tol)
        if p["solver"] == "lobpcg":
            p["max_iter"] = CCA_MAX_PASSES if self.max_iter == "auto" else int(self.max_iter)
        return p

    def _direct_reg(self) -> float:
        return self._params["reg"]

    # -- the ridge ----------------------------------------------------------------------------
    def _rca_choice(self, k: int):
        return HeldOutRidge(k, default_reg_grid(), self.verbose) if self._reg_is_auto() else None

    def _select_reg(self, X, Y) -> float:
        """``reg="auto"`` for ``"lobpcg"``, ``"dsgd"`` and ``"exact"``: one extra pass of rca moments.

        The moments of at most :data:`AUTO_FEATURES` features per view (Nyström: that many
        of the seeded landmark rows, at most the budget, whitened together; Fourier: the
        first seeded blocks of the fit, up to that many features), with the held-out
        split and the grid of the rca solver; the fit then runs with the chosen ridge.
        """
        view = self._validate_pair(X, Y, reset=True)[2]
        n = view.n_samples
        solver = self._run_solver
        p = self._check_params(n, solver)
        seed = self._seed(self.random_state)
        sample = sample_rows(view, N_SAMPLE, seed)
        specs = tuple(self._view_kernels(sample))
        if p["features"] == "nystroem":
            budget = n if solver == "exact" else p["n_blocks"] * p["block_size"]
            n_blocks, block = 1, min(AUTO_FEATURES, budget, n)
        else:
            block = p["block_size"]
            n_blocks = max(1, min(p["n_blocks"], AUTO_FEATURES // block))
        k = min(p["n_components"], n_blocks * block)
        choose = HeldOutRidge(k, default_reg_grid(), self.verbose, desc="KernelCCA(reg='auto')")
        randomized_cca(view, self.n_features_in_, specs, sample, k, None, p["features"], n_blocks, block, seed,
                       self.compute_dtype, self.cache_bytes, verbose=self.verbose, choose=choose)
        self._set_reg(choose.reg, choose.grid, choose.scores)
        return choose.reg

    # -- the passes ("lobpcg") ----------------------------------------------------------------
    def _by_passes(self) -> bool:
        return self.__dict__.get("_run_solver") == "lobpcg"

    def _solve(self, view, callback, checkpointer) -> None:
        if self._params["solver"] == "dsgd":
            super()._solve(view, callback, checkpointer)
            return
        self._fit_passes(view, callback, checkpointer)

    def _pass_setup(self):
        """Shifts, precision ridges, preconditioners (with the Gram matrices) and the starting bases."""
        p = self._params
        J, m, k, reg = p["n_blocks"], p["block_size"], p["n_components"], p["reg"]
        M = J * m
        cols = self._columns()
        sample = self._sample
        rows = int(min(sample.shape[0], max(N_INIT, SHIFT_FLOATS // M)))
        shifts, ridges, z = [], [], []
        for v, f in enumerate(self._features):
            xs = sample[:, cols[v]]
            raw = f.raw_transform(xs[:rows], 0, J).astype(np.float64)
            shifts.append(raw.mean(axis=0))
            ridges.append(precision_ridge(raw, f.dtype, centre=True))
            del raw
            zv = f.transform(xs, 0, 1).astype(np.float64)
            zv -= zv.mean(axis=0)
            z.append(zv)
        precond = [LandmarkPreconditioner(f, J, reg, rkhs=True, ridge=ridges[v])
                   for v, f in enumerate(self._features)]
        self._ridges = ridges
        # the first block of each view is whitened by its own K_LL^{-1/2}: its Gram matrix is
        # the identity on its range, so the start is ridge CCA of the first blocks on the sample
        width = min(k + CCA_OVERSAMPLES, m)
        n = z[0].shape[0]
        _, A0, B0 = ridge_cca(z[0].T @ z[0] / n, z[1].T @ z[1] / n, z[0].T @ z[1] / n, reg, width)
        Ax, By = np.zeros((M, width)), np.zeros((M, width))
        Ax[:m], By[:m] = A0, B0
        return tuple(shifts), precond, orthonormal(Ax), orthonormal(By), width

    def _fit_passes(self, view, callback=None, checkpoint=None) -> None:
        """Block LOBPCG passes on the pass driver, until no correlation moves by more than ``tol``."""
        p = self._params
        k = p["n_components"]
        shifts, precond, Ax, By, width = self._pass_setup()
        solver = _LobpcgSolver(self._features, p["n_blocks"], self._columns(), shifts, precond, (Ax, By), k, width,
                               p["tol"])
        run = run_passes(solver, view, p["max_iter"], callback=callback, checkpoint=checkpoint,
                         verbose=self.verbose, desc="KernelCCA(solver='lobpcg')" if self.verbose else None)
        del solver, precond  # the factors: M^2 float64 per view
        state = run.state
        if "a" not in state:
            raise ValueError("max_iter must allow at least one pass over the data")
        a, b = state["a"], state["b"]
        self.convergence_ = run.records
        self.n_iter_ = run.n_iter
        self.state_ = StepState((a, b), 0, self.state_.eta_scale)
        self.correlations_ = np.asarray(state["rho"][:k], dtype=np.float64)
        models = []
        for f, coef, mean in ((self._features[0], a, state["mean_x"]), (self._features[1], b, state["mean_y"])):
            model = KernelExpansion(f, coef, mean @ coef)
            model.token = model_fingerprint(model)
            models.append(model)
        self.models_ = tuple(models)
        self.n_features_ = a.shape[0]
        self._n_features_out = k

    # -- the steps ("dsgd") --------------------------------------------------------------------
    def _sample_size(self, p: dict) -> int:
        """Rows of the sample: ``preconditioner="sample"`` takes :data:`SAMPLE_ROWS_PER_FEATURE` per block feature."""
        if self.preconditioner == "sample":
            return max(N_SAMPLE, SAMPLE_ROWS_PER_FEATURE * int(p["block_size"]))
        return N_SAMPLE

    def _sample_preconditioner(self, columns) -> SampleBlockPreconditioner:
        rows = self._sample
        return SampleBlockPreconditioner(self._features, tuple(rows[:, c] for c in columns),
                                         self.preconditioner_jitter, center=True)

    def _make_rule(self, columns, guard_limit: float):
        # the one the initial solve measured its block on, if any: its factors are kept
        sample = self.__dict__.pop("_initial_preconditioner", None)
        if sample is None and self.preconditioner == "sample" and getattr(self, "_sample", None) is not None:
            sample = self._sample_preconditioner(columns)  # a loaded model has no sample: no steps
        return KCCARule(columns, True, guard_limit, self._params["reg"], preconditioner=self.preconditioner,
                        jitter=self.preconditioner_jitter, sample=sample)

    def _partial_fit(self, X, Y, **target):
        rule = getattr(self, "_rule", None)
        if hasattr(self, "state_") and getattr(rule, "preconditioner", None) == "sample" and rule.sample is None:
            raise ValueError("this model was fitted with preconditioner='sample', which measures each block on the "
                             "fit's sample of rows; a loaded model does not keep the sample and cannot continue by "
                             "steps: fit it again")
        return super()._partial_fit(X, Y, **target)

    def _curvature(self, lam: float) -> float:
        # the preconditioned block has a unit covariance
        return 1.0 if self.preconditioner in ("block", "sample") else lam

    def _initial(self, z, sample, k):
        self.__dict__.pop("_initial_preconditioner", None)
        if self.preconditioner == "sample":
            # the canonical pairs of the first block on the whole sample, in the metric the
            # steps move that block in: a start of the steps' own flow on every sample row
            pre = self._initial_preconditioner = self._sample_preconditioner(self._columns())
            _, A, B = pre.canonical_pairs(0, k)
        else:
            n = z[0].shape[0]
            _, A, B = ridge_cca(z[0].T @ z[0] / n, z[1].T @ z[1] / n, z[0].T @ z[1] / n, self._params["reg"], k)
        return A / np.sqrt(2), B / np.sqrt(2)

    def _final(self, h, norms, sample):
        u, v = h
        n = len(u)
        reg = self._params["reg"]
        rho, A, B = ridge_cca(u.T @ u / n + reg * norms[0], v.T @ v / n + reg * norms[1], u.T @ v / n, 0.0,
                              u.shape[1])
        self.correlations_ = rho
        return A, B

    def _set_values(self, values: np.ndarray) -> None:
        self.correlations_ = values

    def _values_payload(self) -> dict:
        return {"correlations": self.correlations_, "reg_grid": self.reg_grid_, "reg_scores": self.reg_scores_}

    def _restore_values(self, arrays: dict) -> None:
        self.correlations_ = arrays["correlations"]
        reg = float(self._params["reg"])
        if "reg_grid" in arrays:
            self._set_reg(reg, arrays["reg_grid"], arrays["reg_scores"])
        else:  # a store written before the ridge was chosen by the data: the numeric reg
            self._set_reg(reg, np.array([reg]), np.array([np.nan]))
