"""The median trick: a bandwidth from the median distance on a sample."""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist

#: Rows of the seeded sample the median is taken over.
MEDIAN_SAMPLE = 1000


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
        The median, a positive number.

    Raises
    ------
    ValueError
        If every pair coincides (or every row is zero for ``"norm"``): no scale can be
        read from the data and a numeric ``bandwidth`` must be given.
    """
    x = np.asarray(sample, dtype=np.float64)[:MEDIAN_SAMPLE]
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
    return float(np.median(dist))
