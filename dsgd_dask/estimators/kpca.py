"""KernelPCA: doubly stochastic kernel PCA as a scikit-learn transformer."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._linalg import small_eigh
from dsgd_dask._threads import one_blas_thread
from dsgd_dask._validation import check_choice, check_float, check_int
from dsgd_dask.engine.distributed import active_client
from dsgd_dask.engine.passes import full_pass, row_chunks
from dsgd_dask.engine.steps import StepConfig, StepState
from dsgd_dask.estimators._steps import (
    StepEstimatorMixin,
    features_from_payload,
    features_payload,
    model_fingerprint,
    register,
)
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.features.whitening import JointWhitening
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.progress import pass_bar
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
#: Default feature budget of the subspace solver: ``max(2048, 64 k)``.
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


@register
class KernelPCA(StepEstimatorMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                    BaseEstimator):
    """Kernel PCA on data of any size: random feature blocks, fitted by full-data passes or stochastic steps.

    The model is a sum of feature blocks, ``h(x) = sum_j z_j(x) A_j``, and keeps only
    what defines the blocks and their coefficients, never the data or an ``n x n``
    matrix. Two kinds of blocks:

    * ``features="nystroem"`` (default): the kernel at ``M`` seeded landmark rows drawn
      from the data, in blocks of ``m``, whitened either jointly by one Cholesky factor of
      ``K_LL`` (the Nyström approximation of all ``M`` landmarks; the fit holds the
      ``M x M`` factor, the fitted model only the landmarks) or block by block, each by
      its own ``K_jj^{-1/2}`` (the average of ``M / m`` Nyström approximations of ``m``
      landmarks; ``M m`` numbers; see ``whitening``);
    * ``features="fourier"``: random Fourier features regenerated from their seeds (the
      paper's blocks; only seeds are stored).

    Two solvers:

    * ``solver="subspace"`` (default): a warm start on a sample, stages on growing
      random subsets of the row chunks, then passes over all the data of block subspace
      iteration (``Cov(z) V`` accumulated as a reduction over row chunks: on a cluster
      every worker computes its chunks at once), converging geometrically until the
      estimated error is below ``tol``;
    * ``solver="oja"``: doubly stochastic gradient steps (Xie, Liang & Song 2015), each on
      a mini-batch of rows and one block of features, ``O(1/t)``.

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
        Nyström blocks (landmark rows) or random Fourier blocks.
    whitening : {"auto", "joint", "block"}, default="auto"
        Nyström features: whiten all the landmarks together (``"joint"``: one Cholesky
        factor of their ``M x M`` kernel matrix, ``M^3 / 3`` flops and ``8 M^2`` bytes
        during the fit; subspace solver only) or each block on its own (``"block"``:
        ``m^3`` flops and ``8 M m`` bytes per block; its representation is about as
        accurate as one block's, whatever ``M``). ``"auto"``: joint for the subspace
        solver with several blocks and at most 32,768 features (in :meth:`fit`; in
        :meth:`partial_fit`, which takes steps after its first call, block), block otherwise.
    solver : {"subspace", "oja"}, default="subspace"
        Full-data passes of block subspace iteration, or doubly stochastic steps.
    n_features : int or "auto", default="auto"
        Feature budget ``M`` (rounded up to whole blocks; Nyström blocks take distinct
        rows, so at most the number of rows). ``"auto"``: ``max(2048, 64 k)`` for the
        subspace solver, ``min(4096, max(1024, 2 n))`` for steps. With steps, features
        grow by one block per step until the budget is reached; later steps revisit the
        blocks in turn.
    block_size : int or "auto", default="auto"
        Features per block ``m``. ``"auto"``: Nyström blocks with the subspace solver take
        the budget in as few equal blocks of at most 4096 as it takes (whitened jointly,
        blocks are only a way to compute; whitened each on its own, one block of ``M``
        landmarks represents the kernel better than several blocks of fewer; the passes
        apply the whitening to the coefficients, not to every row); 1024 for Nyström
        blocks with steps; 256 for Fourier blocks. With steps, ``>= n_components``.
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
        set by ``n_features``.
    batch_size : int, default=256
        Steps: rows per step ``B``.
    max_iter : int or "auto", default="auto"
        Subspace solver: largest number of full passes over the data, sampled stages not
        counted (``"auto"``: 20).
        Steps: number of update steps (``"auto"``: ``max(250, min(3 epochs, 3000))``).
    shuffle_chunks : int, default=1
        Steps, for dask, Zarr and xarray inputs: how many chunks (in a seeded random order per
        epoch) are read together and have their rows shuffled together, a shuffle buffer
        for data stored in order. Rows within a chunk are always shuffled.
    n_partitions : int, default=1
        Steps: data-parallel steps: every mini-batch is split over ``n_partitions`` slabs of the
        data, each part's sums computed where its rows live (on a ``distributed``
        cluster: on the worker holding its chunk) and reduced before one update. The
        result depends on ``n_partitions`` but never on the scheduler or the number of
        workers. Use about as many partitions as workers, with large batches.
    eta0 : float, default=0.5
        Steps (and :meth:`partial_fit` after the first call): ``theta_0`` of the step
        size ``eta_t = theta_0 / (lambda_1 (1 + theta_1 t))``, relative to the
        top-eigenvalue estimate ``lambda_1`` of the initial solve, so that the default
        works on any data scale.
    eta_decay : float, default=0.01
        ``theta_1`` of the step size.
    init : {"rca", "random"}, default="rca"
        Subspace solver: start the passes from subspace iterations on a sample of up to
        10,000 rows (``"rca"``) or from a random block. Steps: start from the top
        components of the first block's covariance on a sample, or from small random
        coefficients.
    center : bool, default=True
        Centre the features (kernel PCA of the centred covariance operator, as
        scikit-learn's ``KernelPCA``). Without centring the mean function dominates.
    ordered : bool, default=False
        Steps: use the generalised Hebbian rule, which finds the individual
        eigenfunctions in order of eigenvalue. Otherwise the subspace (Oja) rule is used
        and the basis is rotated to the eigenfunctions of the subspace at the end of the
        fit. (The subspace solver returns ordered eigenfunctions either way.)
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the features; coefficients and statistics accumulate in float64.
    cache_bytes : int, optional
        Memory budget for cached feature blocks; ``None`` uses a quarter of the free
        memory (at most 4 GiB), 0 regenerates every block at every use.
    checkpoint : str, os.PathLike or file:// URL, optional
        Zarr group, on a local filesystem, where :meth:`fit` saves its state after every
        pass (subspace solver) or every ``checkpoint_every`` steps (atomically: a crash
        never leaves a checkpoint that loads wrong). When it exists at the start of
        :meth:`fit`, the fit resumes from it and ends with the same model as an
        uninterrupted run; a checkpoint of another fit is refused.
    checkpoint_every : int, default=100
        Steps between checkpoints (written at the end of the chunk task that crosses them).
    verbose : bool, default=False
        Show a progress bar (:mod:`tqdm`, on standard error or as a notebook widget): of
        the full-data passes, with how far the subspace moved and the estimated error, or
        of the update steps, with the samples per second.
    random_state : int, RandomState instance or None, default=None
        Root seed of the feature blocks and of the mini-batch shuffles.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        Variance of each component on the fit sample: the eigenvalues of the (centred)
        covariance operator, i.e. scikit-learn ``KernelPCA.eigenvalues_ / n_samples``
        (subspace solver: of its Nyström approximation from the last block, at most the
        components' variances and equal to them to second order in the subspace error).
    model_ : KernelExpansion
        The fitted functions (seeds, coefficient blocks, centring offset).
    bandwidth_ : float
        The bandwidth used.
    n_features_ : int
        Number of random features in the model.
    n_iter_ : int
        Full passes over the data (subspace solver) or update steps taken (steps).
    convergence_ : list of dict
        Subspace solver: per sampled stage and per full pass, the passes done (``pass``),
        the rows used (``rows``), how far the top-``k`` subspace moved (``change``), the
        estimated error (``estimated_error``: for a stage, of the next block on all rows;
        for a pass, of the model after it) and the eigenvalues; a pass also gives the
        residual estimate of its Ritz vectors (``residual_error``) and the estimated
        contraction of a step (``contraction``).
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
    A pass with ``M`` features, ``p = k + n_oversamples`` directions and ``n`` rows costs
    ``2 n d M`` flops for the kernel sections (or Fourier features) plus ``4 n M p``, and
    ``2 M^2 p`` for the joint whitening's two triangular solves; memory ``O(M p)`` plus one
    chunk, and the joint whitening's ``M x M`` factor (computed once per fit, ``M^3 / 3``
    flops). A pass gives ``Y = Cov(z) V`` for the block ``V``; the model
    after it is the top-``k`` eigenvectors of ``Y (V^T Y)^+ Y^T``, the Nyström
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
    the subsets biased: the stages help less, the passes still decide.

    One step with mini-batch ``X`` and block ``t``: ``h = H(X)``, ``C = h^T h / B``,
    old coefficients ``A_j <- A_j (I - eta C)`` (``I - eta UT[C]`` when ordered),
    ``A_t <- A_t + eta z_t(X)^T h / B``. Cost ``2 B d M`` flops for the features plus
    ``2 B M k``; memory ``O(M k)`` plus cached blocks.

    References
    ----------
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015. C. Williams, M. Seeger, "Using the Nyström method
    to speed up kernel machines", NIPS 2001. Y. Saad, *Numerical Methods for Large
    Eigenvalue Problems*, SIAM 2011, ch. 5 (subspace iteration).

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> kpca = KernelPCA(n_components=2, n_features=512, max_iter=50, random_state=0)
    >>> kpca.fit_transform(X).shape
    (500, 2)
    """

    def __init__(self, n_components=5, *, kernel="gaussian", bandwidth="median", kernel_params=None,
                 features="nystroem", whitening="auto", solver="subspace", n_features="auto",
                 block_size="auto", n_oversamples="auto", tol=1e-4, batch_size=256, max_iter="auto", shuffle_chunks=1,
                 n_partitions=1, eta0=0.5, eta_decay=0.01, init="rca", center=True, ordered=False,
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
    def fit(self, X, y=None, *, callback=None):
        """Fit the components by doubly stochastic gradient steps over ``X``.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one), xarray DataArray or Dataset
            Training data of shape (n_samples, n_features); lazy inputs are streamed chunk
            by chunk. A Dataset must hold a single 2-D data variable.
        y : None
            Ignored.
        callback : callable, optional
            ``callback(n_steps, model)`` after every chunk of steps, with ``model`` a
            :class:`KernelExpansion` of the current, raw functions (neither centred nor
            rotated): for monitoring convergence.

        Returns
        -------
        self : KernelPCA
        """
        view = self._validate_input(X, reset=True)
        ckpt, found = self._checkpointer((view.n_samples, view.n_features))
        seed = None
        if found is not None:
            seed, resumed = found
        with one_blas_thread():  # the same products, so the same model, on any machine and scheduler
            self._initialise(view, seed=seed)
            if ckpt is not None:
                ckpt.seed = self.seed_
                if seed is not None:
                    self.state_ = resumed
            self.convergence_ = []
            if self._params["solver"] == "subspace":
                self._fit_passes(view, callback=callback, checkpointer=ckpt)
                self._finalise_passes(self._sample)
            else:
                self._run_steps(view, self._params["max_iter"], epoch_offset=0, callback=callback, checkpointer=ckpt)
                self._finalise(self._sample)
        del self._sample
        del self._basis
        self._whitening = None
        return self

    def partial_fit(self, X, y=None):
        """Fit on ``X`` as one more batch of a stream.

        With the subspace solver the first call fits ``X`` by full passes (as :meth:`fit`);
        every later call, and every call with ``solver="oja"``, takes one pass of update
        steps over ``X`` (the first call with steps also initialises). The centring
        offset, the ordering of the components and ``eigenvalues_`` are recomputed on a
        sample of ``X`` after each call of steps.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
        y : None
            Ignored.

        Returns
        -------
        self : KernelPCA
        """
        first = not hasattr(self, "state_")
        if not first and self._params.get("whitening") == "joint":
            raise ValueError('a model with whitening="joint" is fitted by full passes only: partial_fit cannot '
                             'take steps on it; fit with whitening="block" to stream batches after the first')
        view = self._validate_input(X, reset=first)
        with one_blas_thread():
            if first:
                self._initialise(view, stream=True)
                self.convergence_ = []
                sample = self._sample
                del self._sample
                if self._params["solver"] == "subspace":
                    # the first call fits by full passes over X; later calls take steps
                    self._fit_passes(view)
                    self._finalise_passes(sample)
                    del self._basis
                    self._whitening = None
                    return self
                del self._basis
            else:
                sample = sample_rows(view, N_SAMPLE, self.seed_, key=self.n_passes_ + 1)
            n_steps = max(1, -(-view.n_samples // self._params["batch_size"]))
            self._run_steps(view, n_steps, epoch_offset=self.n_passes_)
            self._finalise(sample)
        return self

    def _check_params(self, n_samples: int, stream: bool = False) -> dict:
        k = check_int(self.n_components, "n_components")
        kind = check_choice(self.features, "features", ("nystroem", "fourier"))
        solver = check_choice(self.solver, "solver", ("subspace", "oja"))
        block = check_int(self.block_size, "block_size", allow=("auto",))
        budget = check_int(self.n_features, "n_features", allow=("auto",))
        if budget == "auto":
            budget = (max(SUBSPACE_MIN_FEATURES, SUBSPACE_FEATURES_PER_COMPONENT * k) if solver == "subspace"
                      else min(4096, max(1024, 2 * n_samples)))
        if block == "auto":
            if kind == "fourier":
                block = FOURIER_BLOCK
            elif solver == "oja":
                block = NYSTROEM_STEP_BLOCK
            else:  # the budget in as few blocks of at most NYSTROEM_MAX_BLOCK as it takes, evenly
                block = -(-min(budget, n_samples) // -(-min(budget, n_samples) // NYSTROEM_MAX_BLOCK))
        if kind == "nystroem":
            # landmarks are distinct rows of the data
            block = min(block, n_samples)
            n_blocks = max(1, min(-(-budget // block), n_samples // block))
        else:
            n_blocks = -(-budget // block)
        whitening = check_choice(self.whitening, "whitening", ("auto", "joint", "block"))
        if whitening == "joint" and (kind != "nystroem" or solver != "subspace"):
            raise ValueError(f'whitening="joint" needs features="nystroem" and solver="subspace", '
                             f"got features={kind!r}, solver={solver!r}")
        if whitening == "auto":
            # partial_fit takes steps after its first call: they need whitened blocks
            joint = not stream and kind == "nystroem" and solver == "subspace" and n_blocks > 1 \
                and n_blocks * block <= JOINT_MAX_FEATURES
            whitening = "joint" if joint else "block"
        if k > n_blocks * block:
            raise ValueError(f"n_components={k} must be <= n_features={n_blocks * block}"
                             + (f" (Nyström features: at most the {n_samples} rows)" if kind == "nystroem" else ""))
        if solver == "oja" and k > block:
            raise ValueError(f"n_components={k} must be <= block_size={block} (the initial block)")
        oversamples = check_int(self.n_oversamples, "n_oversamples", 0, allow=("auto",))
        if oversamples == "auto":
            oversamples = k + 10
        tol = check_float(self.tol, "tol", strict=False)
        max_iter = check_int(self.max_iter, "max_iter", allow=("auto",))
        batch = check_int(self.batch_size, "batch_size")
        if max_iter == "auto":
            if solver == "subspace":
                max_iter = SUBSPACE_MAX_PASSES
            else:
                epochs3 = 3 * -(-n_samples // batch)
                max_iter = max(250, min(epochs3, 3000))
        return {
            "n_components": k,
            "features": kind,
            "solver": solver,
            "block_size": block,
            "n_blocks": n_blocks,
            "whitening": whitening,
            "n_oversamples": oversamples,
            "tol": tol,
            "batch_size": batch,
            "max_iter": max_iter,
            "shuffle_chunks": check_int(self.shuffle_chunks, "shuffle_chunks"),
            "n_partitions": check_int(self.n_partitions, "n_partitions"),
            "eta0": check_float(self.eta0, "eta0"),
            "eta_decay": check_float(self.eta_decay, "eta_decay", strict=False),
            "init": check_choice(self.init, "init", ("rca", "random")),
            "center": bool(check_choice(self.center, "center", (True, False))),
            "ordered": bool(check_choice(self.ordered, "ordered", (True, False))),
        }

    def _initialise(self, view, seed: int | None = None, stream: bool = False) -> None:
        """Seed, sample, bandwidth, features and the initial solve (``stream``: for :meth:`partial_fit`)."""
        p = self._params = self._check_params(view.n_samples, stream)
        self.seed_ = self._seed(self.random_state) if seed is None else seed
        sample = sample_rows(view, N_SAMPLE, self.seed_)
        spec = self._kernel_spec(sample)
        if p["features"] == "nystroem":
            dtype = check_choice(self.compute_dtype, "compute_dtype", ("float32", "float64"))
            rows = landmark_rows(view, p["n_blocks"] * p["block_size"], self.seed_, shuffle=True)
            center = sample.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None
            joint = p["whitening"] == "joint"
            features = NystroemFeatures(spec, rows, p["block_size"], self.seed_, dtype, center=center,
                                        whiten=not joint)
        else:
            joint = False
            features = self._make_features(spec, sample, self.seed_, p["block_size"])
        # the joint whitening's factor (M x M) stays with the fit, never with the model
        self._whitening = JointWhitening(features) if joint else None
        # blocks whitened each on its own sum n_blocks approximations of the kernel
        self._copies = 1 if joint else p["n_blocks"]
        k = p["n_components"]
        if p["solver"] == "subspace":
            basis, vals = self._warm_start(features, sample)
            # Ritz values of the concatenated blocks are n_blocks times the operator's
            lam = float(vals[0]) / self._copies
        else:
            z0 = features.transform(sample[:N_INIT], 0, 1).astype(np.float64)
            if p["center"]:
                z0 -= z0.mean(axis=0)
            vals, vecs = small_eigh(z0.T @ z0 / z0.shape[0])
            vals, vecs = vals[::-1], vecs[:, ::-1]
            lam = float(vals[0])
            basis = None
        if not np.isfinite(lam) or lam <= 0:
            raise ValueError("the data sample has no variance under this kernel; check the bandwidth")
        if p["solver"] == "subspace":
            coef = basis[:, :k] / np.sqrt(self._copies)
        elif p["init"] == "rca":
            coef = vecs[:, :k].copy()
        else:
            rng = np.random.default_rng(self.seed_)
            coef = rng.standard_normal((features.block_size, k)) * 1e-3
        self.state_ = StepState(coef, 0, p["eta0"] / lam)
        self._basis = basis
        self._config = StepConfig(n_blocks=p["n_blocks"], batch_size=p["batch_size"], eta_decay=p["eta_decay"])
        self._rule = pca_rule(p["ordered"], p["center"], GUARD_FACTOR * lam)
        self._features = features
        self._sample = sample
        self.bandwidth_ = spec.bandwidth
        self.kernel_ = spec
        self.n_passes_ = 0

    # -- the subspace solver -----------------------------------------------------------------
    def _warm_start(self, features, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An orthonormal block of ``p`` directions from subspace iterations on the sample.

        The features of (part of) the sample are held in memory, so each iteration is two
        small products; the block is the starting point of the full-data passes. Also sets
        the raw-feature shift the passes subtract. Returns the block (in the space of the
        concatenated features) and its Ritz values (per block, as the passes report them).
        """
        p = self._params
        J, m = p["n_blocks"], features.block_size
        M = J * m
        rows = int(min(sample.shape[0], max(N_INIT, WARM_FLOATS // M)))
        width = min(p["n_components"] + p["n_oversamples"], M)
        self._warm_rows = rows
        raw = features.raw_transform(sample[:rows], 0, J)
        self._shift = raw.mean(axis=0, dtype=np.float64)
        if self._whitening is not None:
            Z = self._whitening.whiten(raw).astype(features.dtype)
            del raw
        else:
            del raw
            Z = features.transform(sample[:rows], 0, J)
        if p["center"]:
            Z -= Z.mean(axis=0, dtype=np.float64).astype(Z.dtype)
        rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(self.seed_, spawn_key=(WARM_TAG,))))
        V = orthonormal(rng.standard_normal((M, width)))
        if p["init"] == "random":
            # the random block itself (rotated to its Ritz vectors): the passes start from scratch
            CV = (Z.T @ (Z @ V.astype(Z.dtype))).astype(np.float64) / rows
            R, lam, _ = ritz_step(V, CV)
            return R, lam
        k = p["n_components"]
        prev = None
        for _ in range(WARM_ITERATIONS):
            CV = (Z.T @ (Z @ V.astype(Z.dtype))).astype(np.float64) / rows
            R, lam, V = ritz_step(V, CV)
            if prev is not None and estimated_error(subspace_sin2(prev, R[:, :k]),
                                                    contraction(lam, k)) <= WARM_TOL:
                break
            prev = R[:, :k]
        return R, lam

    def _fit_passes(self, view, callback=None, checkpointer=None) -> None:
        """Sampled stages, then full-data passes of block subspace iteration, until converged.

        A stage is one subspace iteration on the rows of a seeded subset of row chunks,
        ``STAGE_GROWTH`` times as many rows as the stage before (the warm start's sample
        first), taken while it holds at most ``STAGE_MAX_FRACTION`` of the rows: the
        stages together cost at most a third of a pass and remove the sample's noise
        from the block before the passes. They stop early once the next pass is
        predicted to end the fit.

        After each full pass the model is the top of the Nyström approximation of the
        covariance from the block (in the span of ``Cov(z) V``, a power step past the
        Ritz vectors of ``V``). Its estimated error is the residual estimate of the Ritz
        vectors times the estimated contraction of one step; the fit stops when that is
        at most ``tol``.
        """
        p = self._params
        J, k, tol = p["n_blocks"], p["n_components"], p["tol"]
        features, whitening, copies = self._features, self._whitening, self._copies
        V = self._basis
        prev = V[:, :k]
        sizes = np.asarray(row_chunks(view))
        n = int(sizes.sum())
        rows_before = self._warm_rows
        staging = True
        done, step, passes = False, 0, 0
        lam = mean = None
        if checkpointer is not None and checkpointer.extra:
            ex = checkpointer.extra
            if "stage" not in ex:
                raise ValueError(f"the checkpoint at {checkpointer.path} was written by an earlier version of "
                                 "the subspace solver; remove it to fit from the start")
            width = V.shape[1]
            V, prev = self.state_.coef[0][:, :width].copy(), self.state_.coef[0][:, width:].copy()
            lam, mean, done = ex["lam"], ex["mean"], bool(ex["done"][0])
            staging, rows_before, passes = bool(ex["stage"][0]), int(ex["stage"][1]), int(ex["stage"][2])
            self._shift = ex["shift"]
            step = self.state_.step
            if passes == 0:
                lam = mean = None
        token = model_fingerprint(KernelExpansion(features, np.zeros((J * features.block_size, 1))))
        # on a cluster the feature set (landmarks: M d numbers) goes to the workers once per fit
        client = active_client() if view.is_dask else None
        ref = client.scatter(features, broadcast=True, hash=False) if client is not None else None
        bar = pass_bar(p["max_iter"]) if self.verbose else nullcontext()
        with bar as progress:
            while not done and passes < p["max_iter"]:
                chunks = None
                if staging and STAGE_GROWTH * rows_before <= STAGE_MAX_FRACTION * n:
                    chunks = chunk_subset(sizes, STAGE_GROWTH * rows_before, self.seed_, key=step)
                stage = staging = chunks is not None
                sums = full_pass(view, features, J, V, self._shift, p["center"], token=token, features_ref=ref,
                                 chunks=chunks, whitening=whitening)
                R, lam_v, V_next = ritz_step(V, sums.cov_times)
                err_ritz = residual_sin2(V, sums.cov_times, R, lam_v, k)
                rho = contraction(lam_v, k)
                step += 1
                if stage:
                    # Error of the next block on all rows: the contracted error of this one plus
                    # the noise of this stage's rows (the residual measured here charged to the
                    # noise of the previous, smaller sample, falling as 1 / rows).
                    rows = int(sizes[chunks].sum())
                    ahead = err_ritz * (rho + rows_before / rows)
                    rows_before = rows
                    staging = rho * ahead > tol
                    entry = {"pass": passes, "rows": rows, "change": subspace_sin2(prev, R[:, :k]),
                             "estimated_error": ahead, "eigenvalues": (lam_v[:k] / copies).tolist()}
                    prev = R[:, :k]
                else:
                    passes += 1
                    ext = nystroem_extension(V, sums.cov_times, k)
                    U, lam, err = (ext[0], ext[1], err_ritz * rho) if ext is not None else (R[:, :k], lam_v[:k],
                                                                                            err_ritz)
                    mean = sums.mean
                    done = err <= tol
                    entry = {"pass": passes, "rows": n, "change": subspace_sin2(prev, U), "estimated_error": err,
                             "residual_error": err_ritz, "contraction": rho, "eigenvalues": (lam / copies).tolist()}
                    prev = U
                self.convergence_.append(entry)
                V = V_next
                if progress is not None:
                    progress(passes, entry["change"], entry["estimated_error"],
                             rows=entry["rows"] if stage else None)
                if checkpointer is not None:
                    checkpointer.save(StepState(np.hstack([V, prev]), step, 0.0),
                                      {"lam": lam if lam is not None else lam_v[:k], "mean": mean if mean is not None
                                       else sums.mean, "done": np.array([done]),
                                       "stage": np.array([staging, rows_before, passes]), "shift": self._shift})
                if callback is not None and not stage:
                    callback(passes, KernelExpansion(features, self._sections_coef(prev)))
        del ref
        if mean is None:  # max_iter passes already taken: nothing to refine
            raise ValueError("max_iter must allow at least one pass over the data")
        self.n_iter_ = passes
        self.n_passes_ = passes
        coef = prev / np.sqrt(copies)
        self.state_ = StepState(coef, 0, self.state_.eta_scale)
        self._pass_result = (np.asarray(lam[:k]) / copies, mean)

    def _sections_coef(self, coef: np.ndarray) -> np.ndarray:
        """Coefficients of the fit's (whitened) features as coefficients of the model's features."""
        coef = coef / np.sqrt(self._copies)
        return coef if self._whitening is None else self._whitening.fold(coef)

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
        raw = KernelExpansion(self._features, self.state_.coef[0])
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
        coef = self.state_.coef[0] @ rot
        self.model_ = KernelExpansion(self._features, coef, mean @ rot)
        self.model_.token = model_fingerprint(self.model_)
        self.eigenvalues_ = np.einsum("ij,jk,ki->i", rot.T, cov, rot)
        self.n_features_ = coef.shape[0]
        self._n_features_out = coef.shape[1]

    # -- transforming ------------------------------------------------------------------
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
                "n_passes_": self.n_passes_, **self._input_payload(),
                "step": self.state_.step, "eta_scale": self.state_.eta_scale,
                "config": asdict(self._config), "guard_limit": self._rule.guard_limit,
                "resolved_params": self._params,
            },
        }
        arrays = {"coef": self.model_.coef, "offset": self.model_.offset, "eigenvalues": self.eigenvalues_,
                  "state_coef": self.state_.coef[0], **farrays}
        return attrs, arrays

    @classmethod
    def _from_payload(cls, attrs: dict, arrays: dict) -> KernelPCA:
        est = cls(**attrs["params"])
        fitted = attrs["fitted"]
        features = features_from_payload(attrs["features"], arrays, cache_bytes=est.cache_bytes)
        est._features = features
        est._params = p = fitted["resolved_params"]
        est._config = StepConfig(**fitted["config"])
        est._rule = pca_rule(p["ordered"], p["center"], fitted["guard_limit"])
        est.state_ = StepState(arrays["state_coef"], fitted["step"], fitted["eta_scale"])
        est.model_ = KernelExpansion(features, arrays["coef"], arrays["offset"])
        est.model_.token = model_fingerprint(est.model_)
        est.eigenvalues_ = arrays["eigenvalues"]
        est.kernel_ = features.kernel
        for name in ("seed_", "bandwidth_", "n_iter_", "n_passes_"):
            setattr(est, name, fitted[name])
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
        state.pop("_basis", None)
        state.pop("_whitening", None)
        return state

