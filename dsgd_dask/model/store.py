"""Zarr groups for models and checkpoints: written atomically, verified on read.

A store is a Zarr v3 group whose attributes carry a ``dsgd_dask`` entry: the kind of
store (``"model"`` or ``"checkpoint"``), the format version, a SHA-256 digest, shape and
dtype for each array, and a SHA-256 digest of every attribute (:func:`attributes_digest`).
It is written into a hidden sibling directory and renamed into place, so a crash never
leaves a half-written store under the final name; a store whose arrays or attributes do
not match their digests (truncated, edited, partly deleted) is refused.

The renames make the writes atomic only on a local (or POSIX network) filesystem: paths
are ``str`` or :class:`os.PathLike`, or ``file://`` URLs. Any other fsspec URL
(``s3://``, ``gs://``, ``memory://``...) is written with a commit record instead, when
``storage_options`` (a dict for the filesystem, ``{}`` for its defaults) is given, and
refused with a ``ValueError`` without it (:func:`store_location`).

**Object stores.** An object store has no rename, but replaces one object at once. A
store at ``URL`` is written as a fresh version, ``URL/v-<uuid>/`` (the Zarr group: every
array, then the attributes), and committed by one write of the commit record
``URL/commit.json`` last: the version's name, the kind and format version, the digest of
the attributes and the digest, shape and dtype of every array. A reader follows the
commit record and refuses a store without one, a version that does not match it, or one
whose arrays or attributes do not match their digests. Until the new commit record lands,
the previous one names the previous version, which stays readable; the previous version
is deleted after the commit. A save that fails deletes its version; one that is killed
leaves a version that no commit record names (so nothing new loads, and the previous
model is untouched), removed by the next write to the same URL when its writer (recorded
in ``v-<uuid>/writer.json``) is a process of this host that is no longer running.

**Concurrent readers.** Replacing a store takes two renames (the old store aside, the new
one into place), between which nothing is at the path, and a reader that started on the
old store may find its files gone or mixed with the new store's (the digests then do not
match). :func:`read_store` reads again, for up to :data:`READ_RETRY_SECONDS`, when its
read failed while the store at the path changed or a writer of the path is running; so
a reader on a local filesystem gets the old store or the new one. A store that is
damaged while no writer is running is refused at once.

**Temporary directories.** The hidden sibling ``.NAME.tmp-<uuid>`` holds the store being
written (``.NAME.tmp-<uuid>/NAME``) and a record of its writer (``writer.json``: process
id, host name and, on Linux, the process start time). A writer killed before it finished
(``SIGKILL``, a power cut) leaves the directory behind; the next write to the same path
removes every such directory whose writer is a process of this host that is no longer
running, and says so with a :class:`StaleTemporaryWarning`. Directories of running
writers, of writers on other hosts, and without a readable record are left alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import sys
import time
import uuid
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import numpy as np

#: Format 3 added the digest of the attributes (``attributes_sha256``).
FORMAT_VERSION = 3
_META = "dsgd_dask"
_ATTRIBUTES_DIGEST = "attributes_sha256"
#: The record of a writer in its temporary directory.
_WRITER = "writer.json"
#: How long :func:`read_store` reads again a store that a running writer is replacing.
READ_RETRY_SECONDS = 2.0


class StoreError(ValueError):
    """A model or checkpoint store that cannot be read as such."""


class StaleTemporaryWarning(UserWarning):
    """A write removed temporary directories left by writers of the same path that died."""


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
    return (f"{what}={text!r} is a URL with protocol {protocol!r}: without storage_options, models and checkpoints "
            "are written atomically into a temporary directory renamed into place, which is only guaranteed on a "
            "local filesystem. Pass a local path (str or os.PathLike) or a file:// URL, or pass storage_options "
            "(a dict of options for the filesystem of the URL, {} for its defaults) to write the store on the "
            "object store under a commit record.")


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


def attributes_digest(attrs: dict) -> str:
    """The SHA-256 digest of a store's attributes, stored as ``attributes_sha256`` in its format entry.

    The digest is taken over the canonical JSON (sorted keys, no spaces, ASCII) of every
    attribute, the ``dsgd_dask`` format entry included, except the digest itself.

    Parameters
    ----------
    attrs : dict
        The group attributes as read from the store (JSON values).

    Returns
    -------
    str
        Hexadecimal digest.
    """
    doc = dict(attrs)
    if isinstance(doc.get(_META), dict):
        doc[_META] = {k: v for k, v in doc[_META].items() if k != _ATTRIBUTES_DIGEST}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


@contextmanager
def atomic_directory(path, overwrite: bool = False, what: str = "path"):
    """Yield ``(tmp, path)``: a directory to fill, in a hidden temporary sibling, renamed into place at the end.

    ``tmp`` (``.NAME.tmp-<uuid>/NAME``) does not exist yet: the caller creates it. On
    success ``tmp`` is synced to disk and renamed to ``path`` (an existing store there is
    replaced only when ``overwrite``); on any error, ``KeyboardInterrupt`` included, the
    temporary directory is removed and ``path`` is left as it was. Before writing, the
    temporary directories that killed writers left next to ``path`` are removed, with a
    :class:`StaleTemporaryWarning`.

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
    _remove_stale_temporaries(path)
    work = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex}"
    tmp = work / path.name
    work.mkdir()
    try:
        (work / _WRITER).write_text(json.dumps(_writer_record()))
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
        shutil.rmtree(work, ignore_errors=True)


