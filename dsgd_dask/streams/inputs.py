"""Normalise numpy, dask, Zarr and xarray inputs into one view, validated without computing."""

from __future__ import annotations

from dataclasses import dataclass, field

import dask.array as da
import numpy as np


@dataclass
class DataView:
    """A 2-D input (rows = samples) as a numpy or dask array, plus its xarray labels.

    Attributes
    ----------
    data : ndarray or dask.array.Array
        Numeric, 2-D, one chunk along the feature axis when dask.
    dims : tuple of str, optional
        ``(sample_dim, feature_dim)`` when the input was an xarray DataArray.
    feature_coords : ndarray, optional
        Coordinate values along the feature dimension, if the DataArray has them.
    source : object
        The original input (a DataArray is used to build labelled outputs).
    """

    data: object
    dims: tuple[str, str] | None = None
    feature_coords: np.ndarray | None = None
    source: object = field(default=None, repr=False)

    @property
    def is_dask(self) -> bool:
        return isinstance(self.data, da.Array)

    @property
    def n_samples(self) -> int:
        return int(self.data.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.data.shape[1])


def check_dtype(dtype, what: str) -> None:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {what} has dtype {dtype}")
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{what} has dtype {dtype}; a real numeric dtype (bool, integer or float) is required"
        )


def _is_zarr_array(X) -> bool:
    try:
        import zarr
    except ImportError:  # pragma: no cover - zarr is a dependency
        return False
    return isinstance(X, zarr.Array)


def _is_dataarray(X) -> bool:
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover - xarray is a dependency
        return False
    return isinstance(X, xr.DataArray)


def is_lazy_input(X) -> bool:
    """Whether ``X`` is (or wraps) a dask or Zarr array that must not be computed eagerly."""
    if _is_dataarray(X):
        X = X.data
    return isinstance(X, da.Array) or _is_zarr_array(X)


def as_view(X, what: str = "X") -> DataView:
    """Validate and wrap a dask array, Zarr array or xarray DataArray (numpy-backed allowed).

    Numpy and array-likes go through scikit-learn's ``validate_data`` in the estimators;
    this handles the lazy and labelled inputs, checking dtype, shape and chunks without
    computing anything.
    """
    dims = coords = None
    source = X
    if _is_dataarray(X):
        if X.ndim != 2:
            raise ValueError(
                f"{what} must be a 2-D DataArray (samples, features); got dims {X.dims}"
            )
        dims = tuple(str(d) for d in X.dims)
        fdim = dims[1]
        if fdim in X.coords:
            coords = np.asarray(X.coords[fdim].values)
        X = X.data
    if _is_zarr_array(X):
        X = da.from_zarr(X)
    if not isinstance(X, (da.Array, np.ndarray)):
        raise TypeError(f"{what} must be a numpy, dask, Zarr or xarray array, got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(
            f"{what} must be 2-D (n_samples, n_features); got {X.ndim}-D with shape {X.shape}. "
            "Reshape your data with X.reshape(-1, 1) (one feature) or X.reshape(1, -1) (one sample)."
        )
    check_dtype(X.dtype, what)
    if isinstance(X, da.Array):
        if any(np.isnan(c) for c in X.shape):
            raise ValueError(
                f"{what} has unknown chunk sizes {X.shape}; call X.compute_chunk_sizes() first"
            )
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
    if X.shape[0] == 0:
        raise ValueError(f"{what} has 0 samples; at least one row is required")
    if X.shape[1] == 0:
        raise ValueError(f"{what} has 0 features; at least one column is required")
    return DataView(X, dims, coords, source)


def check_finite_block(block: np.ndarray, where: str) -> None:
    """Raise a ``ValueError`` naming ``where`` if ``block`` holds NaN or infinity."""
    if block.dtype.kind == "f" and not np.isfinite(block).all():
        bad = np.argwhere(~np.isfinite(block))[0]
        raise ValueError(
            f"Input contains NaN or infinity in {where} (first at local row {bad[0]}, "
            f"column {bad[1]}); clean or impute the data first"
        )
