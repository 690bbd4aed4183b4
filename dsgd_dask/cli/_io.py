"""Inputs and outputs of the command line: data stores opened lazily, outputs written atomically."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import dask.array as da
import numpy as np

from dsgd_dask.model.store import _META, RemoteLocation, StoreError, atomic_directory, open_store_group, store_location
from dsgd_dask.streams.inputs import open_zarr_node

#: Rows per chunk when a ``.npy`` file is read as a dask array.
NPY_CHUNK_ROWS = 8192
#: Attribute of an output store naming the model and command that wrote it.
OUTPUT_ATTR = "dsgd_dask_output"


def _dimension_names(arr) -> tuple | None:
    """The xarray dimension names of a Zarr array (v3 ``dimension_names`` or v2 ``_ARRAY_DIMENSIONS``)."""
    names = getattr(arr.metadata, "dimension_names", None)
    if names is None:
        names = arr.attrs.get("_ARRAY_DIMENSIONS")
    return tuple(names) if names and all(n is not None for n in names) else None


def _open_node(path: str, what: str, storage_options: dict | None = None):
    if not os.path.exists(path) and "://" not in path:
        raise FileNotFoundError(f"no Zarr store or .npy file at {path}")
    return open_zarr_node(path, what, storage_options)


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def open_input(path, var: str | None = None, *, what: str = "INPUT", ndim: int | None = 2,
               feature_dim: str | None = None, storage_options: dict | None = None):
    """Open a data input lazily: a Zarr array, a variable of a Zarr group, or a ``.npy`` file.

    Parameters
    ----------
    path : str or Path
        A Zarr array, a Zarr group (``var`` names the array in it), or a ``.npy`` file.
    var : str, optional
        The array or variable inside a group; optional when the group holds a single
        array of dimensionality ``ndim``.
    what : str
        Name of the input in error messages.
    ndim : int, optional
        Dimensionality of the array to pick when ``var`` is not given (None: any).
    feature_dim : str, optional
        For xarray variables: the dimension holding the features, moved last.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL (``s3://``, ``gs://``...).

    Returns
    -------
    numpy.ndarray, dask.array.Array or xarray.DataArray
        A memory-mapped array for ``.npy``; a dask array for a Zarr array without
        dimension names; a dask-backed DataArray (opened with ``xarray.open_zarr``) for a
        variable written by xarray.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ValueError
        Not a readable store, no such variable, or an ambiguous group without ``var``.
    """
    import zarr

    path = str(path)
    if path.endswith(".npy"):
        if var is not None:
            raise ValueError(f"{what} {path} is a .npy file: it has no variable {var!r}")
        if feature_dim is not None:
            raise ValueError(f"--feature-dim needs an xarray store; {what} {path} is a .npy file")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no .npy file at {path}")
        return np.load(path, mmap_mode="r", allow_pickle=False)
    node = _open_node(path, what, storage_options)
    if isinstance(node, zarr.Array):
        if var is not None:
            raise ValueError(f"{what} {path} is a Zarr array, not a group: it has no variable {var!r}")
        arr, name, store = node, None, None
    else:
        if _META in node.attrs:
            raise ValueError(f"{what} {path} is a dsgd_dask {node.attrs[_META].get('kind', '')} store, "
                             "not a data store")
        arrays = dict(node.arrays())
        if var is None:
            fits = sorted(n for n, a in arrays.items() if ndim is None or a.ndim == ndim)
            if len(fits) != 1:
                dims = "" if ndim is None else f"{ndim}-D "
                raise ValueError(f"{what} {path} is a Zarr group with {len(fits)} {dims}arrays {fits}; "
                                 "name one with --var")
            var = fits[0]
        if var not in arrays:
            raise ValueError(f"{what} {path} has no variable {var!r}; it holds {sorted(arrays)}")
        arr, name, store = arrays[var], var, path
    dims = _dimension_names(arr)
    if dims is None or store is None:
        if feature_dim is not None:
            raise ValueError(f"--feature-dim needs an xarray store; {what} {path} has no dimension names")
        return da.from_zarr(arr)
    import xarray as xr

    remote = {"storage_options": storage_options} if storage_options is not None and _is_url(store) else {}
    data = xr.open_zarr(store, consolidated=False, **remote)[name]
    if feature_dim is not None:
        if feature_dim not in data.dims:
            raise ValueError(f"{what} variable {name!r} has no dimension {feature_dim!r}; its dims are {data.dims}")
        data = data.transpose(..., feature_dim)
    return data


def is_path(y: str) -> bool:
    """Whether ``--y`` names a path (a ``.npy`` file, something that exists, a URL) rather than a variable."""
    return y.endswith(".npy") or os.path.exists(y) or "://" in y


def open_second(x_path, y: str, y_var: str | None, what: str, ndim: int | None, feature_dim: str | None = None,
                storage_options: dict | None = None):
    """The second view or target ``--y``: a path (with ``--y-var``), or a variable of ``x_path``'s group."""
    if is_path(y):
        return open_input(y, y_var, what=what, ndim=ndim, feature_dim=feature_dim, storage_options=storage_options)
    if y_var is not None:
        raise FileNotFoundError(f"no store at --y {y}")
    try:
        return open_input(x_path, y, what=what, ndim=ndim, feature_dim=feature_dim, storage_options=storage_options)
    except ValueError as err:
        raise ValueError(f"--y {y!r} is neither a path nor a variable of {x_path}: {err}") from err


def row_chunks(data, rows: int | None):
    """``data`` as a lazy input with row chunks of ``rows`` (numpy is wrapped, dask and xarray rechunked)."""
    if isinstance(data, np.ndarray):
        return da.from_array(data, chunks=(rows or NPY_CHUNK_ROWS,) + (-1,) * (data.ndim - 1))
    if rows is None:
        return data
    if isinstance(data, da.Array):
        return data.rechunk({0: rows})
    return data.chunk({data.dims[0]: rows})


def _regular(arr: da.Array) -> da.Array:
    """``arr`` with equal row chunks (a shorter last one), as Zarr needs for parallel writes."""
    rows = arr.chunks[0]
    if len(rows) > 1 and (len(set(rows[:-1])) > 1 or rows[-1] > rows[0]):
        arr = arr.rechunk({0: max(rows)})
    return arr.rechunk({i: -1 for i in range(1, arr.ndim)})


@contextmanager
def _drained_threads():
    """On dask's threaded scheduler, a thread pool of its own, drained on the way out.

    After an error or ``KeyboardInterrupt`` the tasks already running finish before the
    temporary store is removed, so none of them writes a chunk into it afterwards.
    """
    import dask
    import dask.threaded
    from dask.base import get_scheduler

    if get_scheduler() is not dask.threaded.get:
        yield
        return
    pool = ThreadPoolExecutor(dask.config.get("num_workers", None) or os.cpu_count() or 1)
    try:
        with dask.config.set(pool=pool):
            yield
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _write_group(tmp, arrays: dict, attrs: dict, storage_options: dict | None = None) -> None:
    """Compute ``arrays`` (dask arrays or DataArrays) into a new Zarr group at ``tmp``, in one pass.

    With ``storage_options`` (``tmp`` a URL), the metadata of the group is written last:
    until then no Zarr group is at ``tmp``.
    """
    import xarray as xr
    import zarr

    remote = {} if storage_options is None else {"storage_options": storage_options}

    if any(isinstance(a, xr.DataArray) for a in arrays.values()):
        ds = xr.Dataset({name: a.rename(name) for name, a in arrays.items()})
        for name, var in ds.data_vars.items():
            if var.chunks:
                ds[name] = var.copy(data=_regular(var.data))
        for var in ds.variables.values():
            var.encoding = {}
        ds.attrs[OUTPUT_ATTR] = attrs
        if storage_options is None:
            with _drained_threads():
                ds.to_zarr(str(tmp), mode="w-", consolidated=False, zarr_format=3)
            return
        writes = ds.to_zarr(str(tmp), mode="w-", consolidated=False, zarr_format=3, compute=False, **remote)
        fs, root = _group_metadata(tmp, storage_options)
        metadata = fs.cat_file(root)
        fs.rm(root)  # put back once every chunk is written
        with _drained_threads():
            writes.compute()
        fs.pipe_file(root, metadata)
        return
    if storage_options is None:
        group = zarr.open_group(str(tmp), mode="w-", zarr_format=3)
    else:
        group = zarr.open_group(str(tmp), mode="w-", zarr_format=3, attributes={OUTPUT_ATTR: attrs}, **remote)
    sources, targets = [], []
    for name, arr in arrays.items():
        arr = _regular(da.asarray(arr))
        chunks = tuple(max(c) if c else 1 for c in arr.chunks)
        targets.append(group.create_array(name, shape=arr.shape, chunks=chunks, dtype=arr.dtype))
        sources.append(arr)
    if storage_options is not None:  # the group's metadata goes last: removed here, written again below
        fs, root = _group_metadata(tmp, storage_options)
        metadata = fs.cat_file(root)
        fs.rm(root)
    with _drained_threads():
        da.store(sources, targets, lock=False)
    if storage_options is not None:
        fs.pipe_file(root, metadata)
        return
    group.attrs[OUTPUT_ATTR] = attrs


def _group_metadata(url: str, storage_options: dict):
    """The filesystem of ``url`` and the path of the metadata of the Zarr group there."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **storage_options)
    return fs, root.rstrip("/") + "/zarr.json"


def write_output(path, arrays: dict, attrs: dict, overwrite: bool = False, storage_options: dict | None = None):
    """Compute the lazy ``arrays`` into a new Zarr store at ``path``, atomically.

    Parameters
    ----------
    path : str, Path or URL
        The output store: a complete store appears there, or nothing. On an object store
        (a URL with ``storage_options``) the group's metadata is written last, so Zarr and
        xarray open nothing there until every chunk is written; a write that fails
        deletes what it wrote, and ``overwrite`` deletes the previous store first.
    arrays : dict of str to dask array or xarray.DataArray
        Named outputs (``components``, ``U``/``V``, ``prediction``, ``proba``); DataArrays
        are written as an xarray Dataset, keeping their coordinates.
    attrs : dict
        Provenance stored in the group attribute ``dsgd_dask_output``.
    overwrite : bool
        Replace an existing store at ``path``.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL (``s3://``, ``gs://``, ``memory://``...).

    Returns
    -------
    Path or RemoteLocation
    """
    location = store_location(path, storage_options, "--out")
    if isinstance(location, RemoteLocation):
        if location.entries():
            if not overwrite:
                raise FileExistsError(f"{location} exists; pass overwrite=True (--overwrite on the command line) "
                                      "to replace it")
            location.fs.rm(location.root, recursive=True)
        try:
            _write_group(location.url, arrays, attrs, location.storage_options)
        except BaseException:
            if location.entries():
                location.fs.rm(location.root, recursive=True)
            raise
        return location
    with atomic_directory(path, overwrite, "--out") as (tmp, _):
        _write_group(tmp, arrays, attrs)
    return Path(path)


def read_model_attrs(path, storage_options: dict | None = None) -> tuple[dict, dict]:
    """The attributes of a model store and its format entry, without reading its arrays.

    ``storage_options``: those of the fsspec filesystem of a URL.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    StoreError
        ``path`` is not a dsgd_dask model store.
    """
    node = open_store_group(path, storage_options, "MODEL")
    attrs = dict(node.attrs)
    meta = attrs.pop(_META, None)
    if not isinstance(meta, dict) or meta.get("kind") != "model":
        kind = meta.get("kind") if isinstance(meta, dict) else None
        why = f"it is a {kind!r} store" if kind else f"it has no {_META!r} metadata (is it a data store?)"
        raise StoreError(f"{path} is not a dsgd_dask model store: {why}")
    return attrs, meta