# -- writers of a path: who is writing, who died ----------------------------------------------------

def _start_time(pid: int):
    """The start time of process ``pid`` (clock ticks after boot) and whether it is a zombie; ``None`` off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]), fields[0] == b"Z"


def _writer_record() -> dict:
    started = _start_time(os.getpid())
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": started and started[0]}


def _writer_state(work: Path) -> str:
    """``"running"``, ``"dead"`` or ``"unknown"`` (no readable record, another host, no way to tell)."""
    try:
        record = json.loads((work / _WRITER).read_text())
    except (OSError, ValueError):
        return "unknown"
    return _record_state(record)


def _record_state(record) -> str:
    """The state of the writer of a record of :func:`_writer_record` (as :func:`_writer_state`)."""
    try:
        pid, host, started = int(record["pid"]), record["host"], record.get("started")
    except (ValueError, TypeError, KeyError, AttributeError):
        return "unknown"
    if host != socket.gethostname() or pid <= 0 or sys.platform == "win32":  # os.kill(pid, 0) is no probe on Windows
        return "unknown"
    if pid == os.getpid():
        return "running"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except OSError:  # another user's process: it exists
        pass
    now = _start_time(pid)
    if now is not None and (now[1] or (started is not None and now[0] != started)):
        return "dead"  # a zombie, or another process that took the pid
    return "running"


def _temporaries(path: Path) -> list[Path]:
    return [p for p in path.parent.glob(f".{path.name}.tmp-*") if p.is_dir()]


def _writer_running(path: Path) -> bool:
    """Whether a writer of ``path`` is running (or may be: on another host)."""
    return any(_writer_state(work) != "dead" and (work / _WRITER).exists() for work in _temporaries(path))


def _remove_stale_temporaries(path: Path) -> None:
    removed = []
    for work in _temporaries(path):
        if _writer_state(work) == "dead":
            shutil.rmtree(work, ignore_errors=True)
            removed.append(work.name)
    if removed:
        warnings.warn(f"removed {len(removed)} temporary director{'y' if len(removed) == 1 else 'ies'} next to "
                      f"{path} left by writers that are no longer running (killed before they finished): "
                      f"{', '.join(sorted(removed))}", StaleTemporaryWarning, stacklevel=4)


def write_store(path, kind: str, attrs: dict, arrays: dict[str, np.ndarray], overwrite: bool = False,
                storage_options: dict | None = None):
    """Write a store atomically: a complete new store under ``path``, or nothing.

    Parameters
    ----------
    path : str, os.PathLike, URL or RemoteLocation
        Directory of the Zarr group on a local filesystem (``str``, ``os.PathLike`` or
        ``file://`` URL), or an fsspec URL (``s3://``, ``gs://``, ``memory://``...) with
        ``storage_options``, written under a commit record.
    kind : str
        ``"model"`` or ``"checkpoint"``.
    attrs : dict
        JSON-serialisable attributes (numpy scalars and arrays are converted); their
        digest is stored with them (:func:`attributes_digest`).
    arrays : dict of str to ndarray
        Arrays to store, each verified by digest on read.
    overwrite : bool
        Replace an existing store; otherwise an existing ``path`` is an error.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL (e.g. ``endpoint_url``, ``key``,
        ``secret`` for ``s3://``); ignored for local paths.

    Returns
    -------
    Path or RemoteLocation
        Where the store was written.

    Raises
    ------
    ValueError
        ``path`` is a URL of another protocol than ``file://`` and ``storage_options`` is
        not given (:func:`store_location`).
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    """
    location = store_location(path, storage_options)
    if isinstance(location, RemoteLocation):
        return _write_remote(location, kind, attrs, arrays, overwrite)
    with atomic_directory(location, overwrite) as (tmp, path):
        _write_group(str(tmp), {}, kind, attrs, arrays)
    return path


def _write_group(url: str, storage_options: dict, kind: str, attrs: dict, arrays: dict, opened=None) -> dict:
    """Write the arrays, then the attributes with their format entry, into a new group; return the entry.

    ``opened()``, when given, is called once the group exists (opening it in mode ``"w"``
    clears its prefix).
    """
    import zarr

    group = zarr.open_group(url, mode="w", zarr_format=3, **({"storage_options": storage_options}
                                                                if storage_options else {}))
    if opened is not None:
        opened()
    checks = {}
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        group.create_array(name, data=arr)
        checks[name] = {"sha256": _digest(arr), "shape": list(arr.shape), "dtype": arr.dtype.str}
    meta = {"kind": kind, "format_version": FORMAT_VERSION, "arrays": checks}
    doc = _json_safe({**attrs, _META: meta})
    doc[_META][_ATTRIBUTES_DIGEST] = attributes_digest(doc)
    group.update_attributes(doc)
    return doc[_META]


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


def _identity(path: Path):
    """What changes when a writer renames another directory to ``path`` (``None``: nothing there)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def read_store(path, kind: str, storage_options: dict | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and verify a store written by :func:`write_store`.

    A read that fails while a writer replaces the store (the store at ``path`` changed
    during the read, or a writer of ``path`` is running; on an object store: its commit
    record changed) is made again, for up to :data:`READ_RETRY_SECONDS`: a reader gets
    the old store or the new one.

    Parameters
    ----------
    path : str, os.PathLike, URL or RemoteLocation
        Directory of the Zarr group on a local filesystem, or an fsspec URL with
        ``storage_options`` (a store under a commit record).
    kind : str
        ``"model"`` or ``"checkpoint"``.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL; ignored for local paths.

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
        another format version, is truncated or corrupt, or its attributes were edited; on
        an object store also: it has no valid commit record, or does not match it.
    ValueError
        ``path`` is a URL of another protocol than ``file://`` and ``storage_options`` is
        not given (:func:`store_location`).
    """
    location = store_location(path, storage_options)
    if isinstance(location, RemoteLocation):
        return _read_remote(location, kind)
    path = location
    deadline = time.monotonic() + READ_RETRY_SECONDS
    delay = 0.002
    while True:
        before = _identity(path)
        try:
            return _read_store_once(path, kind)
        except Exception:
            if time.monotonic() >= deadline or (_identity(path) == before and not _writer_running(path)):
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def _read_store_once(path: Path, kind: str) -> tuple[dict, dict[str, np.ndarray]]:
    import zarr

    path = _recover(path)
    try:
        node = zarr.open(str(path), mode="r")
    except Exception as err:
        raise StoreError(f"{path} is not a readable Zarr store ({type(err).__name__}: {err})") from err
    return _verify_node(node, path, kind)[:2]


def _verify_node(node, path, kind: str) -> tuple[dict, dict[str, np.ndarray], dict]:
    """The attributes, arrays and format entry of the store ``node`` (named ``path`` in errors), verified."""
    import zarr

    if not isinstance(node, zarr.Group):
        raise StoreError(f"{path} is a Zarr array, not a dsgd_dask {kind} store (is it a data store?)")
    attrs = dict(node.attrs)
    meta = attrs.get(_META)
    if not isinstance(meta, dict):
        raise StoreError(f"{path} is not a dsgd_dask {kind} store: it has no {_META!r} metadata "
                         "(is it a data store?)")
    again = ("fit the model again and save it" if kind == "model"
             else "delete the checkpoint (the fit starts over)")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StoreError(f"{path} was written in format version {version!r}; this version of dsgd_dask "
                         f"reads version {FORMAT_VERSION}: upgrade dsgd_dask to read it")
    if version < 2:
        # format 1 drew the frequencies with numpy's ziggurat samplers: its seeds give other features now
        raise StoreError(f"{path} was written in format version {version}, whose seeds generate other random "
                         f"features than this version of dsgd_dask (format {FORMAT_VERSION}); {again}")
    if version < FORMAT_VERSION:
        raise StoreError(f"{path} was written in format version {version}, whose attributes (parameters, fitted "
                         f"values) carry no checksum, so an edit of them cannot be detected; this version of "
                         f"dsgd_dask reads format {FORMAT_VERSION}: {again}")
    if meta.get(_ATTRIBUTES_DIGEST) != attributes_digest(attrs):
        raise StoreError(f"{path}: the attributes (parameters, fitted values, format entry) do not match their "
                         f"checksum: the store was edited or corrupted after it was written; {again}")
    del attrs[_META]
    if meta.get("kind") != kind:
        raise StoreError(f"{path} is a dsgd_dask {meta.get('kind')!r} store, not a {kind!r} store")
    arrays = {}
    for name, check in meta.get("arrays", {}).items():
        try:
            arr = np.asarray(node[name][...])
        except Exception as err:
            raise StoreError(f"{path} is truncated or corrupt: array {name!r} cannot be read ({err})") from err
        if list(arr.shape) != check["shape"] or arr.dtype.str != check["dtype"] or _digest(arr) != check["sha256"]:
            raise StoreError(f"{path} is truncated or corrupt: array {name!r} does not match its checksum")
        arrays[name] = arr
    return attrs, arrays, meta


# -- object stores: versions under a commit record --------------------------------------------------

#: The commit record of a store on an object store, written last.
COMMIT_RECORD = "commit.json"
#: The format of the commit record.
COMMIT_FORMAT = 1
_VERSION = re.compile(r"^v-[0-9a-f]{32}$")

_storage_options: ContextVar[dict | None] = ContextVar("dsgd_dask_storage_options", default=None)


def check_storage_options(storage_options, what: str = "storage_options") -> dict | None:
    """``storage_options`` checked: ``None`` or a dict with string keys (a copy)."""
    if storage_options is None:
        return None
    if not isinstance(storage_options, dict) or not all(isinstance(k, str) for k in storage_options):
        raise TypeError(f"{what} must be a dict of options for the fsspec filesystem of a URL (e.g. "
                        f"{{'endpoint_url': ..., 'key': ..., 'secret': ...}} for s3://), or None; got "
                        f"{type(storage_options).__name__}")
    return dict(storage_options)


@contextmanager
def using_storage_options(storage_options):
    """Within the block, paths that are opened or written without options of their own use ``storage_options``.

    The estimators' ``fit``, ``partial_fit``, ``transform`` and ``predict`` take a
    ``storage_options`` keyword that applies to their inputs given as paths and to the
    checkpoint: it is set here for the duration of the call (``None`` leaves the options
    of an enclosing block in force).
    """
    storage_options = check_storage_options(storage_options)
    if storage_options is None:
        yield
        return
    token = _storage_options.set(storage_options)
    try:
        yield
    finally:
        _storage_options.reset(token)


def current_storage_options() -> dict | None:
    """The ``storage_options`` of the enclosing :func:`using_storage_options` block, or ``None``."""
    return _storage_options.get()


class RemoteLocation:
    """A store on an fsspec filesystem other than the local one: its URL and the filesystem's options.

    Parameters
    ----------
    url : str
        The fsspec URL of the store (``s3://bucket/model.zarr``, ``memory://model.zarr``).
    storage_options : dict
        Options of the filesystem (``{}`` for its defaults).
    """

    def __init__(self, url: str, storage_options: dict):
        import fsspec

        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options)
        self.fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        self.root = root.rstrip("/")

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemoteLocation({self.url!r})"  # the options may hold secrets

    def __eq__(self, other) -> bool:
        return isinstance(other, RemoteLocation) and (self.url, self.storage_options) == (
            other.url, other.storage_options)

    def __hash__(self) -> int:
        return hash(self.url)

    def child(self, name: str) -> str:
        """The filesystem path of ``name`` in the store."""
        return f"{self.root}/{name}"

    def child_url(self, name: str) -> str:
        """The URL of ``name`` in the store."""
        return f"{self.url}/{name}"

    def entries(self) -> list[str]:
        """The names directly under the store (``[]`` when there is nothing)."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return sorted({p.rstrip("/").rsplit("/", 1)[-1] for p in found} - {""})

    def commit_bytes(self) -> bytes | None:
        """The commit record as written, or ``None`` when there is none."""
        try:
            return self.fs.cat_file(self.child(COMMIT_RECORD))
        except FileNotFoundError:
            return None

    def state(self) -> str:
        """``"committed"`` (a commit record), ``"empty"`` (nothing, or only versions no record names) or ``"other"``."""
        if self.commit_bytes() is not None:
            return "committed"
        return "other" if any(not _VERSION.match(name) for name in self.entries()) else "empty"


def _url_protocol(path) -> tuple[str, str] | None:
    """``(text, protocol)`` of a URL of another protocol than ``file://``; ``None`` for a local path."""
    protocol = getattr(path, "protocol", None)  # a universal_pathlib UPath and the like
    if isinstance(protocol, tuple | list):
        protocol = protocol[0] if protocol else ""
    if isinstance(path, os.PathLike) and protocol not in (None, "", "file", "local"):
        return str(path), str(protocol)
    if not isinstance(path, str):
        return None
    match = _URL.match(path)
    if match is None or (match.group(1).lower() == "file" and match.group(2) == "://"):
        return None
    return path, match.group(1)


def store_location(path, storage_options=None, what: str = "path"):
    """Where a model or checkpoint store is: a local :class:`~pathlib.Path` or a :class:`RemoteLocation`.

    Parameters
    ----------
    path : str, os.PathLike, URL or RemoteLocation
        A local path or ``file://`` URL (written by a rename into place), or an fsspec URL
        of another protocol (``s3://``, ``gs://``, ``memory://``...), written under a commit
        record.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL. ``None``: those of the enclosing
        :func:`using_storage_options` block, if any, else the filesystem's defaults (for
        ``s3://``, credentials from the environment). Ignored for local paths.
    what : str, default="path"
        Name of the argument, for the error messages.

    Returns
    -------
    Path or RemoteLocation

    Raises
    ------
    ValueError
        A ``file://`` URL naming another host.
    TypeError
        ``path`` is neither a string nor path-like, or ``storage_options`` is not a dict.
    """
    if isinstance(path, RemoteLocation):
        return path
    storage_options = check_storage_options(storage_options)
    if storage_options is None:
        storage_options = current_storage_options()
    remote = _url_protocol(path)
    if remote is None:
        return local_path(path, what)
    text, _ = remote
    return RemoteLocation(text, {} if storage_options is None else storage_options)


def _write_remote(location: RemoteLocation, kind: str, attrs: dict, arrays: dict, overwrite: bool) -> RemoteLocation:
    previous = _committed_version(location)
    if not overwrite and (previous is not None or location.state() == "other"):
        raise FileExistsError(f"{location} exists; pass overwrite=True (--overwrite on the command line) to "
                              "replace it")
    version = f"v-{uuid.uuid4().hex}"
    fs = location.fs
    record = json.dumps(_writer_record()).encode()
    try:
        meta = _write_group(location.child_url(version), location.storage_options, kind, attrs, arrays,
                            lambda: fs.pipe_file(location.child(f"{version}/{_WRITER}"), record))
        commit = {"dsgd_dask_commit": COMMIT_FORMAT, "version": version, "kind": kind,
                  "format_version": meta["format_version"], _ATTRIBUTES_DIGEST: meta[_ATTRIBUTES_DIGEST],
                  "arrays": meta["arrays"]}
        fs.pipe_file(location.child(COMMIT_RECORD), json.dumps(commit, sort_keys=True).encode())
    except BaseException:
        try:
            committed = _committed_version(location) == version  # the record landed, then the reply was lost
        except Exception:
            committed = False
        if not committed and fs.exists(location.child(version)):
            fs.rm(location.child(version), recursive=True)
        raise
    _remove_replaced(location, version, previous)
    return location


def _committed_version(location: RemoteLocation) -> str | None:
    """The version the commit record names, ``None`` without a readable record."""
    blob = location.commit_bytes()
    try:
        version = json.loads(blob)["version"] if blob is not None else None
    except (ValueError, TypeError, KeyError):
        return None
    return version if isinstance(version, str) else None


def _remove_replaced(location: RemoteLocation, current: str, previous: str | None) -> None:
    """After a commit: delete the replaced version, anything else that was at the URL, and dead writers' versions."""
    fs, removed = location.fs, []
    for name in location.entries():
        if name in (current, COMMIT_RECORD):
            continue
        if _VERSION.match(name) and name != previous:
            try:
                record = json.loads(fs.cat_file(location.child(f"{name}/{_WRITER}")))
            except (OSError, ValueError):
                continue  # no record: a writer on its way, or of unknown origin
            if _record_state(record) != "dead":
                continue
            removed.append(name)
        fs.rm(location.child(name), recursive=True)
    if removed:
        warnings.warn(f"removed {len(removed)} version{'' if len(removed) == 1 else 's'} under {location} left by "
                      f"writers that are no longer running (killed before they committed): "
                      f"{', '.join(sorted(removed))}", StaleTemporaryWarning, stacklevel=4)


def _read_remote(location: RemoteLocation, kind: str) -> tuple[dict, dict[str, np.ndarray]]:
    deadline = time.monotonic() + READ_RETRY_SECONDS
    delay = 0.002
    while True:
        before = location.commit_bytes()
        try:
            return _read_remote_once(location, kind, before)
        except Exception:
            if time.monotonic() >= deadline or location.commit_bytes() == before:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def _read_remote_once(location: RemoteLocation, kind: str, blob: bytes | None) -> tuple[dict, dict[str, np.ndarray]]:
    import zarr

    if blob is None:
        if not location.entries():
            raise FileNotFoundError(f"no store at {location}")
        raise StoreError(f"{location} has no commit record ({COMMIT_RECORD}): it is not a dsgd_dask store, or its "
                         "save did not finish; save the model (or start the checkpointed fit) again")
    try:
        commit = json.loads(blob)
        version = commit["version"]
        fields_ok = (commit.get("dsgd_dask_commit") == COMMIT_FORMAT and isinstance(version, str)
                     and _VERSION.match(version) is not None)
    except (ValueError, TypeError, KeyError, AttributeError):
        fields_ok = False
    if not fields_ok:
        raise StoreError(f"{location}: its commit record ({COMMIT_RECORD}) is not valid (edited or corrupted); "
                         "save the model (or start the checkpointed fit) again")
    try:
        node = zarr.open(location.child_url(version), mode="r", storage_options=location.storage_options)
    except Exception as err:
        raise StoreError(f"{location}: the version {version} named by its commit record cannot be read "
                         f"({type(err).__name__}: {err}); the store was damaged after it was written") from err
    attrs, arrays, meta = _verify_node(node, location, kind)
    if any(commit.get(key) != meta.get(key) for key in ("kind", "format_version", _ATTRIBUTES_DIGEST, "arrays")):
        raise StoreError(f"{location}: the version {version} does not match the checksums of its commit record "
                         f"({COMMIT_RECORD}): the store was edited or corrupted after it was written")
    return attrs, arrays


def open_store_group(path, storage_options=None, what: str = "path"):
    """The Zarr group of the store at ``path``, opened read-only without verifying it.

    A local store is the group at ``path``; a store on an object store is the version that
    its commit record names. For a description of the store (its attributes, a few small
    arrays); :func:`read_store` verifies every digest.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    StoreError
        Not a Zarr group; on an object store: no valid commit record.
    """
    import zarr

    location = store_location(path, storage_options, what)
    if isinstance(location, RemoteLocation):
        blob = location.commit_bytes()
        version = _committed_version(location)
        if blob is None and not location.entries():
            raise FileNotFoundError(f"no store at {location}")
        if version is None or not _VERSION.match(version):
            raise StoreError(f"{location} has no valid commit record ({COMMIT_RECORD}): it is not a dsgd_dask "
                             "store, or its save did not finish")
        url, options = location.child_url(version), {"storage_options": location.storage_options}
    else:
        if not location.exists():
            raise FileNotFoundError(f"no Zarr store at {location}")
        url, options = str(location), {}
    try:
        node = zarr.open(url, mode="r", **options)
    except Exception as err:
        raise StoreError(f"{location} is not a readable Zarr store ({type(err).__name__}: {err})") from err
    if not isinstance(node, zarr.Group):
        raise StoreError(f"{location} is a Zarr array, not a dsgd_dask store (is it a data store?)")
    return node
