"""KernelSVD and KernelCCA: two-view component analysis by doubly stochastic steps."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._validation import check_choice, check_float, check_int
from dsgd_dask.engine.distributed import active_client
from dsgd_dask.engine.passes import cross_pass
from dsgd_dask.engine.ridge import LandmarkPreconditioner, precision_ridge
from dsgd_dask.engine.steps import StepState
from dsgd_dask.estimators._steps import model_fingerprint, register
from dsgd_dask.estimators.components import N_INIT, ComponentStepEstimator
from dsgd_dask.metrics import paired_correlations
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.progress import pass_bar
from dsgd_dask.rules.solutions import cca_ritz, cross_svd, ridge_cca
from dsgd_dask.rules.subspace import orthonormal
from dsgd_dask.rules.two_view import KCCARule, KSVDRule

#: Directions carried beyond ``n_components`` by the passes of kernel CCA.
CCA_OVERSAMPLES = 10
#: Default largest number of full-data passes of kernel CCA.
CCA_MAX_PASSES = 30
#: Floats of raw features of the sample rows that set the passes' shift.
SHIFT_FLOATS = 1 << 24

_SHARED_PARAMS = """\
    n_components : int, default=2
        Number of pairs of functions ``k``.
    kernel_x, kernel_y : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family of each view.
    bandwidth_x, bandwidth_y : "median" or float, default="median"
        Length scale of each view's kernel; ``"median"``: the median trick on a seeded
        sample of that view.
    kernel_params_x, kernel_params_y : dict, optional
        Shape parameters of each view's kernel (``{"nu": ...}`` for matern,
        ``{"order": ...}`` for arccos).
    features : {"nystroem", "fourier"}, default="nystroem"
        Feature blocks of each view: kernel sections at seeded landmark rows (the same
        rows of both views), whitened per block, or random Fourier blocks regenerated
        from their seeds (the papers' blocks). Each view has its own seeds.
    n_features : int or "auto", default="auto"
        Feature budget ``M`` per view (whole blocks; Nyström: at most the rows).
        ``"auto"``: ``min(4096, max(1024, 2 n))``. Features grow by one block per step
        until the budget is reached; later steps revisit the blocks in turn.
    block_size : int or "auto", default="auto"
        Features per block: 1024 for Nyström blocks, 256 for Fourier blocks; at least
        ``n_components``.
    batch_size : int, default=256
        Rows per step.
    max_iter : int or "auto", default="auto"
        Number of steps; ``"auto"``: ten passes over the data, between 500 and 5000 steps.
    shuffle_chunks : int, default=1
        For chunked inputs, how many chunks (in a seeded random order per epoch) have
        their rows shuffled together.
    n_partitions : int, default=1
        Data-parallel steps: every mini-batch split over this many slabs of the data,
        each part's sums computed where its rows live, reduced before one update.
    eta0 : float, default=0.5
        ``theta_0`` of the step size ``eta_t = theta_0 / (lambda_1 (1 + theta_1 t))``,
        relative to the largest eigenvalue ``lambda_1`` of the first block's covariance
        (either view) on a sample, so that the default works on any data scale.
    eta_decay : float, default=0.01
        ``theta_1`` of the step size.
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the features; coefficients and statistics accumulate in float64.
    cache_bytes : int, optional
        Memory budget for cached Fourier blocks (``None``: a quarter of the free memory,
        at most 4 GiB; 0 regenerates every block at every use).
    checkpoint : str or Path, optional
        Zarr group where :meth:`fit` saves its state every ``checkpoint_every`` steps,
        atomically; an existing checkpoint of the same fit is resumed (same final model),
        one of another fit refused.
    checkpoint_every : int, default=100
        Steps between checkpoints.
    verbose : bool, default=False
        Show a progress bar of the steps.
    random_state : int, RandomState instance or None, default=None
        Root seed of the feature blocks, the landmarks and the mini-batch shuffles."""


class _TwoViewEstimator(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ComponentStepEstimator):
    _views = ("X", "Y")

    def fit(self, X, Y, *, callback=None):
        """Fit the pairs of functions by doubly stochastic steps over the rows of ``(X, Y)``.

        Parameters
        ----------
        X : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d_x)
        Y : array-like, dask array, Zarr array (or path to one) or xarray DataArray of shape (n_samples, d_y)
            Row-aligned with ``X`` (same number of rows; dask inputs are rechunked lazily
            to the same row chunks).
        callback : callable, optional
            ``callback(n_steps, (model_x, model_y))`` with the raw expansions of the current
            functions, after every chunk of steps (fetches the state from a cluster).

        Returns
        -------
        self
        """
        return self._fit(X, Y, callback=callback)

    def partial_fit(self, X, Y):
        """One pass of steps over ``(X, Y)`` as the next batch of a stream (the first call initialises).

        Parameters
        ----------
        X, Y : row-aligned inputs as for :meth:`fit`

        Returns
        -------
        self
        """
        return self._partial_fit(X, Y)

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

    def score(self, X, Y):
        """Sum over the components of the correlation of ``f_i(X)`` with ``g_i(Y)`` (computed).

        The papers' measure (top-``k`` correlation sum on held-out rows).
        """
        U, V = self.transform(X, Y)
        return float(paired_correlations(np.asarray(U), np.asarray(V)).sum())


@register
class KernelSVD(_TwoViewEstimator):
    __doc__ = f"""Kernel SVD by doubly stochastic gradients: the top singular functions of the cross-covariance.

    Finds functions ``f_i`` of ``x`` and ``g_i`` of ``y`` that maximise ``Cov(f_i(x), g_i(y))``
    with ``||f_i||_H = ||g_i||_H = 1``, orthogonal in each RKHS: the top singular
    functions of the (centred) cross-covariance operator ``Cxy`` (Xie, Liang & Song 2015,
    Alg. 3). Each step on a mini-batch adds a feature block to both sets of functions and
    applies Oja's rule to ``[0 Cxy; Cyx 0]``; the model keeps only what defines the
    blocks and their coefficients.

    Parameters
    ----------
{_SHARED_PARAMS}

    Attributes
    ----------
    singular_values_ : ndarray of shape (n_components,)
        ``Cov(f_i(x), g_i(y))`` on the fit sample, decreasing.
    models_ : tuple of KernelExpansion
        The fitted ``f`` (on ``x``'s features) and ``g`` (on ``y``'s).
    bandwidth_ : tuple of float
        The bandwidths of the two views.
    n_features_ : int
        Features per view in the model.
    n_iter_ : int
        Steps taken.
    seed_ : int
        Root seed of the fit.
    n_features_in_, n_features_in_y_ : int
        Columns of ``X`` and of ``Y``.

    Notes
    -----
    With ``u = F(x)``, ``v = G(y)`` on a batch, ``W = Cov(u, v) + Cov(v, u)``; every block
    ``A_j <- A_j (I - eta W)`` and the step's block gains ``eta Cov(z(x), v)`` (for ``F``;
    symmetrically for ``G``). At the end the pairs are rotated to the singular vectors of
    the ``k x k`` problem on a seeded sample of 10,000 rows from every chunk, with the
    functions' norms taken in the blocks' feature space.

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
    >>> U.shape, V.shape
    ((600, 2), (600, 2))
    """

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, features="nystroem",
                 n_features="auto", block_size="auto", batch_size=256, max_iter="auto", shuffle_chunks=1,
                 n_partitions=1, eta0=0.5, eta_decay=0.01, compute_dtype="float32", cache_bytes=None,
                 checkpoint=None, checkpoint_every=100, verbose=False, random_state=None):
        self.n_components = n_components
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.bandwidth_x = bandwidth_x
        self.bandwidth_y = bandwidth_y
        self.kernel_params_x = kernel_params_x
        self.kernel_params_y = kernel_params_y
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

    def _check_params(self, n_samples: int) -> dict:
        return self._check_common(n_samples)

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

    def _values_payload(self) -> dict:
        return {"singular_values": self.singular_values_}

    def _restore_values(self, arrays: dict) -> None:
        self.singular_values_ = arrays["singular_values"]


@register
class KernelCCA(_TwoViewEstimator):
    __doc__ = f"""Kernel CCA by doubly stochastic gradients, with a ridge.

    Finds functions ``f_i`` of ``x`` and ``g_i`` of ``y`` solving the regularised kernel
    CCA problem ``Cxy g = rho (Cxx + reg) f``, ``Cyx f = rho (Cyy + reg) g`` with the
    (centred) covariance operators of each view (Xie, Liang & Song 2015, Alg. 4): the
    pairs of maximal ``Cov(f, g) / sqrt((Var f + reg ||f||^2) (Var g + reg ||g||^2))``.

    Parameters
    ----------
{_SHARED_PARAMS}
    reg : float, default=1e-3
        Ridge ``gamma > 0`` in units of the kernel (``k(x, x) = 1`` for the Gaussian
        kernel). Without it kernel CCA is ill-posed: any two views of distinct rows
        reach correlation 1.
    solver : {"auto", "passes", "steps"}, default="auto"
        ``"passes"``: full-data passes of a preconditioned block eigensolver on the
        Nyström blocks, with ``reg`` on the RKHS norm of the functions (see Notes);
        ``"steps"``: the doubly stochastic steps, with ``reg`` on the coefficients.
        ``"auto"``: passes for Nyström blocks, steps for Fourier blocks.
    tol : float, default=1e-3
        Passes: stop after the first pass that changes no canonical correlation by
        more than ``tol``.

    Attributes
    ----------
    correlations_ : ndarray of shape (n_components,)
        The regularised canonical correlations ``rho_i`` on the fit sample, decreasing.
    models_ : tuple of KernelExpansion
        The fitted ``f`` and ``g``.
    bandwidth_ : tuple of float
        The bandwidths of the two views.
    n_features_ : int
        Features per view in the model.
    n_iter_ : int
        Steps taken.
    seed_ : int
        Root seed of the fit.
    n_features_in_, n_features_in_y_ : int
        Columns of ``X`` and of ``Y``.

    Notes
    -----
    **Passes.** The functions are ``f = z_x a`` and ``g = z_y b`` on all ``M`` Nyström
    features of each view (``J`` blocks whitened each on its own, ``W`` the block-diagonal
    whitening), and the penalty is ``reg ||f||_H^2 = reg a^T W^T K_LL W a``: the problem is
    kernel CCA on the span of the ``M`` landmarks' kernel sections, the one
    :class:`~dsgd_dask.baselines.NystroemCCA` with ``M`` landmarks solves, without an
    ``M x M`` covariance. Each pass over the rows gives ``Cxx A``, ``Cxy B``, ``Cyy B`` and
    ``Cyx A`` for bases ``A``, ``B`` of ``q`` directions each (a tree reduction over row
    chunks, every worker at once), then a Rayleigh–Ritz step: the CCA problem restricted to
    the bases. The next bases hold the Ritz vectors, the residuals preconditioned by
    ``(W^T K_LL^2 W / M + reg W^T K_LL W + ridge W^T W)^{-1}`` (the features' second moment on their
    own landmark rows: one Cholesky factor per view, ``M^2`` float64, and the Gram matrix
    ``W^T K_LL W`` in float32, no data pass) and the previous Ritz vectors: a block
    LOBPCG (Knyazev 2001) on the generalized eigenproblem of CCA. A precision ridge
    ``100 eps^2 E|r|^2 |c|^2`` on the coefficients ``c = W a`` of the kernel sections ``r``
    (``eps`` of ``compute_dtype``) is added to each view's penalty: a function whose
    variance is below the round-off of ``r c`` is not resolved by the features (about
    ``1e-10`` here against ``reg``). ``max_iter`` counts passes (``"auto"``: 30).
    :meth:`partial_fit` always takes steps.

    **Steps.** With ``u = F(x)``, ``v = G(y)`` on a batch and ``W = Cov(u, v) + Cov(v, u)``, every
    block ``A_j <- A_j (I - eta reg W)`` and the step's block gains
    ``eta (Cov(z(x), v) - Cov(z(x), u) W)`` (for ``F``; symmetrically for ``G``). At the
    end the pairs are rotated to the canonical pairs of the ``k x k`` problem on a seeded
    sample of 10,000 rows from every chunk, and scaled so that
    ``Var f_i + reg ||f_i||^2 = 1``. ``transform`` gives the canonical variates;
    :meth:`score` the sum of their correlations on held-out rows.

    References
    ----------
    B. Xie, Y. Liang, L. Song, "Scale up nonlinear component analysis with doubly
    stochastic gradients", NIPS 2015. K. Fukumizu, F. Bach, A. Gretton, "Statistical
    consistency of kernel canonical correlation analysis", JMLR 2007.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelCCA
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(-2, 2, size=600)
    >>> X = np.c_[np.cos(t), np.sin(t)] + 0.05 * rng.normal(size=(600, 2))
    >>> Y = np.c_[t ** 2, rng.normal(size=600)]
    >>> cca = KernelCCA(n_components=1, n_features=512, max_iter=300, random_state=0).fit(X, Y)
    >>> bool(cca.correlations_[0] > 0.5)
    True
    """

    def __init__(self, n_components=2, *, kernel_x="gaussian", kernel_y="gaussian", bandwidth_x="median",
                 bandwidth_y="median", kernel_params_x=None, kernel_params_y=None, reg=1e-3, solver="auto",
                 tol=1e-3, features="nystroem", n_features="auto", block_size="auto", batch_size=256,
                 max_iter="auto", shuffle_chunks=1, n_partitions=1, eta0=0.5, eta_decay=0.01,
                 compute_dtype="float32", cache_bytes=None,
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
        self.compute_dtype = compute_dtype
        self.cache_bytes = cache_bytes
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.verbose = verbose
        self.random_state = random_state

    def _check_params(self, n_samples: int) -> dict:
        p = self._check_common(n_samples)
        p["reg"] = check_float(self.reg, "reg")
        solver = check_choice(self.solver, "solver", ("auto", "passes", "steps"))
        if solver == "auto":
            solver = "passes" if p["features"] == "nystroem" else "steps"
        if solver == "passes" and p["features"] != "nystroem":
            raise ValueError("solver='passes' needs features='nystroem' (its penalty is the RKHS norm of "
                             "the landmarks' kernel sections)")
        p["solver"] = solver
        p["tol"] = check_float(self.tol, "tol")
        if solver == "passes":
            p["max_iter"] = (CCA_MAX_PASSES if self.max_iter == "auto" else check_int(self.max_iter, "max_iter"))
        return p

    # -- the passes solver --------------------------------------------------------------------
    def _solve(self, view, callback, checkpointer) -> None:
        if self._params["solver"] == "steps":
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

    def _fit_passes(self, view, callback=None, checkpointer=None) -> None:
        """Block LOBPCG passes for the canonical pairs, until no correlation moves by more than ``tol``."""
        p = self._params
        J, k, tol = p["n_blocks"], p["n_components"], p["tol"]
        features = self._features
        cols = self._columns()
        shifts, precond, Ax, By, width = self._pass_setup()
        passes, done, prev_rho, prev = 0, False, None, None
        result = None
        if checkpointer is not None and checkpointer.extra:
            ex = checkpointer.extra
            if "passes" not in ex:
                raise ValueError(f"the checkpoint at {checkpointer.path} was not written by the passes solver; "
                                 "remove it to fit from the start")
            Ax, By = (np.asarray(c) for c in self.state_.coef)
            passes, done = int(ex["passes"][0]), bool(ex["passes"][1])
            prev_rho = ex["rho"] if passes else None
            if passes:
                result = (ex["rho"], ex["a"], ex["b"], ex["mean_x"], ex["mean_y"])
                prev = (ex["a"], ex["b"])
        self.convergence_ = []
        token = "-".join(model_fingerprint(KernelExpansion(f, np.zeros((Ax.shape[0], 1)))) for f in features)
        client = active_client() if view.is_dask else None
        refs = (tuple(client.scatter(f, broadcast=True, hash=False) for f in features)
                if client is not None else None)
        bar = pass_bar(p["max_iter"]) if self.verbose else nullcontext()
        with bar as progress:
            while not done and passes < p["max_iter"]:
                sums = cross_pass(view, features, J, Ax, By, shifts, cols, token=token, features_refs=refs)
                rho, a, b, res_a, res_b = cca_ritz(Ax, By, sums, precond[0].penalty(Ax),
                                                   precond[1].penalty(By), width)
                passes += 1
                change = float(np.abs(rho[:k] - prev_rho[:k]).max()) if prev_rho is not None else float("inf")
                done = change <= tol
                result = (rho, a[:, :k], b[:, :k], sums.mean_x, sums.mean_y)
                self.convergence_.append({"pass": passes, "rows": sums.n, "change": change,
                                          "correlations": rho[:k].tolist()})
                keep = [a, precond[0](res_a[:, :k])], [b, precond[1](res_b[:, :k])]
                if prev is not None:
                    keep[0].append(prev[0])
                    keep[1].append(prev[1])
                prev = (a[:, :k], b[:, :k])
                Ax, By = orthonormal(np.hstack(keep[0])), orthonormal(np.hstack(keep[1]))
                prev_rho = rho
                if progress is not None:
                    progress(passes, change, change)
                if checkpointer is not None:
                    checkpointer.save(StepState((Ax, By), passes, 0.0),
                                      {"passes": np.array([passes, done]), "rho": rho, "a": result[1],
                                       "b": result[2], "mean_x": result[3], "mean_y": result[4]})
                if callback is not None:
                    callback(passes, (KernelExpansion(features[0], result[1]),
                                      KernelExpansion(features[1], result[2])))
        del refs, precond
        if result is None:
            raise ValueError("max_iter must allow at least one pass over the data")
        rho, a, b, mean_x, mean_y = result
        self.n_iter_ = self.n_passes_ = passes
        self.state_ = StepState((a, b), 0, self.state_.eta_scale)
        self.correlations_ = np.asarray(rho[:k], dtype=np.float64)
        models = []
        for f, coef, mean in ((features[0], a, mean_x), (features[1], b, mean_y)):
            model = KernelExpansion(f, coef, mean @ coef)
            model.token = model_fingerprint(model)
            models.append(model)
        self.models_ = tuple(models)
        self.n_features_ = a.shape[0]
        self._n_features_out = k

    def _make_rule(self, columns, guard_limit: float):
        return KCCARule(columns, True, guard_limit, self._params["reg"])

    def _initial(self, z, sample, k):
        n = z[0].shape[0]
        reg = self._params["reg"]
        _, A, B = ridge_cca(z[0].T @ z[0] / n, z[1].T @ z[1] / n, z[0].T @ z[1] / n, reg, k)
        return A / np.sqrt(2), B / np.sqrt(2)

    def _final(self, h, norms, sample):
        u, v = h
        n = len(u)
        reg = self._params["reg"]
        rho, A, B = ridge_cca(u.T @ u / n + reg * norms[0], v.T @ v / n + reg * norms[1], u.T @ v / n, 0.0,
                              u.shape[1])
        self.correlations_ = rho
        return A, B

    def _values_payload(self) -> dict:
        return {"correlations": self.correlations_}

    def _restore_values(self, arrays: dict) -> None:
        self.correlations_ = arrays["correlations"]

