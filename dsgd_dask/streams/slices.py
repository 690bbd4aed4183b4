"""Slices of a response ``y`` for sliced inverse regression: fitted on a sample, applied to any rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from dsgd_dask._validation import check_int

#: Spawn-key tag of the k-means seed (feature blocks use ``(j,)``; streams their own tags).
SLICE_TAG = 0x534C
#: k-means restarts: the best of this many seeded runs.
KMEANS_INIT = 10


def _check_response(y, what: str) -> np.ndarray:
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{what} has dtype {y.dtype}; a real numeric dtype (bool, integer or float) is required "
                        "(encode string or categorical labels as integers first)")
    if y.ndim not in (1, 2):
        raise ValueError(f"{what} must be 1-D (n_samples,) or 2-D (n_samples, n_outputs); got shape {y.shape}")
    if y.ndim == 2 and y.shape[1] == 0:
        raise ValueError(f"{what} has 0 columns")
    y = y.astype(np.float64, copy=False)
    if not np.isfinite(y).all():
        bad = np.argwhere(~np.isfinite(y))[0]
        raise ValueError(f"{what} contains NaN or infinity (first at row {bad[0]}); clean or impute it first")
    return y


def _listed(values: np.ndarray, most: int = 10) -> str:
    """The first values, integral ones written as integers."""
    shown = [int(v) if float(v).is_integer() else float(v) for v in values[:most]]
    return f"{shown}{' ...' if len(values) > most else ''}"


@dataclass(eq=False)
class Slicer:
    """Discretises a response into slices, from a sample of it; :meth:`assign` labels any rows.

    Three kinds, chosen by :meth:`fit`:

    * ``"classes"``: a 1-D response (or one column) with at most ``n_slices`` distinct
      values in the sample gets one slice per value, in increasing order; a value unseen
      in the sample raises at :meth:`assign`.
    * ``"quantiles"``: otherwise a 1-D response is cut at ``n_slices - 1`` interior
      quantiles of the sample, taken as sample values (``method="lower"``); repeated
      edges and an edge at the sample maximum are dropped, so tied responses may give
      fewer slices, every one non-empty on the sample. Slice ``s`` holds
      ``edges[s-1] < y <= edges[s]``.
    * ``"kmeans"``: a response of several columns is standardised by the sample's mean
      and standard deviation and clustered by k-means (scikit-learn ``KMeans``, best of
      10 seeded runs); a row's slice is its nearest centroid. Centroids that own no
      sample row (fewer distinct rows than slices) are dropped.

    The object is small (edges, values or centroids) and picklable: assign chunk by chunk
    in tasks. Labelling is row by row, so chunks give the labels of the whole.

    Attributes
    ----------
    kind : {"classes", "quantiles", "kmeans"}
    n_slices : int
        Number of slices (possibly fewer than requested, see above).
    values : ndarray of shape (n_slices,)
        The class values (``"classes"``).
    edges : ndarray of shape (n_slices - 1,)
        Interior edges (``"quantiles"``).
    centroids : ndarray of shape (n_slices, n_outputs)
        Centroids in standardised units (``"kmeans"``).
    mean, scale : ndarray of shape (n_outputs,)
        Standardisation of a multi-column response (``"kmeans"``).

    Examples
    --------
    >>> import numpy as np
    >>> from dsgd_dask.streams.slices import Slicer
    >>> y = np.arange(100.0)
    >>> slicer = Slicer.fit(y, 4, seed=0)
    >>> slicer.kind, slicer.n_slices
    ('quantiles', 4)
    >>> np.bincount(slicer.assign(y)).tolist()
    [25, 25, 25, 25]
    >>> Slicer.fit(np.array([0, 1, 1, 0, 2]), 4, seed=0).assign([2, 0])
    array([2, 0])
    """

    kind: Literal["classes", "quantiles", "kmeans"]
    n_slices: int
    n_outputs: int
    values: np.ndarray | None = None
    edges: np.ndarray | None = None
    centroids: np.ndarray | None = None
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None

    @classmethod
    def fit(cls, y_sample, n_slices: int, seed: int) -> Slicer:
        """Slices of the response from a sample of it.

        Parameters
        ----------
        y_sample : array-like of shape (n,) or (n, n_outputs)
            Numeric, finite; at least ``n_slices`` rows.
        n_slices : int
            Number of slices wanted (at least 2).
        seed : int
            Seed of k-means (multi-column responses only).

        Returns
        -------
        Slicer
        """
        n_slices = check_int(n_slices, "n_slices", 2)
        y = _check_response(y_sample, "y")
        if y.shape[0] < n_slices:
            raise ValueError(f"y has {y.shape[0]} samples, fewer than n_slices={n_slices}; lower n_slices or "
                             "pass more rows")
        if y.ndim == 2 and y.shape[1] > 1:
            return cls._kmeans(y, n_slices, seed)
        y = y.reshape(-1)
        values = np.unique(y)
        if len(values) <= n_slices:
            return cls("classes", len(values), 1, values=values)
        edges = np.unique(np.quantile(y, np.arange(1, n_slices) / n_slices, method="lower"))
        edges = edges[edges < values[-1]]
        return cls("quantiles", len(edges) + 1, 1, edges=edges)

    @classmethod
    def _kmeans(cls, y: np.ndarray, n_slices: int, seed: int) -> Slicer:
        from sklearn.cluster import KMeans

        mean = y.mean(axis=0)
        scale = y.std(axis=0)
        scale[scale == 0] = 1.0
        z = (y - mean) / scale
        state = int(np.random.SeedSequence(seed, spawn_key=(SLICE_TAG,)).generate_state(1)[0])
        km = KMeans(n_clusters=n_slices, n_init=KMEANS_INIT, random_state=state).fit(z)
        slicer = cls("kmeans", n_slices, y.shape[1], centroids=km.cluster_centers_, mean=mean, scale=scale)
        owned = np.bincount(slicer._nearest(z), minlength=n_slices) > 0
        slicer.centroids = slicer.centroids[owned]
        slicer.n_slices = int(owned.sum())
        return slicer

    def _nearest(self, z: np.ndarray) -> np.ndarray:
        best = np.full(z.shape[0], np.inf)
        label = np.zeros(z.shape[0], dtype=np.int64)
        for s, c in enumerate(self.centroids):
            d = ((z - c) ** 2).sum(axis=1)
            closer = d < best
            best[closer] = d[closer]
            label[closer] = s
        return label

    def assign(self, y) -> np.ndarray:
        """The slice of every row of ``y``.

        Parameters
        ----------
        y : array-like of shape (n,) or (n, n_outputs)
            Any rows (e.g. one chunk), with the columns of the fitted sample.

        Returns
        -------
        ndarray of int64 of shape (n,)
            Slice indices in ``[0, n_slices)``.
        """
        y = _check_response(y, "y")
        if self.kind == "kmeans":
            if y.ndim != 2 or y.shape[1] != self.n_outputs:
                raise ValueError(f"y must have shape (n, {self.n_outputs}) as the fitted sample, got {y.shape}")
            return self._nearest((y - self.mean) / self.scale)
        if y.ndim == 2 and y.shape[1] != 1:
            raise ValueError(f"y must be 1-D or have one column as the fitted sample, got shape {y.shape}")
        y = y.reshape(-1)
        if self.kind == "quantiles":
            return np.searchsorted(self.edges, y, side="left").astype(np.int64)
        idx = np.minimum(np.searchsorted(self.values, y), len(self.values) - 1)
        unseen = self.values[idx] != y
        if unseen.any():
            raise ValueError(f"y holds values not seen when the slices were fitted: {_listed(np.unique(y[unseen]))} "
                             f"(classes: {_listed(self.values)})")
        return idx.astype(np.int64)
