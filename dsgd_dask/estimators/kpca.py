"""KernelPCA: kernel PCA on data of any size, the solver a parameter (passes, steps, one-pass or dense solves)."""

from __future__ import annotations

from dataclasses import asdict
from numbers import Integral
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._linalg import small_eigh
from dsgd_dask._threads import one_blas_thread
from dsgd_dask.engine.driver import Update, run_passes
from dsgd_dask.engine.passes import PassTotals, covariance_request, covariance_times, row_chunks
from dsgd_dask.engine.ridge import JointNystroemBlocks
from dsgd_dask.engine.steps import StepConfig, StepState
from dsgd_dask.estimators._atomic import atomic_fit
from dsgd_dask.estimators._base import accepts_storage_options
from dsgd_dask.estimators._constraints import AUTO, COUNT, KERNEL, NON_NEGATIVE, STEPS, solver_constraint
from dsgd_dask.estimators._solvers import Clock, check_partial_fit, check_solver, record, renamed
from dsgd_dask.estimators._steps import (
    StepEstimatorMixin,
    features_from_payload,
    features_payload,
    model_fingerprint,
    register,
)
from dsgd_dask.estimators.components import JOINT_STEPS_MAX_FEATURES, sections
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.features.whitening import JointWhitening
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.rules.kpca import pca_rule
from dsgd_dask.rules.subspace import (
    contraction,
    estimated_error,
    nystroem_extension,
    orthonormal,
    residual_sin2,
    ritz_step,
    subspace_sin2,
)
from dsgd_dask.streams.batches import chunk_subset, landmark_rows, sample_rows
from dsgd_dask.transform.lazy import apply_rows

#: Rows of the seeded sample used for the bandwidth, the initial solve and the final
#: centring/ordering statistics (all rows when the data has fewer).
N_SAMPLE = 10_000
#: Rows of that sample used by the initial random-feature solve.
N_INIT = 2_000
#: A step whose largest component variance exceeds this many times the initial top
#: eigenvalue counts as diverged.
GUARD_FACTOR = 10.0
#: Default block sizes. Nyström blocks whitened each on its own give, for ``J`` blocks of
#: ``m`` landmarks, the average of ``J`` Nyström approximations of ``m`` landmarks, not the
#: approximation of all ``J m`` (``benchmarks/bench_block_size.py``: at equal ``M`` one
#: block is the most accurate); whitened jointly they give the approximation of all
#: ``J m``, and the blocks are only pages of kernel sections. The subspace solver's passes
#: whiten the coefficients, never the rows: it takes the budget in as few blocks as
#: possible, of at most ``NYSTROEM_MAX_BLOCK`` (about 10 s of eigendecomposition on two
#: cores when a block is whitened on its own). Steps add a block per step, of
#: ``NYSTROEM_STEP_BLOCK``. Fourier blocks are the paper's.
NYSTROEM_MAX_BLOCK = 4096
#: ``whitening="auto"``: budgets of several blocks up to this many features are whitened
#: jointly (one ``M x M`` float64 Cholesky factor: 8 GiB at the limit), larger ones block by
#: block.
JOINT_MAX_FEATURES = 32768
NYSTROEM_STEP_BLOCK = 1024
FOURIER_BLOCK = 256
#: Default feature budget of the subspace and rca solvers: ``max(2048, 64 k)``.
SUBSPACE_MIN_FEATURES = 2048
SUBSPACE_FEATURES_PER_COMPONENT = 64
#: Default largest number of full-data passes of the subspace solver.
SUBSPACE_MAX_PASSES = 20
#: Floats of features held for the warm start on the sample (128 MiB in float32).
WARM_FLOATS = 1 << 25
#: Iterations of the warm start on the in-memory sample (each far cheaper than a pass),
#: stopped early once the estimated error on the sample is below ``WARM_TOL``: the sample
#: itself is only that accurate.
WARM_ITERATIONS = 50
WARM_TOL = 1e-4
#: Sampled stages of the subspace solver: each on this many times the rows of the one
#: before (the first on this many times the warm start's rows), while it holds at most
#: this fraction of all rows (so the stages cost at most a third of a pass).
STAGE_GROWTH = 4
STAGE_MAX_FRACTION = 0.25
#: Spawn-key tag of the warm start's random block.
WARM_TAG = 0x5741
#: What ``solver="auto"`` runs in :meth:`KernelPCA.fit` (:meth:`KernelPCA.partial_fit` takes steps).
AUTO_SOLVER = "subspace"
#: Solvers whose fit is one pass or one dense solve (no iterations, no checkpoints).
ONE_SHOT = ("rca", "exact")


def check_variance(lam: float) -> None:
    """Refuse a sample whose top eigenvalue ``lam`` (of the features' covariance) is not positive."""
    if not np.isfinite(lam) or lam <= 0:
        raise ValueError("the data sample has no variance under this kernel; check the bandwidth")


