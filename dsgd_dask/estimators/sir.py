"""KernelSIR: kernel sliced inverse regression by doubly stochastic steps, one pass of feature moments, or exactly."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import ClassVar

import numpy as np
import scipy.linalg
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.baselines._moments import FourierMap, NystroemMap
from dsgd_dask.baselines.exact_two_view import check_two_view_size, exact_sir, materialise_pair
from dsgd_dask.baselines.rca import SHIFT_ROWS, sections
from dsgd_dask.engine.rca import Moments, pooled_moments, rca_moments, split_moments
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
from dsgd_dask.estimators._constraints import COUNT, KERNEL, RIDGE, STEPS, solver_constraint
from dsgd_dask.estimators._solvers import Clock, check_partial_fit, check_solver, record
from dsgd_dask.estimators._steps import model_fingerprint, register
from dsgd_dask.estimators.components import N_SAMPLE, ComponentStepEstimator, feature_blocks
from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.features.kernels import kernel_matrix
from dsgd_dask.features.nystroem import inverse_sqrt
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.model.store import write_store
from dsgd_dask.rules.sir import KSIRRule, sliced_directions_low_rank
from dsgd_dask.rules.solutions import between_slice_covariance, slice_sums, sliced_directions
from dsgd_dask.streams.batches import landmark_rows, sample_rows, view_seed
from dsgd_dask.streams.slices import Slicer

#: The arrays that define a fitted :class:`Slicer`, saved with the model.
SLICER_FIELDS = ("values", "edges", "centroids", "mean", "scale")
#: ``solver="auto"`` in :meth:`KernelSIR.fit`: the dense solve up to this many rows (an
#: ``n x n`` eigendecomposition), one pass of moments or the steps beyond.
AUTO_EXACT_ROWS = 5000
#: ``solver="auto"`` beyond :data:`AUTO_EXACT_ROWS`: one pass of moments (``"rca"``) up to this
#: many features (their float64 moments twice while ``reg="auto"`` chooses: 1 GiB), the steps beyond.
AUTO_RCA_FEATURES = 8192
#: Features of the moments that choose ``reg="auto"`` for the solvers other than ``"rca"``.
AUTO_FEATURES = 1024
#: ``n_slices="auto"``: one slice per this many rows of the means (the fit's rows; a batch for
#: the steps), from :data:`MIN_AUTO_SLICES` to :data:`MAX_AUTO_SLICES` slices.
ROWS_PER_SLICE = 25
MIN_AUTO_SLICES, MAX_AUTO_SLICES = 10, 200


def auto_slices(n_rows: int) -> int:
    """``n_slices="auto"`` for slice means over ``n_rows`` rows: one slice per :data:`ROWS_PER_SLICE` rows, clipped."""
    return int(min(MAX_AUTO_SLICES, max(MIN_AUTO_SLICES, n_rows // ROWS_PER_SLICE)))


def default_reg_grid() -> np.ndarray:
    """The ridges ``reg="auto"`` chooses from: ``1e-8`` to ``1``, two per decade (17 values)."""
    return log_grid(1e-8, 1.0, 2)


def _slice_factor(moments: Moments, M: int) -> np.ndarray:
    """``G`` (slices seen x M) with ``G^T G`` the between-slice covariance, from the moments of ``[z, e]``."""
    share = moments.mean[M:]
    seen = share > 0
    # column s of Cov(z, e) is p_s (mu_s - mu): G^T G = sum_s p_s (mu_s - mu)(mu_s - mu)^T
    return (moments.cov[:M, M:][:, seen] / np.sqrt(share[seen])).T


def sir_held_out_scores(fit: Moments, held: Moments, M: int, grid: np.ndarray, k: int) -> np.ndarray:
    """For each ridge of ``grid``: the held-out share of variance the slice means explain, summed over ``k`` directions.

    The directions ``a_i`` solve regularised SIR on the moments ``fit`` of ``[z, e]`` (``M``
    features, then the slice indicators); on the moments ``held`` of other rows each
    direction scores ``a^T Cb a / a^T Cxx a``: the share of the variance of ``f_i(x)`` that
    the means of ``f_i`` over the slices of ``y`` explain there (the R^2 of ``f_i`` on the
    slice indicators, in ``[0, 1]``; 0 for a constant direction). It is SIR's own objective
    without the ridge, on rows the directions did not see: too small a ridge gives
    directions that separate the fitted rows' slice means by noise, too large one
    directions of large variance that the slices do not explain. One eigendecomposition of
    the fitted covariance serves every ridge; each ridge then costs an SVD of the
    ``slices x M`` whitened slice means.
    """
    w, V = covariance_eigen(fit.cov[:M, :M])
    G = _slice_factor(fit, M) @ V
    Gh = _slice_factor(held, M)
    Hxx = held.cov[:M, :M]
    scores = np.empty(len(grid))
    for i, reg in enumerate(grid):
        d = 1.0 / np.sqrt(w + reg)
        _, _, Qt = scipy.linalg.svd(G * d, full_matrices=False, check_finite=False)
        A = V @ (d[:, None] * Qt[:k].T)  # the directions on the features
        between = ((Gh @ A) ** 2).sum(axis=0)
        total = np.maximum(np.einsum("ij,ij->j", A, Hxx @ A), 0)
        scores[i] = float(np.divide(between, total, out=np.zeros_like(between), where=total > 0).sum())
    return scores


@dataclass(eq=False)
class SlicedMap:
    """Rows ``[x | y]`` to ``[z(x), e(y)]``: the features of ``x`` and the slice indicators of ``y``.

    One pass of :func:`~dsgd_dask.engine.rca.rca_moments` over this map gives
    the covariance of the features (top left), the covariance of features and slice
    indicators (``p_s (mu_s - mu)`` in column ``s``) and the slices' shares of the rows
    (the mean of ``e``): all the moments of sliced inverse regression.
    """

    fmap: FourierMap
    slicer: Slicer
    n_features_in: int

    @property
    def n_features(self) -> int:
        return self.fmap.n_features + self.slicer.n_slices

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        z = self.fmap(rows[:, :self.n_features_in])
        M = z.shape[1]
        out = np.zeros((rows.shape[0], M + self.slicer.n_slices), dtype=z.dtype)
        out[:, :M] = z
        out[np.arange(rows.shape[0]), M + self.slicer.assign(rows[:, self.n_features_in:])] = 1
        return out


@register
class KernelSIR(ChosenRidge, ClassNamePrefixFeaturesOutMixin, TransformerMixin, ComponentStepEstimator):
    """Kernel sliced inverse regression.

    Finds the functions ``f_i`` of ``x`` whose values best explain the response ``y``
    through its slices: the top solutions of ``Cov(E[phi(x) | slice(y)]) f = lambda
    (Cov(phi(x)) + reg) f`` (kernel SIR; Li 1991, Wu 2008), i.e. the functions whose
    slice means have the largest variance for a unit regularised variance
    ``Var f(x) + reg ||f||_H^2 = 1``. ``y`` is cut into ``n_slices`` slices from a seeded
    sample: quantiles of a 1-D response, one slice per value when it takes at most
    ``n_slices`` values (classes), k-means for a response of several columns. The
    projections ``f_i(x)`` are a reduced representation for a regression or
    classification of ``y``.

    Parameters
    ----------
    n_components : int, default=2
        Number of directions ``k`` (at most ``n_slices - 1``).
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
    bandwidth : "median" or float, default="median"
    kernel_params : dict, optional
    n_slices : int or "auto", default="auto"
        Slices of the response (classes: one per class, when there are at most this many).
        ``"auto"``: one slice per 25 rows that a slice mean is taken over, from 10 to 200
        slices: the training rows for ``"exact"`` and ``"rca"``, a batch for ``"dsgd"``
        (10 slices at the default ``batch_size=256``, whose statistics are biased at order
        ``n_slices / batch_size``; see Notes). Quantile slices of a continuous response
        lose its variation within each slice: on 4,800 QM7 molecules (energies, sorted
        Coulomb matrices) the exact solve's two directions followed by a linear regression
        reach a test R² of 0.927, 0.963, 0.969 and 0.966 with 10, 50, 200 and 400 slices,
        and 0.742 with 800 (6 rows each). :attr:`slicer_` holds the slices fitted.
    reg : float or "auto", default="auto"
        Ridge ``gamma > 0`` on the squared RKHS norm, in units of the kernel
        (``k(x, x) = 1`` for the shift-invariant kernels), one unit for every solver: the
        directions maximise ``Var E[f(x) | slice]`` under ``Var f(x) + reg ||f||_H^2 = 1``,
        i.e. solve ``Cb a = lambda (Cxx + reg I) a`` on features whose inner products are
        (or approximate) the kernel, ``Cxx`` their covariance and ``Cb`` that of their slice
        means (variances are means over rows). In the dual, ``f = K~ alpha`` on ``n``
        centred training rows: ``K~ D K~ alpha = lambda (K~^2 / n + reg K~) alpha`` with
        ``D = sum_s 1_s 1_s^T / (n n_s)``. (scikit-learn has no kernel SIR.)

        ``"auto"``: chosen during :meth:`fit` from :func:`default_reg_grid` (``1e-8`` to
        ``1``, two per decade) on held-out rows: the rows are cut into at least 10 row
        chunks (each input chunk into equal parts) and every fifth chunk by index is held
        out (about 20 %, the same chunks on any machine); the directions are fitted on
        the other chunks for every ridge, and each scores the share of its variance that
        its slice means explain on the held-out rows, ``Var E[f_i | slice] / Var f_i``
        (SIR's own objective without the ridge, so a ridge too small, which separates
        the fitted rows' slice means by noise, and one too large, which prefers
        directions of large variance whatever the slices, both score low), summed over
        the ``n_components`` directions; the model is then fitted on all the rows with
        the best (ties: the larger ridge). ``"rca"`` takes the moments of both parts in
        its one read of the rows (no extra pass; one ``M x M`` eigendecomposition and
        one ``n_slices x M`` SVD per ridge, twice the ``M^2`` float64 moments in memory
        while choosing); ``"dsgd"`` and ``"exact"``: one extra pass before the fit, the
        same choice on the moments of at most 1024 features (Nyström: that many of the
        seeded landmarks whitened together; Fourier: the first seeded blocks). A number
        is used as given, without the split (the fit of earlier versions, bit for bit).
        :meth:`partial_fit` needs a fixed ridge: see there.
    solver : {"auto", "dsgd", "rca", "exact"}, default="auto"
        How the problem is solved:

        * ``"dsgd"``: doubly stochastic gradient steps (Xie, Liang & Song 2015), one
          mini-batch and one feature block per step, then a rotation on a sample (see
          Notes); streams (:meth:`partial_fit`) and checkpoints.
        * ``"rca"``: one pass over the data for the mean and covariance of the
          ``n_features`` features and of the slice indicators (one task per row chunk, a
          tree reduction), then the dense generalised eigensolve (a Cholesky factor and an
          ``n_features x n_slices`` SVD): the exact solution on those features.
          ``O(n_features^2)`` memory; randomized component analysis (Lopez-Paz et al.
          2014) for SIR.
        * ``"exact"``: the dense ``n x n`` centred kernel matrix and its
          eigendecomposition, every training row a landmark (``n_features`` ignored,
          ``features`` must be ``"nystroem"``); at most 5000 rows.
        * ``"auto"``: in :meth:`fit`, ``"exact"`` on at most 5,000 rows with the
          default Nyström features and ``n_features="auto"``; otherwise ``"rca"`` up to
          8,192 features (its moments in memory), ``"dsgd"`` beyond (it streams, and
          needs no ``n_features^2`` memory) or with a ``checkpoint`` (the one solver that
          writes one); :attr:`solver_` records which. On four
          regression sets (``python -m benchmarks run defaults``) the dense solve and the
          one pass were level with or ahead of the steps, in less time (their slice means
          are over all the rows, so ``n_slices="auto"`` gives them many slices); on
          5,373 QM7 molecules ``"rca"`` reached a test R² of 0.964 in 41 s, the steps
          0.900 in 46 s. :meth:`partial_fit` takes steps.
    features : {"nystroem", "fourier"}, default="nystroem"
        Landmark rows of the data or seeded random Fourier blocks (``"dsgd"`` and
        ``"rca"``). Nyström: ``"dsgd"`` whitens each block of landmarks on its own,
        ``"rca"`` all of them together (the Nyström approximation of the kernel on their
        span); the same landmark rows for the same seed and budget.
    n_features : int or "auto", default="auto"
        Feature budget, met exactly (an integer that is not a multiple of the block size,
        or more landmarks than rows, is a ``ValueError`` naming valid values); ``"auto"``:
        ``min(4096, max(1024, 2 n))`` in whole blocks (Nyström: at most the rows).
        ``"dsgd"`` grows it by one block per step; ``"exact"`` ignores it. At most
        ``2**24``, as for :class:`~dsgd_dask.KernelPCA`.
    block_size : int or "auto", default="auto"
        Features per block (``"auto"``: blocks of at most 1024 Nyström landmarks or 256
        Fourier features, splitting an integer budget evenly).
    batch_size : int, default=256
        Rows per step (``"dsgd"``); the slice means of a step are taken over its batch.
    max_iter : int or "auto", default="auto"
        ``"dsgd"``: steps; ``"auto"``: ten passes over the data, between 500 and 5000
        steps. ``"rca"`` and ``"exact"`` have one iteration (the pass, the solve) and
        ignore it.
    shuffle_chunks, n_partitions, eta0, eta_decay, average, checkpoint, checkpoint_every
        As for :class:`~dsgd_dask.KernelCCA` (``"dsgd"`` only; ``"rca"``, one pass, and
        ``"exact"`` ignore ``checkpoint``).
    verbose : bool, default=False
        Show a progress bar of the steps (``"dsgd"``) or of the one pass (``"rca"``).
    cache_bytes : int >= 0, optional
        Budget in bytes for regenerated Fourier pages (``"dsgd"``, ``"rca"``).
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the features (``"dsgd"`` and ``"rca"``; sums are float64). The
        ``"exact"`` solver works in float64.
    random_state : int, RandomState instance or None, default=None
        Root seed: the sample behind the bandwidth and the slices, the features, the
        order of the rows in steps.

    Attributes
    ----------
    solver_ : {"dsgd", "rca", "exact"}
        The solver that ran.
    eigenvalues_ : ndarray of shape (n_components,)
        The generalised eigenvalues ``lambda_i``, decreasing: the share of the
        regularised variance of ``f_i(x)`` explained by the slice means (``"dsgd"``: on
        the fit sample of 10,000 rows; ``"rca"``, ``"exact"``: on all rows).
    slicer_ : Slicer
        The slices of ``y`` (``slicer_.n_slices`` of them: fewer than asked for when ``y`` has
        fewer distinct values, or ties).
    reg_ : float
        The ridge of the fit: ``reg``, or the value ``reg="auto"`` chose.
    reg_grid_ : ndarray of shape (n_reg,)
        The ridges scored, increasing (a numeric ``reg``: that one value).
    reg_scores_ : ndarray of shape (n_reg,)
        Their held-out scores: the held-out share of variance explained by the slice
        means, summed over the directions (higher is better; NaN for a numeric ``reg``,
        not scored).
    model_ : KernelExpansion
        The fitted functions (``"exact"``: the kernel sections at every training row,
        unwhitened; ``model_.coef`` are then dual coefficients, centred).
    bandwidth_ : float
    kernel_ : KernelSpec
    n_features_ : int
        Features of the model (``"exact"``: the training rows).
    n_iter_ : int
        Iterations: ``"dsgd"`` steps taken; 1 for ``"rca"`` (the pass) and ``"exact"``
        (the solve).
    convergence_ : list of dict
        One record per iteration ``"dsgd"`` ran as one chunk task of steps, one record for
        ``"rca"`` and ``"exact"``: ``iteration`` (steps so far, or 1), ``rows`` (rows
        seen), ``seconds`` (since the start of the fit), ``measure`` (NaN: no solver of
        kernel SIR has a stopping test).
    seed_ : int
    n_features_in_ : int
    n_features_in_y_ : int
        Columns of ``y`` (1 for a 1-D response).

    Notes
    -----
    **One problem.** Every solver poses the problem on features ``phi`` whose inner
    products are the kernel or approximate it, and measures ``||f||_H`` in their RKHS:
    ``"exact"`` in the kernel-PCA coordinates of the centred kernel matrix (the kernel
    itself); ``"rca"`` on ``k(x, L) K_LL^{-1/2}`` (Nyström) or on ``J`` Fourier blocks
    ``z`` scaled to ``z / sqrt(J)``; ``"dsgd"`` on its ``J`` blocks scaled the same way
    (several Nyström blocks are the landmarks whitened together and split, so that
    their average kernel is the Nyström kernel of all of them). With every training row
    a landmark all three solve the exact kernel SIR problem; on 600 rows ``"rca"``
    matches ``"exact"`` to round-off (``2e-13``).

    **dsgd.** With ``h = H(x)`` on a batch and ``M`` the batch's slice means of ``h``
    (row by row), ``W = Cov(M)``; every block ``A_j <- A_j (I - eta reg W)`` and the
    step's block gains ``eta (Cov(z(x), M) - Cov(z(x), h) W)``; cycling through ``J``
    blocks, the fixed points solve the problem above. At the end the directions are
    rotated to the solutions of the ``k x k`` problem on a seeded sample of 10,000 rows
    from every chunk. The steps' statistics come from a batch: slice means over its few
    rows per slice (each row counted in its own slice's mean) and products of its
    statistics bias the destination at order ``n_slices / batch_size``, and more steps
    do not remove it. Measured on 600 rows with every row a landmark: ``sin^2 5e-4`` to
    the exact subspace and eigenvalues within ``1.3e-4`` with the defaults (batches of
    256, 10 slices), ``1e-2`` with batches of 64, and ``2e-9`` (the float32 features)
    with a batch of all rows.

    References
    ----------
    K.-C. Li, "Sliced inverse regression for dimension reduction", JASA 1991.
    H.-M. Wu, "Kernel sliced inverse regression with applications to classification",
    JCGS 17 (2008).
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015.
    D. Lopez-Paz, S. Sra, A. Smola, Z. Ghahramani, B. Schölkopf, "Randomized nonlinear
    component analysis", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelSIR
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(800, 4))
    >>> y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=800)
    >>> sir = KernelSIR(n_components=2, n_features=512, random_state=0).fit(X, y)
    >>> sir.solver_, sir.transform(X).shape
    ('rca', (800, 2))
    >>> steps = KernelSIR(n_components=2, solver="dsgd", n_features=512, max_iter=300, random_state=0).fit(X, y)
    >>> steps.solver_
    'dsgd'
    >>> exact = KernelSIR(n_components=2, solver="exact", random_state=0).fit(X, y)
    >>> exact.n_features_
    800
    """

    _views = ("X",)
    _y_is_target = True
    _parameter_constraints: ClassVar[dict] = {
        "n_components": COUNT, **KERNEL, **STEPS, **solver_constraint("KernelSIR"), "reg": RIDGE,
        "n_slices": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"})]}

    def __init__(self, n_components=2, *, kernel="gaussian", bandwidth="median", kernel_params=None, n_slices="auto",
                 reg="auto", solver="auto", features="nystroem", n_features="auto", block_size="auto", batch_size=256,
                 max_iter="auto", shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay=0.01, average=False,
                 compute_dtype="float32", cache_bytes=None, checkpoint=None, checkpoint_every=100, verbose=False,
                 random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.n_slices = n_slices
        self.reg = reg
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

    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y, *, callback=None):
        """Fit the directions on the rows of ``(X, y)`` with the chosen solver.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d)
        y : array-like, dask array, Zarr array or DataArray of shape (n_samples,) or (n_samples, d_y)
            Numeric response, row-aligned with ``X``.
        callback : callable, optional
            ``"dsgd"``: ``callback(n_steps, model)`` with the raw expansion of the current
            functions. Not called by ``"rca"`` and ``"exact"``.

        Returns
        -------
        self
        """
        solver = check_solver(self, self.features)
        if solver == "auto":
            solver = self._auto_solver(self._validate_pair(X, y, reset=True)[2].n_samples)
        self.convergence_ = []
        self._begin_reg()
        try:
            if solver != "rca" and self._reg_is_auto():
                self._chosen_reg = self._select_reg(X, y, solver)
            if solver == "dsgd":
                self._fit(X, y, callback=callback)
            else:
                self._fit_dense(X, y, solver)
        finally:
            self.__dict__.pop("_chosen_reg", None)
        self.solver_ = solver
        return self

    def _auto_solver(self, n_samples: int) -> str:
        """What ``solver="auto"`` runs in :meth:`fit`: the dense solve on small Nyström problems, else one
        pass of moments while the budget's moments fit :data:`AUTO_RCA_FEATURES`, else the steps."""
        if n_samples <= AUTO_EXACT_ROWS and self.features == "nystroem" and self.n_features == "auto":
            return "exact"
        settings = self._step_settings(n_samples)
        block, n_blocks = feature_blocks(n_samples, settings["features"], settings["n_features"],
                                         settings["block_size"])
        small_moments = block * n_blocks <= AUTO_RCA_FEATURES
        return "rca" if small_moments and self.checkpoint is None else "dsgd"

    # -- the ridge ("auto": chosen on held-out row chunks) ------------------------------------
    def _select_reg(self, X, y, solver: str) -> float:
        """``reg="auto"`` for ``"dsgd"`` and ``"exact"``: one extra pass of rca moments.

        The moments of at most :data:`AUTO_FEATURES` features (Nyström: that many of the
        seeded landmark rows, at most the budget, whitened together; Fourier: the first
        seeded blocks of the fit, up to that many features), with the held-out split and
        the grid of the rca solver; the fit then runs with the chosen ridge.
        """
        view = self._validate_pair(X, y, reset=True)[2]
        n = view.n_samples
        p = self._check_params(n, solver)
        seed = self._seed(self.random_state)
        sample = sample_rows(view, N_SAMPLE, seed)
        (spec,) = self._view_kernels(sample)
        slicer = Slicer.fit(sample[:, self._columns()[1]], p["n_slices"], seed)
        if p["features"] == "nystroem":
            budget = n if solver == "exact" else p["n_blocks"] * p["block_size"]
            n_blocks, block = 1, min(AUTO_FEATURES, budget, n)
        else:
            block = p["block_size"]
            n_blocks = max(1, min(p["n_blocks"], AUTO_FEATURES // block))
        k = min(p["n_components"], slicer.n_slices - 1)
        sliced = self._sliced_map(view, spec, sample, slicer, n_blocks, block, p["features"], seed)[0]
        reg, grid, scores, _ = self._choose(view, sliced, sample, k, Clock())
        self._set_reg(reg, grid, scores)
        return reg

    def _choose(self, view, sliced, sample: np.ndarray, k: int, clock):
        """``(reg, grid, scores, (moments, run))``: the held-out choice on the map ``sliced`` (one read of the rows).

        ``moments`` are those of all the rows (pooled), ``run`` the moments' pass.
        """
        shift = sliced(sample[:SHIFT_ROWS]).mean(axis=0, dtype=np.float64)
        if view.n_samples < MIN_ROWS:  # too few rows to hold any out: the fallback ridge, one pass
            n, mean, cov, run = rca_moments(view, sliced, shift, center=True, clock=clock, verbose=self.verbose,
                                            desc="KernelSIR(reg='auto')" if self.verbose else None,
                                            name="sir-moments")
            return FALLBACK, np.array([FALLBACK]), np.array([np.nan]), (Moments(n, mean, cov), run)
        chunked, fit_chunks, held_chunks = held_out_view(view)
        fit, held, run = split_moments(chunked, sliced, shift, fit_chunks, held_chunks, clock=clock,
                                       verbose=self.verbose, desc="KernelSIR(reg='auto')" if self.verbose else None,
                                       name="sir-moments")
        grid = default_reg_grid()
        with one_blas_thread():  # the same scores, so the same choice, on any machine
            scores = sir_held_out_scores(fit, held, sliced.fmap.n_features, grid, k)
        return float(grid[best_index(scores)]), grid, scores, (pooled_moments(fit, held), run)

    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def partial_fit(self, X, y):
        """One pass of doubly stochastic steps over ``(X, y)`` as the next batch of a stream.

        The first call initialises (as ``solver="dsgd"``); ``solver_`` is ``"dsgd"`` after
        it. Only with ``solver="auto"`` or ``"dsgd"``, on a model fitted by steps or not
        fitted (a ``ValueError`` otherwise: the other solvers need all the rows at once).
        The ridge stays fixed over the stream: a numeric ``reg``; with ``reg="auto"``, the
        ``reg_`` of the fit the stream continues, or on a first call the value chosen on
        held-out row chunks of that first batch (as :meth:`fit` does for ``"dsgd"``: one
        extra pass over the batch).

        Parameters
        ----------
        X, y : row-aligned inputs as for :meth:`fit`

        Returns
        -------
        self
        """
        check_partial_fit(self)
        if getattr(self, "solver_", None) in ("rca", "exact"):
            raise ValueError(f"partial_fit continues doubly stochastic steps, but this model was fitted by "
                             f"solver={self.solver_!r}, which keeps no step state: refit it, or stream into a new "
                             "KernelSIR")
        first = not hasattr(self, "state_")
        if first:
            self.convergence_ = []
            self._begin_reg()
        try:
            if first and self._reg_is_auto():  # chosen on the first batch, then fixed for the stream
                self._chosen_reg = self._select_reg(X, y, "dsgd")
            self._partial_fit(X, y)
        finally:
            self.__dict__.pop("_chosen_reg", None)
        self.solver_ = "dsgd"
        return self

    @accepts_storage_options
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

    def _check_params(self, n_samples: int, solver: str = "dsgd") -> dict:
        if solver == "exact":  # every row a landmark: no budget, blocks or steps
            p = {"n_components": int(self.n_components), "features": "nystroem"}
        else:
            p = self._check_common(n_samples, whole_budget=solver == "rca")
        p["solver"] = solver
        # "auto": the value chosen on held-out rows (None until an rca pass chooses it)
        p["reg"] = self.__dict__.get("_chosen_reg") if self._reg_is_auto() else float(self.reg)
        if self.n_slices == "auto":
            rows = n_samples if solver in ("exact", "rca") else min(int(p["batch_size"]), n_samples)
            p["n_slices"] = min(auto_slices(rows), n_samples)
        else:
            p["n_slices"] = int(self.n_slices)
        if p["n_slices"] > n_samples:
            raise ValueError(f"n_slices={p['n_slices']} must be <= n_samples={n_samples}")
        if p["n_components"] > p["n_slices"] - 1:
            raise ValueError(f"n_components={p['n_components']} must be <= n_slices - 1 = {p['n_slices'] - 1}: "
                             "the slice means span at most that many directions")
        if solver == "exact":
            check_two_view_size(n_samples, f"{type(self).__name__}(solver='exact')")
        return p

    def _fit_slicer(self, y_sample: np.ndarray, k: int) -> None:
        self.slicer_ = Slicer.fit(y_sample, self._params["n_slices"], self.seed_)
        if k > self.slicer_.n_slices - 1:
            raise ValueError(f"n_components={k} must be <= {self.slicer_.n_slices - 1}: y gives only "
                             f"{self.slicer_.n_slices} slices ({self.slicer_.kind}: fewer distinct values than "
                             f"n_slices={self._params['n_slices']}, or ties)")

    # -- the steps ("dsgd") ------------------------------------------------------------------
    def _make_rule(self, columns, guard_limit: float):
        return KSIRRule(columns, True, guard_limit, self._params["reg"], self.slicer_)

    def _initial(self, z, sample, k):
        y = sample[:, self._columns()[1]]
        self._fit_slicer(self._sample[:, self._columns()[1]], k)
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

    # -- one pass ("rca") and the dense kernel ("exact") --------------------------------------
    def _fit_dense(self, X, y, solver: str) -> None:
        """Fit by one pass of feature moments (``"rca"``) or by the dense kernel matrix (``"exact"``)."""
        vx, vy, view = self._validate_pair(X, y, reset=True)
        n = view.n_samples
        p = self._params = self._check_params(n, solver)
        k = p["n_components"]
        self.seed_ = self._seed(self.random_state)
        clock = Clock()
        sample = sample_rows(view, N_SAMPLE, self.seed_)
        xs, ys = sample[:, self._columns()[0]], sample[:, self._columns()[1]]
        (spec,) = self._view_kernels(sample)
        self._fit_slicer(ys, k)
        if solver == "exact":
            X_fit, y_fit = materialise_pair(vx, vy, ("X", "y"))
            vals, model = exact_sir(spec, X_fit, self.slicer_.assign(y_fit), self.slicer_.n_slices, p["reg"], k,
                                    view_seed(self.seed_, 0))
            records = [record(1, n, clock(), None)]
        else:  # one pass of the driver for the moments, then the dense solve
            vals, model, records = self._rca(view, spec, xs, sample, clock)
        for name in ("state_", "_config", "_rule", "_sample", "_n_calls"):  # a previous fit's steps
            self.__dict__.pop(name, None)
        model.token = model_fingerprint(model)
        self._features = (model.features,)
        self.models_ = (model,)
        self.eigenvalues_ = vals
        self.bandwidth_ = spec.bandwidth
        self.kernel_ = spec
        self.n_features_ = model.coef.shape[0]
        self._n_features_out = k
        self.n_iter_ = 1
        self.convergence_ = records

    def _rca(self, view, spec, xs: np.ndarray, sample: np.ndarray, clock: Clock):
        """The generalised eigensolve on the moments of the features and slice indicators (one pass).

        The moments are one pass of the pass driver (:func:`~dsgd_dask.engine.rca.rca_moments`);
        returns the eigenvalues, the model and the pass's ``convergence_`` records.

        Nyström: the features ``k(x, L) K_LL^{-1/2}`` of all ``M`` landmark rows (the rows
        of ``"dsgd"``'s blocks, whitened jointly), so ``reg`` is the ridge on the RKHS norm
        in the landmarks' span, and with every row a landmark the problem is exact kernel
        SIR. Fourier: the seeded blocks of ``"dsgd"``, scaled by ``1 / sqrt(J)``.
        """
        p = self._params
        J, m = p["n_blocks"], p["block_size"]
        sliced, landmarks, center = self._sliced_map(view, spec, sample, self.slicer_, J, m, p["features"],
                                                     self.seed_)
        fmap = sliced.fmap
        if self._reg_is_auto():  # the held-out choice in the same read of the rows, then all of them
            reg, grid, scores, (moments, run) = self._choose(view, sliced, sample, p["n_components"], clock)
            self._set_reg(reg, grid, scores)
            mean, cov = moments.mean, moments.cov
        else:
            shift = sliced(sample[:SHIFT_ROWS]).mean(axis=0, dtype=np.float64)
            _, mean, cov, run = rca_moments(view, sliced, shift, center=True, clock=clock, verbose=self.verbose,
                                            desc="KernelSIR(solver='rca')" if self.verbose else None,
                                            name="sir-moments")
        M = fmap.n_features
        G = _slice_factor(Moments(0, mean, cov), M)
        vals, A = sliced_directions_low_rank(cov[:M, :M], G, p["reg"], p["n_components"])
        fseed = view_seed(self.seed_, 0)
        if p["features"] == "nystroem":
            model = KernelExpansion(sections(spec, landmarks, fseed, center), fmap.normalization @ A,
                                    mean[:M] @ A)
        else:
            model = KernelExpansion(fmap.features, A / np.sqrt(J), mean[:M] @ A)
        return vals, model, run.records

    def _sliced_map(self, view, spec, sample: np.ndarray, slicer: Slicer, J: int, m: int, features: str,
                    seed: int) -> tuple:
        """``(map, landmarks, center)``: rows to ``[z(x), e(y)]`` on ``J`` blocks of ``m`` features.

        ``landmarks``: the Nyström landmark rows (``None`` for Fourier features); ``center``:
        the sample's mean input of a shift-invariant kernel (``None`` otherwise).
        """
        xs = sample[:, self._columns()[0]]
        center = xs.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None
        landmarks = None
        if features == "nystroem":
            landmarks = landmark_rows(view, J * m, seed)[:, self._columns()[0]]
            normalization = inverse_sqrt(kernel_matrix(spec, landmarks))
            if normalization.shape[1] == 0:
                raise ValueError("the kernel is zero on every landmark (e.g. all-zero rows with the arccos kernel); "
                                 "no Nyström features can be formed")
            fmap = NystroemMap(spec, landmarks, normalization)
        else:
            blocks = RandomFeatures(spec, xs.shape[1], m, view_seed(seed, 0), self.compute_dtype, center=center,
                                    cache_bytes=self.cache_bytes)
            fmap = FourierMap(blocks, J)
        return SlicedMap(fmap, slicer, self.n_features_in_), landmarks, center

    # -- persistence -------------------------------------------------------------------------
    def save(self, path, overwrite: bool = False, *, storage_options=None):
        check_is_fitted(self, "models_")  # a model of any solver (only "dsgd" keeps a step state)
        attrs, arrays = self._fitted_payload()
        return write_store(path, "model", attrs, arrays, overwrite=overwrite, storage_options=storage_options)

    save.__doc__ = ComponentStepEstimator.save.__doc__

    @classmethod
    def _from_payload(cls, attrs: dict, arrays: dict):
        est = super()._from_payload(attrs, arrays)
        if not hasattr(est, "solver_"):  # stores written before the solver was a parameter: steps
            est.solver_ = "dsgd"
        return est

    def _restore_values(self, arrays: dict) -> None:
        self.eigenvalues_ = arrays["eigenvalues"]
        reg = float(self._params["reg"])
        if "reg_grid" in arrays:
            self._set_reg(reg, arrays["reg_grid"], arrays["reg_scores"])
        else:  # a store written before the ridge was chosen by the data: the numeric reg
            self._set_reg(reg, np.array([reg]), np.array([np.nan]))

    def _extra_payload(self) -> dict:
        s = self.slicer_
        return {"slicer": {"kind": s.kind, "n_slices": s.n_slices, "n_outputs": s.n_outputs}}

    def _slicer_arrays(self) -> dict:
        return {"slicer_" + name: getattr(self.slicer_, name) for name in SLICER_FIELDS
                if getattr(self.slicer_, name) is not None}

    def _values_payload(self) -> dict:
        return {"eigenvalues": self.eigenvalues_, "reg_grid": self.reg_grid_, "reg_scores": self.reg_scores_,
                **self._slicer_arrays()}

    def _restore_extra(self, fitted: dict, arrays: dict) -> None:
        fields = {name: arrays.get("slicer_" + name) for name in SLICER_FIELDS}
        self.slicer_ = Slicer(**fitted["slicer"], **fields)
