"""Reading and writing the dataset files: content digests, verified reads, atomic writes.

A dataset file is a ``.npz`` archive of plain numpy arrays. It is identified by the
*content digest* of its arrays (:func:`content_digest`), not by the bytes of the
archive, so a file re-compressed or re-written by another numpy still verifies, while
any change to a value, a dtype, a shape or the set of arrays does not.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
from numpy.lib.npyio import NpzFile

#: (resolved path, mtime in ns, size, expected digest) of the files verified in this process.
_VERIFIED: set[tuple[str, int, int, str]] = set()
_LOCK = threading.Lock()


class CorruptFileError(ValueError):
    """A dataset file that cannot be read, or whose content digest is not the expected one."""


def content_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of a set of named arrays, independent of how they are stored.

    The hash runs over the arrays in sorted name order; for each it takes the name, the
    dtype string (e.g. ``'|u1'``, ``'<f4'``), the shape and the array's bytes in C order.

    Parameters
    ----------
    arrays : mapping of str to ndarray
        The arrays, e.g. the contents of an ``.npz`` file.

    Returns
    -------
    str
        64 hexadecimal digits.

    Examples
    --------
    >>> import numpy as np
    >>> content_digest({"x": np.zeros(3, np.uint8)})[:16]
    'b53bdd88c6b23c94'
    """
    h = hashlib.sha256()
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        if arr.dtype.hasobject:
            raise TypeError(f"array {name!r} holds Python objects; only plain numeric arrays have a digest")
        h.update(f"{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        h.update(memoryview(arr.reshape(-1)).cast("B"))
    return h.hexdigest()


def file_checksum(path, algorithm: str = "sha256") -> str:
    """Hex digest (``"md5"``, ``"sha256"``, ...) of the bytes of a file."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stat_key(path: Path, digest: str) -> tuple[str, int, int, str]:
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size, digest)


def _read_npz(path: Path, names: Iterable[str] | None) -> dict[str, np.ndarray]:
    """The arrays ``names`` (all when None) of an npz file; unreadable → CorruptFileError(reason)."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, NpzFile):
            raise CorruptFileError("it is a single .npy array, not an .npz archive")
        with loaded as f:
            wanted = list(f.files) if names is None else list(names)
            missing = [n for n in wanted if n not in f.files]
            if missing:
                raise CorruptFileError(f"it has no array {', '.join(map(repr, missing))} "
                                       f"(it holds {', '.join(f.files) or 'nothing'})")
            return {n: f[n] for n in wanted}
    except CorruptFileError:
        raise
    except (PermissionError, IsADirectoryError):
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, KeyError, OSError) as err:
        raise CorruptFileError(f"it is not a readable .npz archive ({type(err).__name__}: {err})") from err


def read_verified(path, digest: str, names: Iterable[str] | None = None, *, required: Iterable[str] = (),
                  advice: str = "") -> dict[str, np.ndarray]:
    """Read arrays from an npz file whose content digest must equal ``digest``.

    The first read of a file in a process hashes all its arrays; later reads of the
    same file (same path, modification time and size) only load the arrays asked for.

    Parameters
    ----------
    path : str or Path
        The ``.npz`` file.
    digest : str
        Expected :func:`content_digest` of all the arrays in the file.
    names : iterable of str, optional
        Arrays to return; default all.
    required : iterable of str
        Arrays the file must hold (a missing one is reported as such rather than as a
        wrong digest).
    advice : str
        What to do about a corrupt file, appended to the error message.

    Returns
    -------
    dict of str to ndarray

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        (:class:`CorruptFileError`) the file is not a readable npz archive, lacks an
        array, or its digest differs.
    """
    path = Path(path)
    names = None if names is None else tuple(names)
    key = _stat_key(path, digest)  # FileNotFoundError when missing
    with _LOCK:
        known = key in _VERIFIED
    try:
        if known:
            return _read_npz(path, names)
        arrays = _read_npz(path, None)
        missing = [n for n in (*required, *(names or ())) if n not in arrays]
        if missing:
            raise CorruptFileError(f"it has no array {', '.join(map(repr, dict.fromkeys(missing)))} "
                                   f"(it holds {', '.join(arrays) or 'nothing'})")
        found = content_digest(arrays)
        if found != digest:
            raise CorruptFileError(f"the content digest of its arrays is {found}, expected {digest}")
    except CorruptFileError as err:
        message = f"{path} is corrupt: {err}."
        raise CorruptFileError(f"{message} {advice}" if advice else message) from err.__cause__
    with _LOCK:
        _VERIFIED.add(key)
    return arrays if names is None else {n: arrays[n] for n in names}


def write_npz_atomic(path, arrays: Mapping[str, np.ndarray], digest: str | None = None) -> Path:
    """Write ``arrays`` compressed to ``path``: the complete verified file, or nothing.

    The archive is written to a temporary file in the same folder, read back and checked
    against ``digest`` (when given), flushed to disk and renamed over ``path``.
    """
    path = Path(path)
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    found = content_digest(arrays)
    if digest is not None and found != digest:
        raise CorruptFileError(f"the arrays for {path.name} have content digest {found}, expected {digest}; "
                               "nothing was written")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes it private; a data file is readable by all
            np.savez_compressed(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        if content_digest(_read_npz(Path(tmp), None)) != found:
            raise CorruptFileError(f"{tmp} did not read back as written; nothing was written")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if digest is not None:
        with _LOCK:
            _VERIFIED.add(_stat_key(path, digest))
    return path
