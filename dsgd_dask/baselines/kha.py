"""The Kernel Hebbian Algorithm family (KHA, KHA/t, KHA/et, KHA-SMD) on the dense centred kernel matrix."""

from __future__ import annotations

from numbers import Real
from typing import ClassVar, Literal

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.baselines._common import KHA_TAG
from dsgd_dask.baselines.exact import _DenseKernelEstimator
from dsgd_dask.estimators._atomic import atomic_fit
from dsgd_dask.estimators._constraints import COUNT, KERNEL, NON_NEGATIVE, POSITIVE, RANDOM_STATE

Gain = Literal["constant", "1/t", "et", "smd"]
GAINS: tuple[str, ...] = ("constant", "1/t", "et", "smd")


class KernelHebbianPCA(_DenseKernelEstimator):
    """Iterative kernel PCA by the Kernel Hebbian Algorithm, with the gains of Schraudolph et al.

    The generalised Hebbian algorithm run in the feature space of the kernel, one training
    point per update, on the dense centred ``n x n`` kernel matrix (small data only: at
    most ``MAX_SAMPLES = 20000`` rows). Component ``i`` is
    ``w_i = sum_j A_ij phi~(x_j)``; the rows of ``A`` converge to the leading eigenvectors
    of the centred kernel matrix, in order, normalised so that ``||w_i|| = 1``.

    Parameters
    ----------
    n_components : int, default=5
        Number of principal components ``r`` (at most ``n_samples``).
    kernel : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}, default="gaussian"
        Kernel family (``"rbf"`` is an alias of ``"gaussian"``).
    bandwidth : "median" or float, default="median"
        Length scale ``sigma``; ``"median"`` takes the median pairwise distance of a
        seeded sample of 1000 rows (L1 for laplacian, the median row norm for arccos).
    kernel_params : dict, optional
        ``{"nu": 0.5 | 1.5 | 2.5}`` for matern, ``{"order": 0 | 1 | 2}`` for arccos.
    center : bool, default=True
        Centre the kernel matrix (the algorithm assumes centred features).
    gain : {"constant", "1/t", "et", "smd"}, default="et"
        The gain schedule, with ``l = n_samples`` and ``t`` the update count from 0:

        * ``"constant"`` -- KHA: ``eta_t = eta0``;
        * ``"1/t"`` -- KHA/t: ``eta_t = eta0 l / (t + l)``;
        * ``"et"`` -- KHA/et: one gain per component,
          ``eta_t,i = eta0 (||lambda|| / lambda_i) l / (t + l)`` with ``lambda`` the
          eigenvalues of the current estimates, re-estimated once per pass;
        * ``"smd"`` -- KHA-SMD: the KHA/et gains times ``exp(rho_i)``, the log-gains
          ``rho`` adapted by stochastic meta-descent in the RKHS (``lambda`` re-estimated
          every update).
    eta0 : float, default=0.2
        The gain scale ``eta_0``, as in the paper (not normalised by the data: the
        kernels have ``k(x, x) = 1``, and 0.2 worked for every gain on USPS and MNIST
        digits at the median bandwidth, where 1-2 already diverged for KHA/et with 16
        components). Tune on the grid ``{1, 2, 5} x 10^b`` as the paper did.
    meta_gain : float, default=0.3
        SMD's meta-gain ``mu`` (``gain="smd"`` only; 0 gives KHA/et with every-update
        eigenvalue estimates). Too large a value can drive a log-gain towards minus
        infinity and freeze its component (see ``gains_``); the paper hand-tuned it.
    meta_decay : float, default=0.99
        SMD's decay factor ``xi`` in [0, 1] (``gain="smd"`` only; the paper's value).
    max_iter : int, default=20
        Passes through the training data (epochs), each a fresh seeded permutation.
    random_state : int, RandomState instance or None, default=None
        Seed of the bandwidth sample, of the initial coefficients and of the order in
        which the points are visited.

    Attributes
    ----------
    coef_ : ndarray of shape (n_components, n_samples)
        The expansion coefficients ``A`` over the centred training points.
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalue estimates ``||A_i K~|| / ||A_i|| / n`` (equation 13 of the paper,
        divided by ``n``): the variances of the components at convergence, i.e.
        scikit-learn ``KernelPCA.eigenvalues_ / n``.
    gains_ : ndarray of shape (n_components,)
        The gains of the last update (for ``"smd"``, including ``exp(rho)``).
    n_iter_ : int
        Passes through the data run.
    X_fit_ : ndarray of shape (n_samples, n_features_in_)
        The training data (float64).
    bandwidth_ : float
        The bandwidth used.
    kernel_ : KernelSpec
        The kernel with its bandwidth.
    seed_ : int
        Root seed of the fit.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of str
        Input column names, when fitted on a DataFrame.

    See Also
    --------
    KernelPCA : ``solver="exact"``: the direct solution of the same problem.
    excess_reconstruction_error : the quality measure of the paper.

    Notes
    -----
    With ``k_p`` the column of the centred kernel matrix ``K~`` for the point ``x_p``
    visited at update ``t``, ``y = A k_p`` and ``lt`` the lower triangle (diagonal
    included), the update is ``A <- A + diag(eta_t) (y e_p^T - lt(y y^T) A)``. KHA-SMD
    (Algorithm 1 of the paper) keeps ``A K~``, ``B = dA`` and the log-gains ``rho``:
    ``rho <- rho + mu diag(Gamma K~ B^T)``; ``B <- xi B + diag(e^rho eta)
    ((A + xi B) k_p e_p^T - lt(y y^T)(A + xi B) - xi lt(B k_p y^T + y k_p^T B^T) A)``;
    then ``A`` and ``A K~`` take the step with gains ``e^rho eta``. ``A`` starts from
    ``N(0, 1/(r l))``, ``B`` from 0 and ``rho`` from 0, so that the first SMD gains are
    the KHA/et ones; ``A K~`` is recomputed exactly at the start of every pass.
    An update costs ``O(r^2 l)``; a pass ``O(r^2 l^2)``, plus ``O(r l^2)`` per pass for
    the eigenvalue estimates.

    References
    ----------
    N. N. Schraudolph, S. Günter, S. V. N. Vishwanathan, "Fast iterative kernel PCA",
    NIPS 2006. K. I. Kim, M. O. Franz, B. Schölkopf, "Iterative kernel principal
    component analysis for image modeling", IEEE TPAMI 27(9), 2005.

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask import KernelHebbianPCA, KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> kha = KernelHebbianPCA(n_components=2, bandwidth=1.5, max_iter=30, random_state=0).fit(X)
    >>> exact = KernelPCA(n_components=2, solver="exact", bandwidth=1.5).fit(X)
    >>> bool(np.allclose(kha.eigenvalues_, exact.eigenvalues_, rtol=0.05))
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        "n_components": COUNT, **KERNEL, "center": ["boolean"], "gain": [StrOptions(set(GAINS))], "eta0": POSITIVE,
        "meta_gain": NON_NEGATIVE, "meta_decay": [Interval(Real, 0, 1, closed="both")], "max_iter": COUNT,
        **RANDOM_STATE}

    def __init__(self, n_components=5, *, kernel="gaussian", bandwidth="median", kernel_params=None, center=True,
                 gain="et", eta0=0.2, meta_gain=0.3, meta_decay=0.99, max_iter=20, random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.kernel_params = kernel_params
        self.center = center
        self.gain = gain
        self.eta0 = eta0
        self.meta_gain = meta_gain
        self.meta_decay = meta_decay
        self.max_iter = max_iter
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y=None, *, callback=None):
        """Run ``max_iter`` passes of KHA updates over the training points.

        Parameters
        ----------
        X : array-like, dask array, Zarr array or xarray DataArray of shape (n_samples, n_features)
            Training data, at most 20000 rows.
        y : None
            Ignored.
        callback : callable, optional
            ``callback(n_passes, coef)`` after every pass, with a copy of the current
            coefficients ``A`` (e.g. to trace :func:`excess_reconstruction_error`).

        Returns
        -------
        self : KernelHebbianPCA

        Raises
        ------
        ValueError
            If the (centred) kernel matrix is zero, or if the coefficients stop being
            finite (the gains are too large: lower ``eta0`` or, for SMD, ``meta_gain``).
        """
        _, r, centred, K = self._dense_setup(X)
        if not np.abs(K).max() > 0:
            raise ValueError("the kernel matrix is zero: the data have no variance under this kernel; "
                             "check the bandwidth")
        gain = self.gain
        eta0 = float(self.eta0)
        n = K.shape[0]
        rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(self.seed_, spawn_key=(KHA_TAG,))))
        A = rng.normal(scale=1.0 / np.sqrt(r * n), size=(r, n))
        smd = _SMDState(A) if gain == "smd" else None
        gains = np.full(r, eta0)
        t = 0
        for epoch in range(int(self.max_iter)):
            order = rng.permutation(n)
            # overflow is reported below as divergence, once per pass
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                if smd is not None:
                    gains = smd.run_pass(K, order, t, eta0, float(self.meta_gain), float(self.meta_decay))
                elif gain == "et":
                    lam = _eigenvalue_estimates(A, A @ K)
                    gains = _kha_pass(A, K, order, t, eta0 * np.linalg.norm(lam) / lam, decay=True)
                else:
                    gains = _kha_pass(A, K, order, t, np.full(r, eta0), decay=gain == "1/t")
            t += n
            if not (np.isfinite(A).all() and np.isfinite(gains).all()):
                raise ValueError(
                    f"KernelHebbianPCA diverged in pass {epoch + 1} (gain={gain!r}, eta0={eta0}): the "
                    "coefficients are no longer finite; lower eta0" + (" or meta_gain" if smd is not None else "")
                )
            if callback is not None:
                callback(epoch + 1, A.copy())
        self.coef_ = A
        self.eigenvalues_ = _eigenvalue_estimates(A, A @ K) / n
        self.gains_ = gains
        self.n_iter_ = int(self.max_iter)
        self._set_projection(centred, A.T)
        return self


def _eigenvalue_estimates(A: np.ndarray, AK: np.ndarray) -> np.ndarray:
    """Equation (13): ``||A_i K~|| / ||A_i||`` (eigenvalues of ``K~`` at an eigenvector)."""
    norms = np.linalg.norm(A, axis=1)
    return np.linalg.norm(AK, axis=1) / np.where(norms > 0, norms, 1.0)


def _kha_pass(A: np.ndarray, K: np.ndarray, order: np.ndarray, t0: int, scale: np.ndarray,
              decay: bool) -> np.ndarray:
    """One pass of ``A <- A + diag(eta_t) (y e_p^T - lt(y y^T) A)`` in place; the last gains."""
    n = K.shape[0]
    lower = np.tril(np.ones((A.shape[0], A.shape[0])))  # lt() as a mask: np.tril costs as much as an update
    eta = scale
    for i, p in enumerate(order):
        if decay:
            eta = scale * (n / (t0 + i + n))
        y = A @ K[p]
        step = np.outer(eta * y, y)
        step *= lower
        A -= step @ A
        A[:, p] += eta * y
    return eta


class _SMDState:
    """KHA-SMD state: ``A``, ``A K~``, the differentials ``B = dA`` and the log-gains ``rho``."""

    def __init__(self, A: np.ndarray):
        self.A = A
        self.B = np.zeros_like(A)
        self.rho = np.zeros(A.shape[0])

    def run_pass(self, K: np.ndarray, order: np.ndarray, t0: int, eta0: float, mu: float, xi: float) -> np.ndarray:
        """One pass of Algorithm 1 (equations 13, 12, 7, 17, 16, 21, 15, 18 in that order)."""
        A, B, rho = self.A, self.B, self.rho
        n = K.shape[0]
        lower = np.tril(np.ones((A.shape[0], A.shape[0])))
        AK = A @ K  # exact at the start of every pass, then updated by (18)
        g = eta0
        for i, p in enumerate(order):
            lam = _eigenvalue_estimates(A, AK)  # (13)
            eta = eta0 * np.linalg.norm(lam) / lam * (n / (t0 + i + n))  # (12)
            k = K[p]
            y = AK[:, p].copy()  # (7): A k_p, K~ being symmetric
            L = np.outer(y, y) * lower
            GK = np.outer(y, k) - L @ AK  # (17): Gamma K~
            rho += mu * np.einsum("ij,ij->i", GK, B)  # (16)
            g = np.exp(rho) * eta
            v = B @ k
            # (21), from the old A and B
            dB = -(L @ (A + xi * B)) - xi * (((np.outer(v, y) + np.outer(y, v)) * lower) @ A)
            dB[:, p] += y + xi * v
            # (15): A <- A + diag(g) Gamma with Gamma = y e_p^T - lt(y y^T) A
            dA = -(L @ A)
            dA[:, p] += y
            B *= xi
            B += g[:, None] * dB
            A += g[:, None] * dA
            AK += g[:, None] * GK  # (18)
        return g


def excess_reconstruction_error(K, A, *, min_error: float | None = None) -> float:
    """Excess relative reconstruction error ``||K - (A K)^T A K||_F / E_min - 1``.

    The quality measure of Schraudolph et al. (2006) for ``r`` functions
    ``w_i = sum_j A_ij phi~(x_j)`` expanded over the (centred) training points: the
    Frobenius error of the rank-``r`` reconstruction of the kernel matrix they give,
    relative to the best rank-``r`` reconstruction. 0 for the top ``r`` eigenvectors
    normalised to unit RKHS norm; it does not depend on the order or on rotations of
    the components.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        The (centred) kernel matrix, symmetric positive semi-definite.
    A : ndarray of shape (r, n)
        Expansion coefficients, e.g. :attr:`KernelHebbianPCA.coef_`, or
        ``(U / sqrt(mu)).T`` for the top unit eigenvectors ``U`` of ``K`` and their eigenvalues ``mu``.
    min_error : float, optional
        ``E_min = sqrt(sum_{i > r} mu_i^2)`` over the eigenvalues ``mu`` of ``K``, when
        already known (e.g. to trace many iterates); otherwise computed from all
        eigenvalues of ``K`` (``O(n^3)``).

    Returns
    -------
    float
        ``E(A) / E_min - 1`` (non-negative up to round-off).

    Raises
    ------
    ValueError
        On shapes that do not match, or when ``K`` has rank ``<= r`` (``E_min = 0``: the
        relative error is undefined).

    References
    ----------
    N. N. Schraudolph, S. Günter, S. V. N. Vishwanathan, "Fast iterative kernel PCA",
    NIPS 2006, equation (22).

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.baselines import excess_reconstruction_error
    >>> rng = np.random.default_rng(0)
    >>> F = rng.normal(size=(50, 10))
    >>> K = F @ F.T
    >>> mu, U = np.linalg.eigh(K)
    >>> A = (U[:, -3:] / np.sqrt(mu[-3:])).T
    >>> round(excess_reconstruction_error(K, A), 10)
    0.0
    """
    K = np.asarray(K, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square matrix, got shape {K.shape}")
    if A.ndim != 2 or A.shape[1] != K.shape[0]:
        raise ValueError(f"A must have shape (r, {K.shape[0]}) to match K, got {A.shape}")
    r = A.shape[0]
    if min_error is None:
        with one_blas_thread():
            mu = np.linalg.eigvalsh(K)
        min_error = float(np.sqrt(np.sum(mu[: K.shape[0] - r] ** 2)))
    scale = float(np.abs(K).max()) if K.size else 0.0
    if not min_error > 1e-12 * scale * K.shape[0]:
        raise ValueError(
            f"K has rank <= r={r}: the best rank-{r} reconstruction is exact (E_min = {min_error:.3g}) and "
            "the relative error is undefined"
        )
    AK = A @ K
    return float(np.linalg.norm(K - AK.T @ AK) / min_error - 1.0)
