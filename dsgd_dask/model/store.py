"""Zarr groups for models and checkpoints: written atomically, verified on read.

A store is a Zarr v3 group whose attributes carry a ``dsgd_dask`` entry: the kind of
store (``"model"`` or ``"checkpoint"``), the format version, and a SHA-256 digest, shape
and dtype for each array. It is written into a hidden sibling directory and renamed into
place, so a crash never leaves a half-written store under the final name; a store whose
arrays do not match their digests (truncated, edited, partly deleted) is refused.

The renames make the writes atomic only on a local (or POSIX network) filesystem: paths
are ``str`` or :class:`os.PathLike`, or ``file://`` URLs; any other URL (``s3://``,
``gs://``, ``memory://``...) is refused with a ``ValueError`` (:func:`local_path`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import numpy as np

FORMAT_VERSION = 2
_META = "dsgd_dask"


class StoreError(ValueError):
    """A model or checkpoint store that cannot be read as such."""


#: A URL's protocol: ``s3://``, ``memory://``, ``file://``, or fsspec's chained ``simplecache::s3://``.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*(?:::[A-Za-z][A-Za-z0-9+.\-]*)*)(://|::)")


def local_path(path, what: str = "path") -> Path:
    """``path`` as a local :class:`~pathlib.Path`; a URL with another protocol than ``file://`` is refused.

    Parameters
    ----------
    path : str, os.PathLike or file:// URL
        Where a model or checkpoint store is written or read.
    what : str, default="path"
        Name of the argument, for the error message.

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        ``path`` is a URL of another protocol (``s3://``, ``gs://``, ``memory://``...),
        where the atomic write (a rename into place) is not guaranteed.
    TypeError
        ``path`` is neither a string nor path-like.
    """
    protocol = getattr(path, "protocol", None)  # a universal_pathlib UPath and the like
    if isinstance(protocol, tuple | list):
        protocol = protocol[0] if protocol else ""
    if isinstance(path, os.PathLike) and protocol not in (None, "", "file", "local"):
        raise ValueError(_remote_message(what, str(path), str(protocol)))
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{what} must be a str or os.PathLike, got {type(path).__name__}")
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if isinstance(path, os.PathLike) and protocol in (None, ""):
        return Path(text)
    match = _URL.match(text)
    if match is None:
        return Path(text)
    protocol = match.group(1)
    if protocol.lower() != "file" or match.group(2) != "://":
        raise ValueError(_remote_message(what, text, protocol))
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{what}={text!r} names the host {parts.netloc!r}; a file:// URL must be local "
                         "(file:///absolute/path)")
    return Path(url2pathname(unquote(parts.path)))


def _remote_message(what: str, text: str, protocol: str) -> str:
    return (f"{what}={text!r} is a URL with protocol {protocol!r}: models and checkpoints are written "
            "atomically (into a temporary directory renamed into place), which is only guaranteed on a local "
            "filesystem. Pass a local path (str or os.PathLike) or a file:// URL, and copy the store to remote "
            "storage afterwards.")


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _json_safe(value):
    """Round-trip ``value`` through JSON, turning numpy scalars and arrays into lists."""

    def default(obj):
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
        raise TypeError(f"cannot store {type(obj).__name__} in the attributes")

    return json.loads(json.dumps(value, default=default))


@contextmanager
def atomic_directory(path, overwrite: bool = False, what: str = "path"):
    """Yield ``(tmp, path)``: a hidden temporary sibling to fill, renamed into place at the end.

    On success ``tmp`` is synced to disk and renamed to ``path`` (an existing store there
    is replaced only when ``overwrite``); on any error, ``KeyboardInterrupt`` included,
    ``tmp`` is removed and ``path`` is left as it was.

    Raises
    ------
    ValueError
        ``path`` is a URL of another protocol than ``file://`` (:func:`local_path`).
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    """
    path = local_path(path, what)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite on the command line) to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex}"
    try:
        yield tmp, path
        _fsync_tree(tmp)
        if path.exists():
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex}"
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
        else:
            os.rename(tmp, path)
        for stale in path.parent.glob(f".{path.name}.old-*"):  # left by a crash between the renames
            shutil.rmtree(stale, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_store(path, kind: str, attrs: dict, arrays: dict[str, np.ndarray], overwrite: bool = False) -> Path:
    """Write a store atomically: a complete new store under ``path``, or nothing.

    Parameters
    ----------
    path : str, os.PathLike or file:// URL
        Directory of the Zarr group, on a local filesystem.
    kind : str
        ``"model"`` or ``"checkpoint"``.
    attrs : dict
        JSON-serialisable attributes (numpy scalars and arrays are converted).
    arrays : dict of str to ndarray
        Arrays to store, each verified by digest on read.
    overwrite : bool
        Replace an existing store; otherwise an existing ``path`` is an error.

    Raises
    ------
    ValueError
        ``path`` is a URL of another protocol than ``file://`` (:func:`local_path`).
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    """
    import zarr

    with atomic_directory(path, overwrite) as (tmp, path):
        group = zarr.open_group(str(tmp), mode="w")
        checks = {}
        for name, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            group.create_array(name, data=arr)
            checks[name] = {"sha256": _digest(arr), "shape": list(arr.shape), "dtype": arr.dtype.str}
        meta = {"kind": kind, "format_version": FORMAT_VERSION, "arrays": checks}
        group.attrs.update(_json_safe({**attrs, _META: meta}))
    return path


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _recover(path: Path) -> Path:
    """The store at ``path``, or the replaced one if a crash hit between the two renames."""
    if path.exists():
        return path
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    if olds:
        return olds[0]
    raise FileNotFoundError(f"no store at {path}")


def read_store(path, kind: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and verify a store written by :func:`write_store`.

    Parameters
    ----------
    path : str, os.PathLike or file:// URL
        Directory of the Zarr group, on a local filesystem.
    kind : str
        ``"model"`` or ``"checkpoint"``.

    Returns
    -------
    attrs : dict
        The attributes (without the format entry).
    arrays : dict of str to ndarray

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    StoreError
        ``path`` is not a dsgd_dask store of this kind (e.g. a data store), was written in
        another format version, or is truncated or corrupt.
    ValueError
        ``path`` is a URL of another protocol than ``file://`` (:func:`local_path`).
    """
    import zarr

    path = _recover(local_path(path))
    try:
        node = zarr.open(str(path), mode="r")
    except Exception as err:
        raise StoreError(f"{path} is not a readable Zarr store ({type(err).__name__}: {err})") from err
    if not isinstance(node, zarr.Group):
        raise StoreError(f"{path} is a Zarr array, not a dsgd_dask {kind} store (is it a data store?)")
    attrs = dict(node.attrs)
    meta = attrs.pop(_META, None)
    if not isinstance(meta, dict):
        raise StoreError(f"{path} is not a dsgd_dask {kind} store: it has no {_META!r} metadata "
                         "(is it a data store?)")
    if meta.get("kind") != kind:
        raise StoreError(f"{path} is a dsgd_dask {meta.get('kind')!r} store, not a {kind!r} store")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StoreError(f"{path} was written in format version {version!r}; this version of dsgd_dask "
                         f"reads version {FORMAT_VERSION}: upgrade dsgd_dask to read it")
    if version < FORMAT_VERSION:
        # format 1 drew the frequencies with numpy's ziggurat samplers: its seeds give other features now
        raise StoreError(f"{path} was written in format version {version}, whose seeds generate other random "
                         f"features than this version of dsgd_dask (format {FORMAT_VERSION}); fit the model again")
    arrays = {}
    for name, check in meta.get("arrays", {}).items():
        try:
            arr = np.asarray(node[name][...])
        except Exception as err:
            raise StoreError(f"{path} is truncated or corrupt: array {name!r} cannot be read ({err})") from err
        if list(arr.shape) != check["shape"] or arr.dtype.str != check["dtype"] or _digest(arr) != check["sha256"]:
            raise StoreError(f"{path} is truncated or corrupt: array {name!r} does not match its checksum")
        arrays[name] = arr
    return attrs, arrays
