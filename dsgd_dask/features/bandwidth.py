"""The median trick, and the scales of data and bandwidth that a precision can represent.

The median trick takes the bandwidth from the median distance on a sample. The scale
checks refuse, before any feature is computed, data and bandwidths whose powers
overflow or underflow the precision the features are computed in: kernel sections
square distances (``|x|^2 + |l|^2 - 2 x.l``) and divide them by the squared bandwidth,
random Fourier features multiply the inputs by frequencies ``omega / bandwidth``. Both
see the data about its mean (shift-invariant kernels), so an offset of the data never
matters, only its spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.distance import pdist

#: Rows of the seeded sample the median is taken over.
MEDIAN_SAMPLE = 1000
#: Headroom of the scale checks: the powers of the sample's scales must lie this factor
#: inside the precision's range (normal numbers), for the rows beyond the sample, for the
#: sums of ``d`` terms and the factors of a few that the kernels apply to them.
SCALE_MARGIN = 1e4
#: What the scale checks advise whatever the precision.
STANDARDISE = "standardise the data (e.g. sklearn.preprocessing.StandardScaler)"


def _power_of_two(x: np.ndarray) -> float:
    """A power of two near ``max |x|`` (1 for zero or non-finite ``x``): dividing by it is exact."""
    top = float(np.abs(x).max(initial=0.0))
    return 2.0 ** np.floor(np.log2(top)) if np.isfinite(top) and top > 0 else 1.0


def median_bandwidth(sample: np.ndarray, metric: str = "euclidean") -> float:
    """Median pairwise distance of ``sample`` (rows), ignoring coincident pairs.

    Parameters
    ----------
    sample : ndarray of shape (n, d)
        A few hundred to a few thousand rows drawn from the data.
    metric : {"euclidean", "cityblock", "norm"}
        The kernel's distance; ``"norm"`` takes the median row norm instead (for the
        arc-cosine kernel, which is not shift-invariant).

    Returns
    -------
    float
        The median, a positive number. Exact at any finite scale of the data: the
        distances are taken on the sample divided by a power of two.

    Raises
    ------
    ValueError
        If every pair coincides (or every row is zero for ``"norm"``): no scale can be
        read from the data and a numeric ``bandwidth`` must be given.
    """
    x = np.asarray(sample, dtype=np.float64)[:MEDIAN_SAMPLE]
    unit = _power_of_two(x)
    x = x / unit
    if metric == "norm":
        dist = np.linalg.norm(x, axis=1)
    else:
        if x.shape[0] < 2:
            raise ValueError("the median trick needs at least 2 rows; pass a numeric bandwidth")
        dist = pdist(x, metric)
    dist = dist[dist > 0]
    if dist.size == 0:
        raise ValueError(
            "bandwidth='median' found no nonzero distance in the data sample "
            "(all rows identical); pass a numeric bandwidth"
        )
    return float(np.median(dist)) * unit


@dataclass(frozen=True)
class DataScale:
    """The scale of a data sample: distances of its rows from their mean (or norms).

    Parameters
    ----------
    largest : float
        The largest distance of a row from the mean (or the largest norm).
    typical : float
        The median of the nonzero distances (0 when every row is at the mean).
    n_rows : int
        Rows of the sample.
    centred : bool
        Distances from the mean (``True``, shift-invariant kernels) or norms.
    rows : str
        The rows' name in messages.
    """

    largest: float
    typical: float
    n_rows: int
    centred: bool = True
    rows: str = "X's rows"

    @classmethod
    def of(cls, sample: np.ndarray, centred: bool = True, rows: str = "X's rows") -> DataScale:
        """The scale of the rows of ``sample`` (exact at any finite scale: taken on the sample over a power of two)."""
        x = np.asarray(sample, dtype=np.float64)
        unit = _power_of_two(x)
        x = x / unit
        if centred:
            x = x - x.mean(axis=0)
        dist = np.linalg.norm(x, axis=1) if x.size else np.zeros(x.shape[0])
        nonzero = dist[dist > 0]
        return cls(float(dist.max(initial=0.0)) * unit, float(np.median(nonzero)) * unit if nonzero.size else 0.0,
                   x.shape[0], bool(centred), rows)

    def describe(self, which: str) -> str:
        """``"the largest distance of X's rows from their mean (in a sample of n rows)"`` and the like."""
        measure = f"distance of {self.rows} from their mean" if self.centred else f"norm of {self.rows}"
        return f"the {which} {measure} (in a sample of {self.n_rows} rows)"


def _scale_problem(scale: DataScale | None, bandwidth: float, dtype: np.dtype, power: int) -> tuple[str, str] | None:
    """What overflows or underflows ``dtype`` at ``power`` and whose it is (``"data"``/``"bandwidth"``), or ``None``."""
    info = np.finfo(dtype)
    low, high = float(info.tiny) * SCALE_MARGIN, float(info.max) / SCALE_MARGIN

    def fails(subject: str, value: float, over: bool = True, under: bool = True) -> str | None:
        with np.errstate(over="ignore", under="ignore"):
            v = float(np.float64(value) ** power)
        what = f"{subject} is {value:.3g}; its square, {v:.3g}," if power == 2 else f"{subject}, {value:.3g},"
        if over and v > high:
            return f"{what} overflows {dtype.name} (largest {info.max:.3g})"
        if under and v < low:
            return f"{what} underflows {dtype.name} (smallest normal {info.tiny:.3g})"
        return None

    known = scale is not None and scale.largest > 0
    why = known and (fails(scale.describe("largest"), scale.largest, under=False)
                     or fails(scale.describe("median"), scale.typical, over=False))
    if why:
        return why, "data"
    why = fails(f"bandwidth={bandwidth:.3g}: 1/bandwidth", 1.0 / bandwidth)
    if why or not known:
        return (why, "bandwidth") if why else None
    why = (fails(f"{scale.describe('largest')} over bandwidth={bandwidth:.3g}", scale.largest / bandwidth, under=False)
           or fails(f"{scale.describe('median')} over bandwidth={bandwidth:.3g}", scale.typical / bandwidth,
                    over=False))
    return (why, "bandwidth") if why else None


def check_scale(scale: DataScale | None, bandwidth: float, dtype, power: int) -> None:
    """Refuse data and a bandwidth whose scales ``dtype`` cannot represent at ``power``.

    The largest and the median distance of the rows from their mean, ``1 / bandwidth``
    and their ratios to the bandwidth, raised to ``power`` (2 where the features square
    distances, 1 where they multiply the inputs by frequencies), must be normal numbers
    of ``dtype`` :data:`SCALE_MARGIN` inside its range.

    Parameters
    ----------
    scale : DataScale or None
        The data's scale (``None``: check the bandwidth alone).
    bandwidth : float
    dtype : {"float32", "float64"}
        The precision the features are computed in.
    power : {1, 2}

    Raises
    ------
    ValueError
        Naming the quantity, its value and the limit, with what to do: standardise the
        data or pass a bandwidth of the data's scale, or ``compute_dtype="float64"``
        where float64 represents them.
    """
    dtype = np.dtype(dtype)
    problem = _scale_problem(scale, bandwidth, dtype, power)
    if problem is None:
        return
    why, whose = problem
    fixes = []
    if whose == "data" or scale is None:  # without the data's scale, a median bandwidth may be the data's fault
        fixes.append(STANDARDISE)
    if whose == "bandwidth":
        fixes.append("pass a bandwidth of the order of the distances between rows (bandwidth='median' takes their "
                     "median)")
    if dtype != np.float64 and _scale_problem(scale, bandwidth, np.dtype(np.float64), power) is None:
        fixes.append("pass compute_dtype='float64'")
    raise ValueError(f"{why}, so the kernel cannot be computed in {dtype.name}: {'; or '.join(fixes)}")


def check_resolution(scale: DataScale, bandwidth: float) -> None:
    """Refuse a bandwidth below the float64 resolution of the distances of the data.

    Distances about ``r`` carry a rounding of ``r eps`` (``eps`` of float64): where the
    bandwidth is smaller than the rounding of the median distance of the rows from their
    mean, the distances at the scale of the bandwidth are lost in it, in any precision.

    Parameters
    ----------
    scale : DataScale
    bandwidth : float

    Raises
    ------
    ValueError
        Naming the bandwidth and the data's median distance.
    """
    eps = float(np.finfo(np.float64).eps)
    if scale.typical * eps > bandwidth:
        raise ValueError(f"bandwidth={bandwidth:.3g} is {scale.typical / bandwidth:.3g} times smaller than "
                         f"{scale.describe('median')}, {scale.typical:.3g}: distances of that size are rounded to "
                         f"{scale.typical * eps:.3g} in float64, more than the bandwidth, so no precision resolves "
                         "the kernel; pass a bandwidth of the order of the distances between rows "
                         "(bandwidth='median' takes their median)")
