"""Kernels: their parameters, spectral samplers and exact values.

Every kernel is normalised so that a shift-invariant one has ``k(0) = 1``; the
bandwidth ``sigma`` scales the input (``k(x, y) = k_1(x / sigma, y / sigma)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.spatial.distance import cdist
from sklearn.metrics.pairwise import euclidean_distances

from dsgd_dask._threads import scratch
from dsgd_dask.features.sampling import standard_cauchy, standard_laplace, standard_normal

KernelName = Literal["gaussian", "laplacian", "cauchy", "matern", "arccos"]

KERNELS: tuple[str, ...] = ("gaussian", "laplacian", "cauchy", "matern", "arccos")
_ALIASES = {"rbf": "gaussian"}
MATERN_NU: tuple[float, ...] = (0.5, 1.5, 2.5)
ARCCOS_ORDERS: tuple[int, ...] = (0, 1, 2)


@dataclass(frozen=True)
class KernelSpec:
    """A kernel with its bandwidth and shape parameter.

    Parameters
    ----------
    name : {"gaussian", "laplacian", "cauchy", "matern", "arccos"}
        Kernel family (``"rbf"`` is accepted for ``"gaussian"``).
    bandwidth : float
        Positive length scale ``sigma``.
    nu : float, optional
        Matérn smoothness, one of 0.5, 1.5, 2.5 (default 1.5).
    order : int, optional
        Arc-cosine order, one of 0, 1, 2 (default 1).
    """

    name: str
    bandwidth: float = 1.0
    nu: float | None = None
    order: int | None = None

    def __post_init__(self) -> None:
        name = _ALIASES.get(self.name, self.name) if isinstance(self.name, str) else self.name
        if name not in KERNELS:
            raise ValueError(f"unknown kernel {self.name!r}; choose one of {', '.join(KERNELS)}")
        object.__setattr__(self, "name", name)
        bw = self.bandwidth
        if isinstance(bw, bool) or not isinstance(bw, (int, float, np.integer, np.floating)):
            raise TypeError(f"bandwidth must be a number, got {type(bw).__name__}")
        if not np.isfinite(bw) or bw <= 0:
            raise ValueError(f"bandwidth must be a positive finite number, got {bw!r}")
        object.__setattr__(self, "bandwidth", float(bw))
        if name == "matern":
            nu = 1.5 if self.nu is None else float(self.nu)
            if nu not in MATERN_NU:
                raise ValueError(f"matern nu must be one of {MATERN_NU}, got {self.nu!r}")
            object.__setattr__(self, "nu", nu)
        elif self.nu is not None:
            raise ValueError(f"nu applies to the matern kernel only, not {name!r}")
        if name == "arccos":
            order = 1 if self.order is None else self.order
            if order not in ARCCOS_ORDERS:
                raise ValueError(f"arccos order must be one of {ARCCOS_ORDERS}, got {self.order!r}")
            object.__setattr__(self, "order", int(order))
        elif self.order is not None:
            raise ValueError(f"order applies to the arccos kernel only, not {name!r}")

    @property
    def shift_invariant(self) -> bool:
        """Whether ``k(x, y)`` depends on ``x - y`` only."""
        return self.name != "arccos"

    @property
    def distance_metric(self) -> str:
        """The distance whose median sets the bandwidth (``"norm"`` for arccos)."""
        return {"laplacian": "cityblock", "arccos": "norm"}.get(self.name, "euclidean")

    def with_bandwidth(self, bandwidth: float) -> KernelSpec:
        return KernelSpec(self.name, bandwidth, self.nu, self.order)

    def to_dict(self) -> dict:
        return {"name": self.name, "bandwidth": self.bandwidth, "nu": self.nu, "order": self.order}


def parse_kernel(kernel: str, bandwidth: float = 1.0, kernel_params: dict | None = None) -> KernelSpec:
    """Build a :class:`KernelSpec` from estimator parameters, with clear errors."""
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a string, got {type(kernel).__name__}")
    params = dict(kernel_params or {})
    unknown = set(params) - {"nu", "order"}
    if unknown:
        raise ValueError(f"unknown kernel_params {sorted(unknown)}; allowed: 'nu' (matern), 'order' (arccos)")
    return KernelSpec(kernel, bandwidth, params.get("nu"), params.get("order"))


def sample_frequencies(spec: KernelSpec, rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` (``m x d``, C-contiguous float) with ``m`` frequency vectors, one per row.

    The vectors are drawn from the kernel's spectral measure with the bandwidth applied
    (rows are ``omega / sigma``), in place, with the fast samplers of
    :mod:`dsgd_dask.features.sampling`. The standard draws are made in float32 whatever
    the precision of ``out`` (a random draw rounded to 24 bits is still a draw of the
    same distribution, to a relative ``6e-8``; float64 trigonometry would make
    regeneration several times slower), so float32 and float64 features of a seed share
    their frequencies; the bandwidth is applied in the precision of ``out``.
    """
    draws = out if out.dtype == np.float32 else np.empty(out.shape, dtype=np.float32)
    name = spec.name
    if name == "laplacian":
        standard_cauchy(rng, draws)  # product of Cauchy(0, 1) coordinates
    elif name == "cauchy":
        standard_laplace(rng, draws)  # product of Laplace(0, 1) coordinates
    else:
        standard_normal(rng, draws)
    if draws is not out:
        out[...] = draws
    if name == "matern":
        # multivariate t with 2 nu degrees of freedom: one chi-square draw per vector
        u = rng.chisquare(2.0 * spec.nu, size=out.shape[0])
        out *= np.sqrt(2.0 * spec.nu / u).astype(out.dtype)[:, None]
    out *= out.dtype.type(1.0 / spec.bandwidth)
    return out