def split_budget(n_features: int, max_block: int) -> tuple[int, int]:
    """``(n_blocks, block_size)``: ``n_features`` in as few equal blocks of at most ``max_block`` as divide it.

    At most twice the fewest blocks are tried (so blocks stay at least about half of
    ``max_block``); a budget that none of them divides is refused, naming the nearest
    budgets that split.
    """
    fewest = -(-n_features // max_block)
    for n_blocks in range(fewest, 2 * fewest + 1):
        if n_features % n_blocks == 0:
            return n_blocks, n_features // n_blocks
    below, above = fewest * (n_features // fewest), fewest * -(-n_features // fewest)
    raise ValueError(f"n_features={n_features} does not split into equal blocks of at most {max_block}: use "
                     f"n_features={below} or {above} ({fewest} blocks), or give block_size")


@register
class KernelPCA(StepEstimatorMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel PCA on data of any size: feature blocks, fitted by the solver of your choice.

    The model is a sum of feature blocks, ``h(x) = sum_j z_j(x) A_j - offset``, and keeps
    only what defines the blocks and their coefficients, never the data or an ``n x n``
    matrix (``solver="exact"`` keeps its training rows as landmarks). The objective is the
    same whatever the solver: the top ``k`` eigenfunctions of the (centred) covariance
    operator of the kernel represented by the features; solvers differ in the path. Two
    kinds of features:

    * ``features="nystroem"`` (default): the kernel at ``M`` seeded landmark rows drawn
      from the data, in blocks of ``m``, whitened either jointly (the Nyström
      approximation of all ``M`` landmarks; the fit holds an ``M x M`` factor, the
      fitted model only the landmarks) or block by block, each by its own
      ``K_jj^{-1/2}`` (the average of ``M / m`` Nyström approximations of ``m``
      landmarks; ``M m`` numbers; see ``whitening``);
    * ``features="fourier"``: random Fourier features regenerated from their seeds (the
      paper's blocks; only seeds are stored).

    Four solvers (``solver_`` says which one ran):

    * ``"subspace"``: a warm start on a sample, stages on growing random subsets of the
      row chunks, then full-data passes of block subspace iteration (``Cov(z) V``
      accumulated as a reduction over row chunks: on a cluster every worker computes its
      chunks at once), converging geometrically until the estimated error is below
      ``tol``;
    * ``"dsgd"``: doubly stochastic gradient steps (Xie, Liang & Song 2015), each on a
      mini-batch of rows and one block of features, ``O(1/t)``; the only solver of
      :meth:`partial_fit`;
    * ``"rca"``: one pass of the features' mean and ``M x M`` covariance, then a dense
      eigensolve (randomized kernel PCA, Lopez-Paz et al. 2014): with Nyström features
      all ``M`` landmarks are whitened together by ``K_LL^{-1/2}``;
    * ``"exact"``: the dense ``n x n`` kernel matrix of the training rows and its top
      eigenpairs (every row a landmark), for at most 20,000 rows (``MAX_SAMPLES``).

    Numpy, dask, Zarr and xarray inputs are accepted; on dask and xarray inputs
    :meth:`transform` is lazy.

    Parameters
    ----------
    n_components : int, default=5
        Number of principal components ``k``.
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth : "median" or float, default="median"
        Length scale ``sigma``; ``"median"`` takes the median pairwise distance of a
        seeded sample of 1000 rows (the kernel's own distance: L1 for laplacian; the
        median row norm for arccos).
    kernel_params : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    features : {"nystroem", "fourier"}, default="nystroem"
        Nyström blocks (landmark rows) or random Fourier blocks. ``solver="exact"``
        takes Nyström features only (every training row a landmark).
    whitening : {"auto", "joint", "block"}, default="auto"
        Nyström features: whiten all the landmarks together (``"joint"``: for the
        subspace solver one Cholesky factor of their ``M x M`` kernel matrix, ``M^3 / 3``
        flops and ``8 M^2`` bytes during the fit) or each block on its own (``"block"``:
        ``m^3`` flops and ``8 M m`` bytes per block; its representation is about as
        accurate as one block's, whatever ``M``; subspace and dsgd solvers only).
        ``"auto"``: joint with several blocks (for the subspace solver up to 32,768
        features, for dsgd and in :meth:`partial_fit` up to 8,192, beyond which dsgd asks
        for ``"block"`` or fewer features), so that every solver computes the components of
        the Nyström kernel of all the landmarks; the rca and exact solvers always whiten
        jointly. With dsgd, ``"joint"`` splits the jointly whitened landmarks into blocks
        (one ``M x M`` eigendecomposition per fit; a step evaluates the sections of all
        the landmarks).
    solver : {"auto", "subspace", "dsgd", "rca", "exact"}, default="auto"
        How the components are computed (see above). ``"auto"`` runs ``"subspace"`` in
        :meth:`fit`, whatever the size of the input (its passes reach the model of the
        budget's features to ``tol``), and ``"dsgd"`` in :meth:`partial_fit`.
    n_features : int or "auto", default="auto"
        Feature budget ``M``: the fitted model has exactly this many features, or
        :meth:`fit` raises a ``ValueError`` naming a valid budget (a multiple of
        ``block_size``; Nyström landmarks are distinct rows, so at most the number of
        rows). ``"auto"``: ``max(2048, 64 k)`` for the subspace and rca solvers,
        ``min(4096, max(1024, 2 n))`` for dsgd (in whole blocks; Nyström: at most the
        rows). With dsgd, features grow by one block per step until the budget is
        reached; later steps revisit the blocks in turn. ``"exact"`` ignores it: every
        training row is a landmark. An integer from 1 to ``2**24`` (16,777,216 features,
        128 MiB of float64 coefficients per component): a larger budget, or one that is
        not an integer (``1e10``), is refused before any data are read, naming the range.
    block_size : int or "auto", default="auto"
        Features per block ``m``. ``"auto"``: Nyström blocks with the subspace solver
        take the budget in as few equal blocks of at most 4096 as divide it (whitened
        jointly, blocks are only a way to compute; whitened each on its own, one block of
        ``M`` landmarks represents the kernel better than several blocks of fewer), with
        dsgd of at most 1024, with rca one block of all the landmarks; Fourier blocks of
        256 when the budget is a multiple of 256, else as few equal blocks of at most 256
        as divide it. A budget that no such blocks divide is refused, naming the nearest
        that are. With dsgd, ``>= n_components``.
    n_oversamples : int or "auto", default="auto"
        Subspace solver: directions carried beyond ``k`` (``"auto"``: ``k + 10``). The
        error shrinks by ``(lambda_{k+q+1} / lambda_k)^2`` per pass.
    tol : float, default=1e-4
        Subspace solver: stop after the first full pass whose estimated error of the
        top-``k`` subspace (``sin^2`` of its largest principal angle to the converged one)
        is at most ``tol``. The estimate is the residual estimate of the block's Ritz
        vectors (from ``Cov(z) r_i - lambda_i r_i`` over all rows) times the estimated
        contraction of one step, since the model is taken a step further (see Notes).
        The error of the features themselves (the representation) comes on top and is
        set by ``n_features``. The other solvers have no stopping test.
    batch_size : int, default=256
        dsgd: rows per step ``B``.
    max_iter : int or "auto", default="auto"
        Largest number of iterations (see ``n_iter_``). Subspace solver: full passes over
        the data, sampled stages not counted (``"auto"``: 20). dsgd: update steps
        (``"auto"``: ``max(250, min(3 epochs, 3000))``). rca and exact: one iteration
        (``"auto"``: 1; any value ``>= 1`` runs the one pass or solve).
    shuffle_chunks : int, default=1
        dsgd, for dask, Zarr and xarray inputs: how many chunks (in a seeded random order
        per epoch) are read together and have their rows shuffled together, a shuffle
        buffer for data stored in order. Rows within a chunk are always shuffled.
    n_partitions : int, default=1
        dsgd: data-parallel steps: every mini-batch is split over ``n_partitions`` slabs of
        the data, each part's sums computed where its rows live (on a ``distributed``
        cluster: on the worker holding its chunk) and reduced before one update. The
        result depends on ``n_partitions`` but never on the scheduler or the number of
        workers. Use about as many partitions as workers, with large batches.
    eta0 : float, default=0.5
        dsgd: ``theta_0`` of the step size ``eta_t = theta_0 / (lambda_1 (1 + theta_1 t))``,
        relative to the top-eigenvalue estimate ``lambda_1`` of the initial solve, so
        that the default works on any data scale.
    eta_decay : float, default=0.01
        dsgd: ``theta_1`` of the step size.
    average : bool or int, default=False
        dsgd: the model is made of the mean of the iterates, not of the last one, from
        the step given as for :class:`~dsgd_dask.KernelCCA` (``True``: every step; an
        integer: rows seen; ``False``: the last iterate). The other solvers ignore it.
    init : {"rca", "random"}, default="rca"
        Subspace solver: start the passes from subspace iterations on a sample of up to
        10,000 rows (``"rca"``) or from a random block. dsgd: start from the top
        components of the first block's covariance on a sample, or from small random
        coefficients.
    center : bool, default=True
        Centre the features (kernel PCA of the centred covariance operator, as
        scikit-learn's ``KernelPCA``). Without centring the mean function dominates.
    ordered : bool, default=False
        dsgd: take the steps of the generalised Hebbian rule (GHA), which finds the
        individual eigenfunctions in order of eigenvalue; otherwise the steps of the Oja
        subspace rule, whose basis is rotated to the eigenfunctions of the subspace at the
        end of the fit. The other solvers return ordered eigenfunctions either way.
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the features; coefficients and statistics accumulate in float64.
        The rca solver with Nyström features and the exact solver evaluate the kernel
        in float64 (their whitening keeps directions float32 does not resolve).
    cache_bytes : int >= 0, optional
        Memory budget for cached feature blocks, in bytes; ``None`` uses a quarter of the
        free memory (at most 4 GiB), 0 regenerates every block at every use.
    checkpoint : str, os.PathLike or file:// URL, optional
        Zarr group, on a local filesystem, where :meth:`fit` saves its state after every
        pass and sampled stage (subspace solver, on the pass driver) or every
        ``checkpoint_every`` steps (dsgd) (atomically: a crash never leaves a checkpoint
        that loads wrong). When it exists at the start of :meth:`fit`, the fit resumes
        from it and ends with the same model, bit for bit, as an uninterrupted run; a
        checkpoint of another fit (other parameters, or other data: shape, dtype, row
        chunks or the values of sampled rows) is refused. Not used by the rca and exact
        solvers (one pass or one solve). :meth:`partial_fit` refuses it (a
        ``ValueError``): the state of a stream is the estimator, saved by :meth:`save`.
    checkpoint_every : int, default=100
        dsgd: steps between checkpoints (written at the end of the chunk task that
        crosses them).
    verbose : bool, default=False
        Show a progress bar (:mod:`tqdm`, on standard error or as a notebook widget): of
        the full-data passes, with how far the subspace moved and the estimated error
        (subspace solver; rca: its one pass), or of the update steps, with the samples
        per second (dsgd).
    random_state : int, RandomState instance or None, default=None
        Root seed of the feature blocks, the landmarks and the mini-batch shuffles.

    Attributes
    ----------
    solver_ : str
        The solver that ran: ``"subspace"``, ``"dsgd"``, ``"rca"`` or ``"exact"``.
    eigenvalues_ : ndarray of shape (n_components,)
        Variance of each component: the eigenvalues of the (centred) covariance operator,
        i.e. scikit-learn ``KernelPCA.eigenvalues_ / n_samples``. Subspace solver: of the
        Nyström approximation of the features' covariance from the last block (at most
        the components' variances, equal to them to second order in the subspace
        error); dsgd: on the fit sample; rca: of the features' covariance on all rows;
        exact: of the centred kernel matrix divided by ``n``.
    model_ : KernelExpansion
        The fitted functions (feature set, coefficient blocks, centring offset).
    bandwidth_ : float
        The bandwidth used.
    kernel_ : KernelSpec
        The kernel with its bandwidth.
    n_features_ : int
        Number of features in the model: ``n_features`` when given, the training rows
        for ``"exact"``.
    n_iter_ : int
        Iterations run, what ``max_iter`` bounds: full passes (subspace solver, sampled
        stages not counted), update steps (dsgd, over all calls of :meth:`partial_fit`),
        1 (rca: the pass of the moments; exact: the dense solve).
    convergence_ : list of dict
        One record per iteration, with the keys ``iteration`` (``n_iter_`` after it),
        ``rows`` (rows read so far), ``seconds`` (since the start of the fit) and
        ``measure`` (the solver's stopping measure, NaN when it has none), then the
        solver's own. Subspace solver: one record per full pass and one per sampled stage
        before them (``stage=True``, ``iteration`` the passes done so far; ``rows`` counts
        the stages' rows too); ``measure`` is the estimated error that ``tol`` is compared
        with (for a stage, of the next block on all rows); also ``stage``, ``change`` (how
        far the top-``k`` subspace moved, ``sin^2``), ``eigenvalues``, and for a pass
        ``residual_error`` (the residual estimate of its Ritz vectors) and
        ``contraction`` (of a step). A fit resumed from a checkpoint has the records of
        the passes before the interruption as they were saved. dsgd: one record per chunk
        task of steps, at its last step (``measure`` NaN). rca and exact: one record
        (``measure`` NaN).
    state_ : StepState
        Coefficients, step count and step scale (what :meth:`partial_fit` continues; the
        step scale is 0 after the subspace, rca and exact solvers, which take no steps).
    seed_ : int
        Root seed the model was built from.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of str
        Input column names, when fitted on a DataFrame.
    feature_dim_ : str or None
        Feature dimension name, when fitted on an xarray DataArray.

    Notes
    -----
    Subspace solver. A pass with ``M`` features, ``p = k + n_oversamples`` directions and
    ``n`` rows costs ``2 n d M`` flops for the kernel sections (or Fourier features) plus
    ``4 n M p``, and ``2 M^2 p`` for the joint whitening's two triangular solves; memory
    ``O(M p)`` plus one chunk, and the joint whitening's ``M x M`` factor (computed once
    per fit, ``M^3 / 3`` flops). A pass gives ``Y = Cov(z) V`` for the block ``V``; the
    model after it is the top-``k`` eigenvectors of ``Y (V^T Y)^+ Y^T``, the Nyström
    approximation of the covariance from ``V``: they lie in the span of ``Y``, one power
    step past the Ritz vectors of ``V``, and their eigenvalues are at most the
    covariance's. The error estimate of the Ritz vectors divides each residual by the gap
    between its Ritz value and the smallest one (a stand-in for ``lambda_{p+1}``); the
    contraction of a step is estimated by ``(lambda_p / lambda_k)^2`` from the same Ritz
    values. Both are estimates, as Krylov eigensolvers use, not bounds.

    The sampled stages before the passes each take one subspace iteration on a seeded
    subset of whole row chunks, four times as many rows as the stage before (the warm
    start's sample first), while a stage holds at most a quarter of the rows. A stage
    removes sampling noise from the block at a fraction of a pass's cost; the passes
    then judge the result on every row. Chunks stored in order (by class, by time) make
    the subsets biased: the stages help less, the passes still decide. Stages and passes
    run on the pass driver (:mod:`dsgd_dask.engine.driver`), which also writes the
    checkpoints, shows the progress bar and, on a ``distributed`` cluster, sends the
    feature set to the workers once per fit and runs a pass that lost a worker again.

    dsgd. One step with mini-batch ``X`` and block ``t``: ``h = H(X)``, ``C = h^T h / B``,
    old coefficients ``A_j <- A_j (I - eta C)`` (``I - eta UT[C]`` when ordered),
    ``A_t <- A_t + eta z_t(X)^T h / B``. Cost ``2 B d M`` flops for the features plus
    ``2 B M k``; memory ``O(M k)`` plus cached blocks.

    rca. Nyström features ``k(x, L) U_r S_r^{-1/2}`` (``K_LL = U S U^T`` on its
    eigenvalues above ``M eps max(S)``) or Fourier features ``[z_0(x), ..., z_{J-1}(x)] /
    sqrt(J)``; their mean and covariance are exact sums over every row (products taken
    after subtracting the mean features of a sample, so float32 features lose nothing
    to cancellation). Cost ``2 n d M`` flops for the features and ``n M^2`` for the
    moments, memory ``O(M^2)`` plus one chunk, then an ``M x M`` eigensolve.

    exact. With ``K~ = U diag(mu) U^T`` the centred kernel matrix, component ``i`` is
    ``k~(x, X) U_i / sqrt(mu_i)``. Cost ``O(n^2 d)`` for the kernel and up to ``O(n^3)``
    for the eigenpairs; memory one ``n x n`` float64 matrix. A lazy input is computed.

    References
    ----------
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015. C. Williams, M. Seeger, "Using the Nyström method
    to speed up kernel machines", NIPS 2001. Y. Saad, *Numerical Methods for Large
    Eigenvalue Problems*, SIAM 2011, ch. 5 (subspace iteration). D. Lopez-Paz, S. Sra,
    A. Smola, Z. Ghahramani, B. Schölkopf, "Randomized nonlinear component analysis",
    ICML 2014. B. Schölkopf, A. Smola, K.-R. Müller, "Nonlinear component analysis as a
    kernel eigenvalue problem", Neural Computation 10 (1998).

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> kpca = KernelPCA(n_components=2, n_features=256, random_state=0)
    >>> kpca.fit_transform(X).shape
    (500, 2)
    >>> kpca.solver_, kpca.n_features_
    ('subspace', 256)
    >>> exact = KernelPCA(n_components=2, solver="exact", random_state=0).fit(X)
    >>> bool(np.allclose(kpca.eigenvalues_, exact.eigenvalues_, rtol=0.05))
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        "n_components": COUNT, **KERNEL, **STEPS, **solver_constraint("KernelPCA"),
        "whitening": [StrOptions({"auto", "joint", "block"})],
        "n_oversamples": [Interval(Integral, 0, None, closed="left"), AUTO], "tol": NON_NEGATIVE,
        "init": [StrOptions({"rca", "random"})], "center": ["boolean"], "ordered": ["boolean"]}

    def __init__(self, n_components=5, *, kernel="gaussian", bandwidth="median", kernel_params=None,
                 features="nystroem", whitening="auto", solver="auto", n_features="auto",
                 block_size="auto", n_oversamples="auto", tol=1e-4, batch_size=256, max_iter="auto", shuffle_chunks=1,
                 n_partitions=1, eta0=0.5, eta_decay=0.01, average=False, init="rca", center=True, ordered=False,
                 compute_dtype="float32", cache_bytes=None, checkpoint=None, checkpoint_every=100,
                 verbose=False, random_state=None):
        self.n_components = n_components
        self.features = features
        self.whitening = whitening
        self.solver = solver
        self.n_oversamples = n_oversamples
        self.tol = tol
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.n_features = n_features
        self.block_size = block_size
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.shuffle_chunks = shuffle_chunks
        self.n_partitions = n_partitions
        self.eta0 = eta0
        self.eta_decay = eta_decay
        self.average = average
        self.init = init
        self.center = center
        self.ordered = ordered
        self.compute_dtype = compute_dtype
        self.cache_bytes = cache_bytes
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.verbose = verbose
        self.random_state = random_state

    # -- fitting -----------------------------------------------------------------------
    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y=None, *, callback=None):
        """Fit the components on ``X`` with the solver ``solver`` (``"auto"``: the subspace solver).

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one), xarray DataArray or Dataset
            Training data of shape (n_samples, n_features); lazy inputs are streamed chunk
            by chunk (``solver="exact"`` computes them: at most 20,000 rows). A Dataset
            must hold a single 2-D data variable.
        y : None
            Ignored.
        callback : callable, optional
            ``callback(n_iter, model)`` after every full pass (subspace solver: not after
            a sampled stage; called once the pass's checkpoint is written, so an exception
            from it stops a fit that resumes after that pass), every chunk task of steps
            (dsgd) or once (rca, exact), with ``model`` a :class:`KernelExpansion` of the
            current raw functions (neither centred nor rotated): for monitoring
            convergence.

        Returns
        -------
        self : KernelPCA
        """
        solver = self._solver_name()
        view = self._validate_input(X, reset=True)
        with one_blas_thread():  # the same products, so the same model, on any machine and scheduler
            if solver in ONE_SHOT:
                self._fit_one_shot(view, callback)
            elif (AUTO_SOLVER if solver == "auto" else solver) == "subspace":
                self._fit_subspace(view, callback)
            else:
                self._fit_steps(view, callback)
        return self

    def _fit_steps(self, view, callback=None) -> None:
        """``solver="dsgd"``: ``max_iter`` doubly stochastic steps (resumed from a checkpoint of them)."""
        ckpt, found = self._checkpointer({"X": view})
        seed = None
        if found is not None:
            seed, resumed = found
        self._clock = Clock()
        self._initialise(view, seed=seed)
        if ckpt is not None:
            ckpt.seed = self.seed_
            if seed is not None:
                self.state_ = resumed
        self.convergence_ = []
        self._run_steps(view, self._params["max_iter"], epoch_offset=0, callback=callback, checkpointer=ckpt)
        self._finalise(self._sample)
        del self._sample, self._clock

    @accepts_storage_options
    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def partial_fit(self, X, y=None):
        """Take doubly stochastic steps (``solver="dsgd"``) over ``X``, as one more batch of a stream.

        Every call takes one pass of update steps over ``X`` (``ceil(n / batch_size)``
        steps); the first call also initialises (sample, bandwidth, features, initial
        solve on ``X``). The centring offset, the ordering of the components and
        ``eigenvalues_`` are recomputed on a sample of ``X`` after each call. With
        ``solver="auto"`` or ``"dsgd"`` only (the other solvers need all the data at
        once: a ``ValueError``), and only on a model fitted by steps.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
        y : None
            Ignored.

        Returns
        -------
        self : KernelPCA
        """
        self._solver_name()
        check_partial_fit(self)
        first = not hasattr(self, "state_")
        if not first and self.solver_ != "dsgd":
            raise ValueError(f"this model was fitted by solver={self.solver_!r}; partial_fit continues fits of "
                             "doubly stochastic steps only: fit a new estimator with partial_fit, or fit with "
                             "solver='dsgd'")
        view = self._validate_input(X, reset=first)
        with one_blas_thread():
            if first:
                self._initialise(view, stream=True)
                self.convergence_ = []
                sample = self._sample
                del self._sample
            else:
                sample = sample_rows(view, N_SAMPLE, self.seed_, key=self._n_calls + 1)
            n_steps = max(1, -(-view.n_samples // self._params["batch_size"]))
            self._run_steps(view, n_steps, epoch_offset=self._n_calls)
            self._finalise(sample)
        return self

    def _solver_name(self) -> str:
        """``solver`` checked against the table (with ``features``); ``"auto"`` left as is."""
        return check_solver(self, self.features)

    def _check_params(self, n_samples: int, stream: bool = False) -> dict:
        """The parameters validated and resolved for ``n_samples`` rows (``stream``: for :meth:`partial_fit`)."""
        k, kind = int(self.n_components), self.features
        solver = check_solver(self, kind)
        if stream:
            solver = "dsgd"
        elif solver == "auto":
            solver = AUTO_SOLVER
        n_blocks, block = self._check_budget(solver, kind, k, n_samples)
        whitening = self.whitening
        if whitening == "joint" and kind != "nystroem":
            raise ValueError(f'whitening="joint" needs features="nystroem", got features={kind!r}')
        if solver in ONE_SHOT:
            if whitening == "block":
                raise ValueError(f'solver={solver!r} whitens all the landmarks together: whitening="block" is for '
                                 'the "subspace" and "dsgd" solvers')
            whitening = "joint" if kind == "nystroem" else "block"
        elif whitening == "auto":
            limit = JOINT_STEPS_MAX_FEATURES if solver == "dsgd" else JOINT_MAX_FEATURES
            joint = kind == "nystroem" and n_blocks > 1 and (solver == "dsgd" or n_blocks * block <= limit)
            whitening = "joint" if joint else "block"
        M = n_blocks * block
        if solver == "dsgd" and whitening == "joint" and n_blocks > 1 and M > JOINT_STEPS_MAX_FEATURES:
            raise ValueError(f"KernelPCA(solver='dsgd') whitens several Nyström blocks together (one "
                             f"eigendecomposition of M x M): at most {JOINT_STEPS_MAX_FEATURES} features, got {M}; use "
                             f"n_features <= {JOINT_STEPS_MAX_FEATURES}, solver='subspace', features='fourier', or "
                             "whitening='block' (each block whitened on its own: another, coarser kernel)")
        if solver == "exact":
            from dsgd_dask.baselines._dense import check_dense_size

            check_dense_size(n_samples, "KernelPCA(solver='exact')")
            if k > n_samples:
                raise ValueError(f"n_components={k} must be <= n_samples={n_samples}")
        elif k > n_blocks * block:
            raise ValueError(f"n_components={k} must be <= n_features={n_blocks * block}"
                             + (f" (Nyström features: at most the {n_samples} rows)" if kind == "nystroem" else ""))
        if solver == "dsgd" and k > block:
            raise ValueError(f"n_components={k} must be <= block_size={block} (the initial block)")
        oversamples = k + 10 if self.n_oversamples == "auto" else int(self.n_oversamples)
        max_iter = self.max_iter if self.max_iter == "auto" else int(self.max_iter)
        batch = int(self.batch_size)
        if max_iter == "auto":
            if solver == "subspace":
                max_iter = SUBSPACE_MAX_PASSES
            elif solver == "dsgd":
                epochs3 = 3 * -(-n_samples // batch)
                max_iter = max(250, min(epochs3, 3000))
            else:
                max_iter = 1
        return {
            "n_components": k,
            "features": kind,
            "solver": solver,
            "block_size": block,
            "n_blocks": n_blocks,
            "whitening": whitening,
            "n_oversamples": oversamples,
            "tol": float(self.tol),
            "batch_size": batch,
            "max_iter": max_iter,
            "shuffle_chunks": int(self.shuffle_chunks),
            "n_partitions": int(self.n_partitions),
            "eta0": float(self.eta0),
            "eta_decay": float(self.eta_decay),
            "init": self.init,
            "center": bool(self.center),
            "ordered": bool(self.ordered),
        }

    def _check_budget(self, solver: str, kind: str, k: int, n_samples: int) -> tuple[int, int]:
        """``(n_blocks, block_size)`` of the feature budget: exactly ``n_features`` when it is an integer."""
        block = self.block_size if self.block_size == "auto" else int(self.block_size)
        budget = self.n_features if self.n_features == "auto" else int(self.n_features)
        if solver == "exact":  # every training row a landmark, one set whitened together
            return 1, n_samples
        if kind == "fourier":
            largest = FOURIER_BLOCK
        else:
            largest = NYSTROEM_STEP_BLOCK if solver == "dsgd" else NYSTROEM_MAX_BLOCK
        if budget != "auto":
            if kind == "nystroem" and budget > n_samples:
                raise ValueError(f"n_features={budget} exceeds the {n_samples} rows: Nyström landmarks are distinct "
                                 f"rows, use n_features <= {n_samples}")
            if block == "auto":
                if solver == "rca" and kind == "nystroem":  # all the landmarks whitened together
                    return 1, budget
                if kind == "fourier" and budget % FOURIER_BLOCK == 0:
                    return budget // FOURIER_BLOCK, FOURIER_BLOCK
                return split_budget(budget, largest)
            if budget % block:
                below, above = block * (budget // block), block * -(-budget // block)
                raise ValueError(f"n_features={budget} is not a multiple of block_size={block}: use n_features="
                                 + (f"{below} or {above}" if below else f"{above}") + ", or block_size='auto'")
            return budget // block, block
        # the automatic budget, in whole blocks (Nyström: at most the rows)
        if solver == "dsgd":
            budget = min(4096, max(1024, 2 * n_samples))
        else:
            budget = max(SUBSPACE_MIN_FEATURES, SUBSPACE_FEATURES_PER_COMPONENT * k)
        if block == "auto":
            if kind == "fourier":
                block = FOURIER_BLOCK
            elif solver == "dsgd":
                block = NYSTROEM_STEP_BLOCK
            else:  # the budget in as few blocks of at most NYSTROEM_MAX_BLOCK as it takes, evenly
                rows = min(budget, n_samples)
                block = -(-rows // -(-rows // NYSTROEM_MAX_BLOCK))
        if kind == "fourier":
            return -(-budget // block), block
        block = min(block, n_samples)  # landmarks are distinct rows of the data
        return max(1, min(-(-budget // block), n_samples // block)), block

    def _initialise(self, view, seed: int | None = None, stream: bool = False) -> None:
        """Seed, sample, bandwidth, features and the initial solve (``stream``: for :meth:`partial_fit`)."""
        p = self._params = self._check_params(view.n_samples, stream)
        self.solver_ = p["solver"]
        self.seed_ = self._seed(self.random_state) if seed is None else seed
        sample = sample_rows(view, N_SAMPLE, self.seed_)
        spec = self._kernel_spec(sample)
        if p["features"] == "nystroem":
            dtype = self.compute_dtype
            rows = landmark_rows(view, p["n_blocks"] * p["block_size"], self.seed_, shuffle=True)
            center = sample.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None
            joint = p["whitening"] == "joint"
            features = NystroemFeatures(spec, rows, p["block_size"], self.seed_, dtype, center=center,
                                        whiten=not joint)
            if joint and p["solver"] == "dsgd":  # the steps' blocks: the landmarks whitened together, split
                features, joint = JointNystroemBlocks.of(features), False
        else:
            joint = False
            features = self._make_features(spec, sample, self.seed_, p["block_size"])
        # the joint whitening's factor (M x M) stays with the fit, never with the model
        self._whitening = JointWhitening(features) if joint else None
        # blocks whitened each on its own (or the steps' joint blocks) sum n_blocks approximations of the kernel
        self._copies = 1 if joint else p["n_blocks"]
        self._features = features
        self._sample = sample
        self.bandwidth_ = spec.bandwidth
        self.kernel_ = spec
        self._n_calls = 0  # runs of steps (fit, partial_fit): the epoch offset and sample key of the next one
        if p["solver"] == "subspace":  # the warm start is the pass solver's (_SubspaceSolver.start)
            self._config = self._rule = None
            return
        k = p["n_components"]
        z0 = features.transform(sample[:N_INIT], 0, 1).astype(np.float64)
        if p["center"]:
            z0 -= z0.mean(axis=0)
        vals, vecs = small_eigh(z0.T @ z0 / z0.shape[0])
        vals, vecs = vals[::-1], vecs[:, ::-1]
        lam = float(vals[0])
        check_variance(lam)
        if p["init"] == "rca":
            coef = vecs[:, :k].copy()
        else:
            rng = np.random.default_rng(self.seed_)
            coef = rng.standard_normal((features.block_size, k)) * 1e-3
        if isinstance(features, JointNystroemBlocks):  # every joint block is fed from the first step
            coef = np.vstack([coef, np.zeros((features.max_blocks * features.block_size - coef.shape[0], k))])
        self.state_ = StepState(coef, 0, p["eta0"] / lam)
        self._config = StepConfig(n_blocks=p["n_blocks"], batch_size=p["batch_size"], eta_decay=p["eta_decay"],
                                  average_from=self._average_from(p["batch_size"]))
        self._rule = pca_rule(p["ordered"], p["center"], GUARD_FACTOR * lam)

    # -- the rca and exact solvers --------------------------------------------------------
    def _fit_one_shot(self, view, callback=None) -> None:
        """One pass of the feature moments and a dense eigensolve (rca), or the dense kernel's eigenpairs (exact)."""
        from dsgd_dask.baselines._dense import materialise
        from dsgd_dask.baselines.exact import exact_pca
        from dsgd_dask.baselines.rca import rca_fourier, rca_nystroem

        clock = Clock()
        p = self._params = self._check_params(view.n_samples)
        self.solver_ = p["solver"]
        self.seed_ = self._seed(self.random_state)
        sample = sample_rows(view, N_SAMPLE, self.seed_)
        spec = self._kernel_spec(sample)
        k, center = p["n_components"], p["center"]
        shift = sample.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None
        if p["solver"] == "exact":
            solution = exact_pca(materialise(view), spec, k, center, self.seed_, shift)
        elif p["features"] == "nystroem":
            solution = rca_nystroem(view, spec, sample, k, p["n_blocks"] * p["block_size"], self.seed_, center, shift,
                                    verbose=bool(self.verbose))
        else:
            features = self._make_features(spec, sample, self.seed_, p["block_size"])
            solution = rca_fourier(view, features, p["n_blocks"], sample, k, center, verbose=bool(self.verbose))
        self._features = solution.features
        self.state_ = StepState(solution.coef, 0, 0.0)
        self._config = self._rule = None
        self.model_ = KernelExpansion(solution.features, solution.coef, solution.offset)
        self.model_.token = model_fingerprint(self.model_)
        self.eigenvalues_ = np.asarray(solution.eigenvalues, dtype=np.float64)
        self.n_features_ = solution.coef.shape[0]
        self._n_features_out = k
        self.bandwidth_ = spec.bandwidth
        self.kernel_ = spec
        self.n_iter_ = 1
        self._n_calls = 0
        self.convergence_ = [record(1, solution.n_samples, clock(), None)]
        if callback is not None:
            callback(1, KernelExpansion(solution.features, solution.coef))

    # -- the subspace solver -----------------------------------------------------------------
    def _fit_subspace(self, view, callback=None) -> None:
        """``solver="subspace"`` on the pass driver: a warm start, sampled stages, then full passes (resumable)."""
        ckpt = self._pass_checkpoint({"X": view})
        saved = ckpt.load() if ckpt is not None else None
        clock = Clock()
        self._initialise(view, seed=None if saved is None else saved.seed)
        if ckpt is not None:
            ckpt.seed = self.seed_
        p = self._params
        solver = self._subspace_solver(view)
        run = run_passes(solver, view, p["max_iter"], callback=callback, checkpoint=ckpt, verbose=self.verbose,
                         clock=clock)
        if run.n_iter == 0:  # no pass over all the rows: nothing to refine
            raise ValueError("max_iter must allow at least one pass over the data")
        self.convergence_ = run.records
        self.n_iter_ = run.n_iter
        copies = self._copies
        self.state_ = StepState(run.state["prev"] / np.sqrt(copies), 0, 0.0)
        self._pass_result = (run.state["lam"] / copies, run.state["mean"])
        self._finalise_passes(self._sample)
        del self._sample
        self._whitening = None

    def _subspace_solver(self, view) -> _SubspaceSolver:
        """The pass solver of this fit (after :meth:`_initialise`)."""
        p = self._params
        return _SubspaceSolver(self._features, p["n_blocks"], self._whitening, self._copies, row_chunks(view),
                               self._sample, self.seed_, p["n_components"], p["n_oversamples"], p["tol"],
                               p["center"], p["init"])

    def _finalise_passes(self, sample: np.ndarray) -> None:
        """Centring offset from the full-data mean, eigenvalues from the last pass, signs from the sample."""
        vals, mean = self._pass_result
        coef = self.state_.coef[0]
        offset = mean @ coef if self._params["center"] else np.zeros(coef.shape[1])
        if self._whitening is not None:
            coef = self._whitening.fold(coef)
        h = KernelExpansion(self._features, coef, offset).evaluate(sample)
        signs = np.sign(h[np.abs(h).argmax(axis=0), np.arange(h.shape[1])])
        signs[signs == 0] = 1.0
        coef = coef * signs
        self.state_ = StepState(coef, 0, self.state_.eta_scale)
        self.model_ = KernelExpansion(self._features, coef, offset * signs)
        self.model_.token = model_fingerprint(self.model_)
        self.eigenvalues_ = np.asarray(vals, dtype=np.float64)
        self.n_features_ = coef.shape[0]
        self._n_features_out = coef.shape[1]
        del self._pass_result

    def _finalise(self, sample: np.ndarray) -> None:
        """Centring offset, eigen-ordering and eigenvalues from the fit sample."""
        raw = KernelExpansion(self._features, self.state_.model_coef[0])
        h = raw.evaluate(sample)
        mean = h.mean(axis=0) if self._params["center"] else np.zeros(h.shape[1])
        hc = h - mean
        cov = hc.T @ hc / h.shape[0]
        if self._params["ordered"]:
            rot = np.eye(cov.shape[0])
        else:
            _, rot = small_eigh(cov)
            rot = rot[:, ::-1]
        hr = hc @ rot
        # deterministic signs: the largest-magnitude value of each component is positive
        signs = np.sign(hr[np.abs(hr).argmax(axis=0), np.arange(hr.shape[1])])
        signs[signs == 0] = 1.0
        rot = rot * signs
        budget = self._params["n_blocks"] * self._params["block_size"]
        features, coef = sections(self._features, self.state_.model_coef[0] @ rot, budget)
        offset = mean @ rot
        if features is not self._features and self._params["center"]:
            # kernel sections round otherwise than the joint blocks: centre on their own values
            offset = KernelExpansion(features, coef).evaluate(sample).mean(axis=0)
        self.model_ = KernelExpansion(features, coef, offset)
        self.model_.token = model_fingerprint(self.model_)
        self.eigenvalues_ = np.einsum("ij,jk,ki->i", rot.T, cov, rot)
        self.n_features_ = coef.shape[0]
        self._n_features_out = coef.shape[1]

    def _feature_sets(self) -> tuple:
        f = self._features
        joint = self._params.get("whitening") == "joint" and self.solver_ == "dsgd"
        if joint and not isinstance(f, JointNystroemBlocks):
            # a loaded model keeps its landmarks as kernel sections: whitened together again to continue
            self._features = f = JointNystroemBlocks.of(f)
        return (f,)

    # -- transforming ------------------------------------------------------------------
    @accepts_storage_options
    def transform(self, X):
        """Project ``X`` on the fitted components.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)

        Returns
        -------
        ndarray, dask array or DataArray of shape (n_samples, n_components)
            Numpy in, numpy out (float64). Dask or Zarr in: a lazy dask array with one
            task per row chunk, regenerating the feature blocks inside the task. A
            DataArray in: a DataArray with dims ``(sample_dim, "component")`` keeping the
            sample coordinates, lazy when the input is dask-backed.
        """
        check_is_fitted(self, "model_")
        view = self._validate_input(X, reset=False)
        return apply_rows(view, self.model_.evaluate, self.model_.n_outputs, self.model_.token,
                          "kernelpca")

    # -- persistence -------------------------------------------------------------------
    def _fitted_payload(self) -> tuple[dict, dict]:
        fattrs, farrays = features_payload(self._features)
        attrs = {
            "estimator": type(self).__name__,
            "params": self._params_payload(),
            "features": fattrs,
            "fitted": {
                "seed_": self.seed_, "bandwidth_": self.bandwidth_, "n_iter_": self.n_iter_,
                "solver_": self.solver_, "n_calls": self._n_calls, **self._input_payload(),
                "step": self.state_.step, "eta_scale": self.state_.eta_scale, "n_mean": self.state_.n_mean,
                "config": None if self._config is None else asdict(self._config),
                "guard_limit": None if self._rule is None else self._rule.guard_limit,
                "resolved_params": self._params,
            },
        }
        arrays = {"coef": self.model_.coef, "offset": self.model_.offset, "eigenvalues": self.eigenvalues_,
                  "state_coef": self.state_.coef[0], **farrays}
        if self.state_.mean:
            arrays["state_mean"] = self.state_.mean[0]
        return attrs, arrays

    @classmethod
    def _from_payload(cls, attrs: dict, arrays: dict) -> KernelPCA:
        params, fitted = dict(attrs["params"]), attrs["fitted"]
        p = dict(fitted["resolved_params"])
        renamed(params)
        renamed(p)
        est = cls(**params)
        features = features_from_payload(attrs["features"], arrays, cache_bytes=est.cache_bytes)
        est._features = features
        est._params = p
        est._config = None if fitted["config"] is None else StepConfig(**fitted["config"])
        est._rule = None if fitted["guard_limit"] is None else pca_rule(p["ordered"], p["center"],
                                                                        fitted["guard_limit"])
        est.state_ = StepState(arrays["state_coef"], fitted["step"], fitted["eta_scale"],
                               arrays.get("state_mean", ()), int(fitted.get("n_mean", 0)))
        est.model_ = KernelExpansion(features, arrays["coef"], arrays["offset"])
        est.model_.token = model_fingerprint(est.model_)
        est.eigenvalues_ = arrays["eigenvalues"]
        est.kernel_ = features.kernel
        for name in ("seed_", "bandwidth_", "n_iter_"):
            setattr(est, name, fitted[name])
        est.solver_ = fitted.get("solver_", p["solver"])
        est._n_calls = fitted.get("n_calls", fitted.get("n_passes_", 0))
        est._restore_input(fitted)
        est.n_features_ = est.model_.coef.shape[0]
        est._n_features_out = est.model_.coef.shape[1]
        return est

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_sample", None)
        state.pop("_whitening", None)
        state.pop("_clock", None)
        return state


# -- the subspace solver on the pass driver ---------------------------------------------------------
class _SubspaceSolver:
    """Block subspace iteration with sampled stages: ``KernelPCA(solver="subspace")`` on the pass driver.

    Parameters
    ----------
    features : NystroemFeatures or RandomFeatures
        The fit's feature set; its first ``n_blocks`` blocks are used.
    n_blocks : int
    whitening : JointWhitening or None
        The joint whitening of Nyström features (then applied to the coefficients by the
        passes), or ``None`` (the features' own map, block by block).
    copies : int
        Blocks whitened each on its own (1 when jointly): their concatenation carries
        ``copies`` approximations of the kernel, so eigenvalues are divided by it.
    sizes : sequence of int
        Rows of each row chunk of the data (:func:`~dsgd_dask.engine.passes.row_chunks`):
        the stages draw seeded subsets of them.
    sample : ndarray
        The fit's seeded sample: the warm start's rows.
    seed : int
        Root seed of the fit (the warm start's random block, the stages' chunk subsets).
    k, n_oversamples : int
        Components, and directions carried beyond them (``p = k + n_oversamples``).
    tol : float
        Stop after the first full pass whose estimated error is at most ``tol``.
    center : bool
        Centre the features.
    init : {"rca", "random"}
        Start from subspace iterations on the sample, or from a random block.

    Notes
    -----
    The state (what a checkpoint keeps): ``V`` the block (``M x p``), ``prev`` the
    model's top ``k`` directions after the last pass or stage, ``lam`` and ``mean`` its
    eigenvalues (not divided by ``copies``) and the features' mean after the last pass,
    ``shift`` the raw-feature shift of every pass, and ``counters`` ``[staging,
    rows_before, step]``: whether stages go on, the rows of the last stage (the warm
    start's first) and the passes taken, stages included (the key of the next stage's
    chunk subset). A stage's pass is not an iteration (``counted=False``); its measure
    is the estimated error of the next block on all rows.
    """

    name = "subspace"
    measure_name = "estimated_error"

    def __init__(self, features, n_blocks: int, whitening, copies: int, sizes, sample: np.ndarray, seed: int,
                 k: int, n_oversamples: int, tol: float, center: bool, init: str):
        self.features = features
        self.n_blocks = int(n_blocks)
        self.whitening = whitening
        self.copies = int(copies)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.n = int(self.sizes.sum())
        self.sample = sample
        self.seed = seed
        self.k = int(k)
        self.n_oversamples = int(n_oversamples)
        self.tol = float(tol)
        self.center = bool(center)
        self.init = init

    # -- the driver's hooks
    def start(self) -> dict:
        V, vals, shift, rows = self._warm_start()
        # Ritz values of the concatenated blocks are n_blocks times the operator's
        check_variance(float(vals[0]) / self.copies)
        M = V.shape[0]
        return {"V": V, "prev": np.ascontiguousarray(V[:, :self.k]), "lam": np.zeros(self.k), "mean": np.zeros(M),
                "shift": shift, "counters": np.array([1, rows, 0], dtype=np.int64)}

    def plan(self, state: dict):
        return covariance_request(self.features, self.n_blocks, state["V"], state["shift"], whitening=self.whitening,
                                  chunks=self._stage_chunks(state))

    def update(self, state: dict, totals: PassTotals) -> Update:
        k, copies = self.k, self.copies
        V, prev, shift = state["V"], state["prev"], state["shift"]
        _, rows_before, step = (int(c) for c in state["counters"])
        chunks = self._stage_chunks(state)
        sums = covariance_times(totals, self.features, V, shift, self.center, whitening=self.whitening)
        R, lam_v, V_next = ritz_step(V, sums.cov_times)
        err_ritz = residual_sin2(V, sums.cov_times, R, lam_v, k)
        rho = contraction(lam_v, k)
        step += 1
        if chunks is not None:
            # Error of the next block on all rows: the contracted error of this one plus
            # the noise of this stage's rows (the residual measured here charged to the
            # noise of the previous, smaller sample, falling as 1 / rows).
            rows = totals.n
            ahead = err_ritz * (rho + rows_before / rows)
            staging = rho * ahead > self.tol
            top = np.ascontiguousarray(R[:, :k])
            extra = {"change": subspace_sin2(prev, top), "eigenvalues": (lam_v[:k] / copies).tolist()}
            after = {**state, "V": V_next, "prev": top,
                     "counters": np.array([staging, rows, step], dtype=np.int64)}
            return Update(after, ahead, counted=False, extra=extra)
        ext = nystroem_extension(V, sums.cov_times, k)
        U, lam, err = (ext[0], ext[1], err_ritz * rho) if ext is not None else (R[:, :k], lam_v[:k], err_ritz)
        U = np.ascontiguousarray(U)
        extra = {"stage": False, "change": subspace_sin2(prev, U), "eigenvalues": (lam / copies).tolist(),
                 "residual_error": err_ritz, "contraction": rho}
        after = {"V": V_next, "prev": U, "lam": np.asarray(lam[:k], dtype=np.float64), "mean": sums.mean,
                 "shift": shift, "counters": np.array([False, rows_before, step], dtype=np.int64)}
        return Update(after, err, counted=True, extra=extra)

    def done(self, record: dict) -> bool:
        return not record.get("stage", False) and record["measure"] <= self.tol

    def model(self, state: dict) -> KernelExpansion:
        """The callback's model: the current raw functions (neither centred nor rotated) on the model's features."""
        coef = state["prev"] / np.sqrt(self.copies)
        return KernelExpansion(self.features, coef if self.whitening is None else self.whitening.fold(coef))

    # -- its parts
    def _stage_chunks(self, state: dict):
        """The row chunks of the next pass if it is a sampled stage, else ``None`` (a pass over every row).

        A stage is taken while stages go on and it holds at most ``STAGE_MAX_FRACTION`` of
        the rows: ``STAGE_GROWTH`` times the rows of the stage before (the warm start's
        first), in whole chunks of a seeded subset. Stages stop once one predicts that
        the next pass ends the fit (``update``).
        """
        staging, rows_before, step = (int(c) for c in state["counters"])
        if staging and STAGE_GROWTH * rows_before <= STAGE_MAX_FRACTION * self.n:
            return chunk_subset(self.sizes, STAGE_GROWTH * rows_before, self.seed, key=step)
        return None

    def _warm_start(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``(V, lam, shift, rows)``: an orthonormal block of ``p`` directions from subspace iterations on the sample.

        The features of (part of) the sample are held in memory, so each iteration is two
        small products; the block is the starting point of the passes. Also the raw-feature
        shift the passes subtract (the sample's mean raw features) and the rows used.
        ``V`` is in the space of the concatenated features, ``lam`` its Ritz values (per
        block, as the passes report them).
        """
        features, J, k = self.features, self.n_blocks, self.k
        M = J * features.block_size
        sample = self.sample
        rows = int(min(sample.shape[0], max(N_INIT, WARM_FLOATS // M)))
        width = min(k + self.n_oversamples, M)
        raw = features.raw_transform(sample[:rows], 0, J)
        shift = raw.mean(axis=0, dtype=np.float64)
        if self.whitening is not None:
            Z = self.whitening.whiten(raw).astype(features.dtype)
            del raw
        else:
            del raw
            Z = features.transform(sample[:rows], 0, J)
        if self.center:
            Z -= Z.mean(axis=0, dtype=np.float64).astype(Z.dtype)
        rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(self.seed, spawn_key=(WARM_TAG,))))
        V = orthonormal(rng.standard_normal((M, width)))
        if self.init == "random":
            # the random block itself (rotated to its Ritz vectors): the passes start from scratch
            CV = (Z.T @ (Z @ V.astype(Z.dtype))).astype(np.float64) / rows
            R, lam, _ = ritz_step(V, CV)
            return R, lam, shift, rows
        prev = None
        for _ in range(WARM_ITERATIONS):
            CV = (Z.T @ (Z @ V.astype(Z.dtype))).astype(np.float64) / rows
            R, lam, V = ritz_step(V, CV)
            if prev is not None and estimated_error(subspace_sin2(prev, R[:, :k]),
                                                    contraction(lam, k)) <= WARM_TOL:
                break
            prev = R[:, :k]
        return R, lam, shift, rows
