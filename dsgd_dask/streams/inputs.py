"""Normalise numpy, dask, Zarr and xarray inputs into one view, validated without computing."""

from __future__ import annotations

import os
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


def _is_dataset(X) -> bool:
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover - xarray is a dependency
        return False
    return isinstance(X, xr.Dataset)


def is_lazy_input(X) -> bool:
    """Whether ``X`` is (or wraps) a dask or Zarr array, or a path to one, not to be read eagerly."""
    if isinstance(X, str | os.PathLike) or _is_dataset(X):
        return True
    if _is_dataarray(X):
        X = X.data
    return isinstance(X, da.Array) or _is_zarr_array(X)


def open_zarr_node(path, what: str = "X", storage_options: dict | None = None):
    """The Zarr array or group at ``path`` (a local path or URL), read-only; a clear error if it is not one.

    ``storage_options`` (default: those of the enclosing
    :func:`~dsgd_dask.model.store.using_storage_options` block) are the options of the
    fsspec filesystem of a URL; a local path ignores them.
    """
    import zarr

    from dsgd_dask.model.store import check_storage_options, current_storage_options

    options = check_storage_options(storage_options)
    if options is None:
        options = current_storage_options()
    remote = options is not None and "://" in str(path) and not str(path).startswith("file://")
    try:
        return zarr.open(str(path), mode="r", **({"storage_options": options} if remote else {}))
    except FileNotFoundError:
        raise
    except Exception as err:
        raise ValueError(f"{what}={str(path)!r} is not a readable Zarr store ({type(err).__name__}: {err})") from err


def open_zarr_path(path, what: str = "X", storage_options: dict | None = None):
    """The Zarr array at ``path`` (a local path or URL), with a clear error for anything else."""
    import zarr

    node = open_zarr_node(path, what, storage_options)
    if isinstance(node, zarr.Group):
        arrays = sorted(name for name, _ in node.arrays())
        raise ValueError(
            f"{what}={str(path)!r} is a Zarr group, not an array; pass the array inside it "
            f"(e.g. {str(path) + '/' + arrays[0] if arrays else 'a path to an array'!r}), "
            "or da.from_zarr(path, component=...), or xr.open_zarr(path)[variable]"
        )
    return node


def _dataset_variable(ds, what: str):
    names = [name for name, var in ds.data_vars.items() if var.ndim == 2]
    if len(names) != 1:
        raise ValueError(
            f"{what} is an xarray Dataset with {len(names)} 2-D data variables {names}; "
            f"select one: ds[name]"
        )
    return ds[names[0]]


def as_view(X, what: str = "X", storage_options: dict | None = None) -> DataView:
    """Validate and wrap a dask array, Zarr array or xarray DataArray (numpy-backed allowed).

    Numpy and array-likes go through scikit-learn's ``validate_data`` in the estimators;
    this handles the lazy and labelled inputs, checking dtype, shape and chunks without
    computing anything. A path opens the Zarr array there (a URL with ``storage_options``,
    the options of its fsspec filesystem); an xarray Dataset must hold a single 2-D data
    variable (else pass ``ds[name]``).
    """
    dims = coords = None
    if isinstance(X, str | os.PathLike):
        X = open_zarr_path(X, what, storage_options)
    if _is_dataset(X):
        X = _dataset_variable(X, what)
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


def numeric_array(V: np.ndarray, what: str) -> np.ndarray:
    """An object array of numbers as float64 (as scikit-learn's ``check_array``); anything else unchanged."""
    if V.dtype.kind != "O":
        return V
    try:
        return V.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} has dtype object with non-numeric values; a real numeric dtype (bool, integer "
                        "or float) is required") from err


def _as_2d_view(V, what: str, allow_1d: bool) -> DataView:
    """A view of ``V``; with ``allow_1d`` a 1-D ``V`` (numpy, dask, Zarr, DataArray) becomes one column."""
    if isinstance(V, str | os.PathLike):
        V = open_zarr_path(V, what)
    if allow_1d and getattr(V, "ndim", None) == 1:
        if _is_dataarray(V):
            V = V.expand_dims("output", axis=1)
        elif _is_zarr_array(V):
            V = da.from_zarr(V)[:, None]
        elif isinstance(V, da.Array):
            V = V[:, None]
        else:
            V = np.asarray(V)[:, None]
    if is_lazy_input(V) or _is_dataarray(V):
        return as_view(V, what)
    V = np.asarray(V)
    if V.dtype.kind == "O":
        raise TypeError(f"{what} has dtype object; a real numeric dtype (bool, integer or float) is required")
    return as_view(V, what)


def paired_views(X, Y, what: tuple[str, str] = ("X", "Y"), allow_1d_y: bool = False) -> tuple[DataView, DataView]:
    """Two row-aligned views for two-view methods (row ``i`` of ``X`` goes with row ``i`` of ``Y``).

    Both are validated without computing; different row counts fail here, before any
    work. When either is a dask array, both become dask arrays with the row chunks of the
    first dask one, so every chunk task reads matching rows of both. With
    ``allow_1d_y`` a 1-D ``Y`` (a target ``y``) is taken as one column.
    """
    vx = _as_2d_view(X, what[0], False)
    vy = _as_2d_view(Y, what[1], allow_1d_y)
    if vx.n_samples != vy.n_samples:
        raise ValueError(
            f"{what[0]} and {what[1]} must be row-aligned views of the same samples: {what[0]} has "
            f"{vx.n_samples} rows, {what[1]} has {vy.n_samples}"
        )
    if vx.dims and vy.dims and vx.dims[0] != vy.dims[0]:
        raise ValueError(f"{what[0]} and {what[1]} have different sample dimensions {vx.dims[0]!r} and "
                         f"{vy.dims[0]!r}")
    if vx.is_dask or vy.is_dask:
        rows = vx.data.chunks[0] if vx.is_dask else vy.data.chunks[0]
        for v in (vx, vy):
            data = v.data if v.is_dask else da.from_array(v.data, chunks=(rows, -1))
            if data.chunks[0] != rows:
                data = data.rechunk({0: rows})
            v.data = data
    return vx, vy


def stacked_view(vx: DataView, vy: DataView) -> DataView:
    """The columns of two row-aligned views side by side, ``[X | Y]``, as one view.

    The row chunks are those of :func:`paired_views`, so every chunk task, sample and
    pass over the stacked view reads matching rows of both; the result keeps the sample
    labels of ``vx``. Dask inputs stay lazy; numpy inputs are copied once.
    """
    if vx.is_dask:
        data = da.concatenate([vx.data, vy.data], axis=1).rechunk({1: -1})
    else:
        data = np.hstack([vx.data, vy.data])
    dims = None if vx.dims is None else (vx.dims[0], "stacked")
    return DataView(data, dims, None, vx.source)