def kernel_matrix(spec: KernelSpec, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:
    """Exact kernel matrix ``k(X_i, Y_j)`` in float64 (dense: small inputs, the exact baselines, tests).

    Shift-invariant kernels are evaluated on both inputs shifted by the mean of ``Y``
    (of ``X`` when ``Y`` is not given): the same values, and an offset of the data costs
    no precision. The shift depends on ``Y`` alone, not on which rows of ``X`` are
    evaluated together (a chunk of them or all), so it does not change with the chunking.
    """
    same = Y is None or Y is X
    # C order: scipy's cdist reads strided (e.g. transposed) inputs in place, ~3x slower
    X = np.ascontiguousarray(X, dtype=np.float64)
    Y = X if same else np.ascontiguousarray(Y, dtype=np.float64)
    if spec.shift_invariant and Y.shape[0]:
        # |x|^2 + |y|^2 - 2 x.y of raw rows would lose to an offset the digits it squares
        center = Y.mean(axis=0)
        Y = Y - center
        X = Y if same else X - center
    s = spec.bandwidth
    name = spec.name
    if name == "gaussian":
        return np.exp(-euclidean_distances(X, Y, squared=True) / (2.0 * s * s))
    if name == "laplacian":
        return np.exp(-cdist(X, Y, "cityblock") / s)
    if name == "cauchy":
        logk = np.zeros((X.shape[0], Y.shape[0]))
        for i in range(X.shape[1]):
            diff = (X[:, i, None] - Y[None, :, i]) / s
            logk -= np.log1p(diff * diff)
        return np.exp(logk)
    if name == "matern":
        r = euclidean_distances(X, Y) / s
        if spec.nu == 0.5:
            return np.exp(-r)
        if spec.nu == 1.5:
            a = np.sqrt(3.0) * r
            return (1.0 + a) * np.exp(-a)
        a = np.sqrt(5.0) * r
        return (1.0 + a + a * a / 3.0) * np.exp(-a)
    # arc-cosine kernel (Cho & Saul 2009) of the scaled inputs
    nx = np.linalg.norm(X, axis=1) / s
    ny = np.linalg.norm(Y, axis=1) / s
    denom = np.outer(nx, ny)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(denom > 0, (X @ Y.T) / (s * s) / np.where(denom > 0, denom, 1.0), 1.0)
    theta = np.arccos(np.clip(cos, -1.0, 1.0))
    n = spec.order
    if n == 0:
        j = np.pi - theta
    elif n == 1:
        j = np.sin(theta) + (np.pi - theta) * np.cos(theta)
    else:
        j = 3.0 * np.sin(theta) * np.cos(theta) + (np.pi - theta) * (1.0 + 2.0 * np.cos(theta) ** 2)
    return denom**n * j / np.pi


def l1_family_sections(spec: KernelSpec, X: np.ndarray, Y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Laplacian or Cauchy kernel sections ``k(X_i, Y_j)`` into ``out``, in the precision of ``out``.

    Compiled loops (:mod:`dsgd_dask.features._l1`): Laplacian ``exp(-|x - y|_1 / sigma)``
    from ``sum_k max(x_k, y_k)`` and the rows' sums, Cauchy ``1 / prod_k (1 + ((x_k - y_k)
    / sigma)^2)`` (a product that overflows gives 0), then the Laplacian's exponential
    (:func:`~dsgd_dask.features._elementwise.exp_sections`).
    The inputs are used as they are: shift them by a center of the data
    first (:meth:`~dsgd_dask.features.blocks.FeatureBlocks.prepare`), since the Laplacian's
    rounding error scales with their magnitudes. A section does not depend on the other
    rows or landmarks evaluated with it.
    """
    from dsgd_dask.features import _elementwise, _l1  # compiled on first use

    if spec.name not in ("laplacian", "cauchy"):
        raise ValueError(f"l1_family_sections takes the laplacian or cauchy kernel, not {spec.name!r}")
    dt = out.dtype.type
    if X.shape[1] != Y.shape[1] or out.shape != (X.shape[0], Y.shape[0]):
        raise ValueError(f"sections of {X.shape[0]} rows on {Y.shape[0]} landmarks need out of shape "
                         f"{(X.shape[0], Y.shape[0])} and inputs of the same width, got out {out.shape}, "
                         f"inputs {X.shape[1]} and {Y.shape[1]} wide")
    if not X.shape[0] * Y.shape[0]:
        return out
    X = np.ascontiguousarray(X, dtype=out.dtype)
    Y = np.ascontiguousarray(Y, dtype=out.dtype)
    # the landmarks' panels in a buffer kept by the thread: a pass's slices reuse it
    panels = scratch("l1-panels", _l1.panels_shape(Y.shape[0], Y.shape[1], out.dtype), out.dtype)
    if spec.name == "cauchy":
        inv = dt(1.0 / spec.bandwidth)
        with np.errstate(over="ignore"):
            return _l1.cauchy_sections(X * inv, Y * inv, panels, out)
    # the exponential in one sweep: beside the d terms of each exponent its memory traffic is negligible
    return _elementwise.exp_sections(_l1.laplacian_exponents(X, Y, panels, dt(1.0 / spec.bandwidth), dt(1), out))

