"""Downloading the datasets from their sources and converting them to the ``.npz`` layout."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from dsgd_dask.datasets._files import CorruptFileError, content_digest, read_verified, write_npz_atomic
from dsgd_dask.datasets._home import get_data_home
from dsgd_dask.datasets._registry import DatasetInfo

#: 1 Bohr in Ångström (CODATA 2010), for the QM7 Coulomb matrices.
BOHR_IN_ANGSTROM = 0.52917721092

_CHUNK = 1 << 20


class DownloadError(OSError):
    """A source file that could not be downloaded (a wrong checksum is a :class:`CorruptFileError`)."""


# -- converters: downloaded source files -> the arrays of <name>.npz ---------------------------

def _read_idx(path: Path) -> np.ndarray:
    """An IDX file of unsigned bytes (gzip-compressed or not), as in the MNIST distribution."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
        data = f.read()
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 0x08:
        raise ValueError(f"{path.name} is not an IDX file of unsigned bytes")
    ndim = data[3]
    start = 4 + 4 * ndim
    shape = struct.unpack(f">{ndim}I", data[4:start])
    if len(data) - start != int(np.prod(shape)):
        raise ValueError(f"{path.name}: the IDX header announces shape {shape} but {len(data) - start} bytes follow")
    return np.frombuffer(data, dtype=np.uint8, offset=start).reshape(shape).copy()


def convert_mnist(files: Mapping[str, Path]) -> dict[str, np.ndarray]:
    """The four IDX files of MNIST → ``X_train (n, 28, 28) uint8``, ``y_train``, ``X_test``, ``y_test``."""
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        X = _read_idx(files[f"{prefix}-images-idx3-ubyte.gz"])
        y = _read_idx(files[f"{prefix}-labels-idx1-ubyte.gz"])
        if X.ndim != 3 or X.shape[1:] != (28, 28) or y.ndim != 1 or len(y) != len(X):
            raise ValueError(f"MNIST {split}: images {X.shape} and labels {y.shape} do not fit together")
        out[f"X_{split}"], out[f"y_{split}"] = X, y
    return out


def _read_esl_digits(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """ESL's ``zip.train``/``zip.test`` text: per line a label and 256 grey values in [-1, 1]."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        table = np.loadtxt(f, dtype=np.float64, ndmin=2)
    if table.shape[1] != 257:
        raise ValueError(f"{path.name}: expected 257 columns (label + 16x16 pixels), found {table.shape[1]}")
    labels = table[:, 0]
    if not np.array_equal(labels, np.round(labels)) or labels.min() < 0 or labels.max() > 9:
        raise ValueError(f"{path.name}: the labels are not digits 0..9")
    # float32 arithmetic, (v + 1) / 2: the grey levels of the reference file, bit for bit
    X = (table[:, 1:].astype(np.float32) + np.float32(1.0)) / np.float32(2.0)
    return np.ascontiguousarray(X.reshape(-1, 16, 16)), labels.astype(np.uint8)


def convert_usps(files: Mapping[str, Path]) -> dict[str, np.ndarray]:
    """ESL's ``zip.train.gz``/``zip.test.gz`` → ``X_* (n, 16, 16) float32`` in [0, 1], ``y_* uint8``."""
    X_train, y_train = _read_esl_digits(files["zip.train.gz"])
    X_test, y_test = _read_esl_digits(files["zip.test.gz"])
    return {"X_train": X_train, "y_train": y_train, "X_test": X_test, "y_test": y_test}


def convert_sarcos(files: Mapping[str, Path]) -> dict[str, np.ndarray]:
    """GPML's ``sarcos_inv_test.mat`` (4449 x 28) → ``X`` = columns 0..20, ``y`` = columns 21..27, float64."""
    from scipy.io import loadmat

    table = loadmat(files["sarcos_inv_test.mat"])["sarcos_inv_test"]
    if table.ndim != 2 or table.shape[1] != 28:
        raise ValueError(f"sarcos_inv_test.mat: expected 28 columns, found shape {table.shape}")
    table = np.asarray(table, dtype=np.float64)
    return {"X": np.ascontiguousarray(table[:, :21]), "y": np.ascontiguousarray(table[:, 21:])}


def _read_libsvm(path: Path) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=123, zero_based=False)
    X = X.toarray()
    if not np.isin(X, (0.0, 1.0)).all() or not np.isin(y, (-1.0, 1.0)).all():
        raise ValueError(f"{path.name}: expected 0/1 features and labels -1/+1")
    return X.astype(np.uint8), y.astype(np.int8)


def convert_a9a(files: Mapping[str, Path]) -> dict[str, np.ndarray]:
    """LIBSVM's ``a9a``/``a9a.t`` → dense ``X_* (n, 123) uint8`` (feature j in column j-1), ``y_* int8 ±1``."""
    X_train, y_train = _read_libsvm(files["a9a"])
    X_test, y_test = _read_libsvm(files["a9a.t"])
    return {"X_train": X_train, "y_train": y_train, "X_test": X_test, "y_test": y_test}


def coulomb_matrices(Z: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Coulomb matrices (Rupp et al. 2012) of padded molecules, in atomic units, float32.

    ``C_ii = 0.5 Z_i^2.4``, ``C_ij = Z_i Z_j / |R_i - R_j|`` with ``R`` converted from
    Ångström to Bohr; rows and columns of padding atoms (``Z = 0``) are zero. Computed in
    float64 and rounded once; the atoms keep their stored order.

    Parameters
    ----------
    Z : ndarray of shape (n, atoms)
        Nuclear charges, 0 for padding.
    R : ndarray of shape (n, atoms, 3)
        Positions in Ångström.
    """
    Zf = np.asarray(Z, dtype=np.float64)
    Rb = np.asarray(R, dtype=np.float64) / BOHR_IN_ANGSTROM
    dist = np.linalg.norm(Rb[:, :, None, :] - Rb[:, None, :, :], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        C = Zf[:, :, None] * Zf[:, None, :] / dist
    diag = np.arange(Zf.shape[1])
    C[:, diag, diag] = 0.5 * Zf**2.4
    real = Zf > 0
    C = np.where(real[:, :, None] & real[:, None, :], C, 0.0)
    if not np.isfinite(C).all():
        raise ValueError("two atoms of a molecule share a position")
    return C.astype(np.float32)


def convert_qm7(files: Mapping[str, Path]) -> dict[str, np.ndarray]:
    """The QM7 re-export (``positions`` Å, ``energies``, ``charges``) → ``X`` Coulomb matrices, ``y``, ``Z``, ``R``."""
    with np.load(files["qm7.npz"], allow_pickle=False) as f:
        R = np.asarray(f["positions"], dtype=np.float32)
        y = np.asarray(f["energies"], dtype=np.float32)
        charges = f["charges"]
    if charges.min() < 0 or charges.max() > 255:
        raise ValueError("qm7.npz: nuclear charges out of range")
    Z = charges.astype(np.uint8)
    if R.shape != (*Z.shape, 3) or y.shape != Z.shape[:1]:
        raise ValueError(f"qm7.npz: positions {R.shape}, charges {Z.shape} and energies {y.shape} do not fit")
    return {"X": coulomb_matrices(Z, R), "y": y, "Z": Z, "R": R}


CONVERTERS: dict[str, Callable[[Mapping[str, Path]], dict[str, np.ndarray]]] = {
    "mnist": convert_mnist,
    "usps": convert_usps,
    "sarcos": convert_sarcos,
    "a9a": convert_a9a,
    "qm7": convert_qm7,
}


# -- downloading --------------------------------------------------------------------------------

def _download(url: str, dest: Path, checksum: str | None, timeout: float) -> None:
    """Stream ``url`` into ``dest`` and check ``"md5:<hex>"``/``"sha256:<hex>"`` when given."""
    algorithm, expected = checksum.split(":", 1) if checksum else ("sha256", None)
    h = hashlib.new(algorithm)
    request = urllib.request.Request(url, headers={"User-Agent": "dsgd_dask"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as f:
            while block := response.read(_CHUNK):
                h.update(block)
                f.write(block)
    except (urllib.error.URLError, OSError) as err:
        raise DownloadError(f"could not download {url}: {err}") from err
    if expected is not None and h.hexdigest() != expected.lower():
        raise CorruptFileError(f"the file downloaded from {url} has {algorithm.upper()} {h.hexdigest()}, expected "
                            f"{expected}: the download is damaged or the source has changed")


def fetch(name: str, *, data_home=None, base_url: str | None = None, checksums: Mapping[str, str | None] | None = None,
          digest: str | None = None, force: bool = False, timeout: float = 60.0) -> Path:
    """Download a dataset from its original source into the data home.

    The source files are downloaded into a temporary folder inside the data home, each
    checked against its published checksum where one is known, converted into the
    layout of ``<name>.npz`` (see :func:`dsgd_dask.datasets.load_mnist` and the other
    loaders), checked against the content digest of the reference file, and written
    atomically. On any failure nothing is left in the data home (no partial file, no
    downloaded sources). A file already present that verifies is kept; a corrupt one is
    replaced.

    Parameters
    ----------
    name : {"mnist", "usps", "sarcos", "a9a", "qm7"}
        The dataset.
    data_home : str or Path, optional
        Where to write; default :func:`get_data_home` (``$DSGD_DATA_DIR``, else
        ``~/dsgd_dask_data``). Created if needed.
    base_url : str, optional
        Fetch the source files, under their usual names, from this URL prefix instead
        (a mirror, or a ``file://`` folder).
    checksums : mapping of str to str or None, optional
        Checksums of source files (``"md5:<hex>"`` or ``"sha256:<hex>"``, None for no
        check) replacing the published ones, by file name.
    digest : str, optional
        Expected content digest of the converted arrays; default that of the reference
        file. Needed only for other data in the same format (e.g. a test mirror).
    force : bool
        Download even when a verified file is present.
    timeout : float
        Seconds to wait for a server.

    Returns
    -------
    Path
        The verified file ``<data_home>/<file name>``.

    Raises
    ------
    ValueError
        Unknown ``name``; a downloaded source file that does not match its checksum,
        cannot be converted, or converts to arrays that do not match the digest.
    OSError
        A download that failed (no network, unknown URL, ...).

    Examples
    --------
    >>> fetch("mnist")                                  # doctest: +SKIP
    PosixPath('/home/me/dsgd_dask_data/mnist.npz')
    """
    from dsgd_dask.datasets._home import dataset_info

    info: DatasetInfo = dataset_info(name)
    expected = info.digest if digest is None else digest
    home = get_data_home(data_home)
    target = home / info.filename
    if target.exists() and not force:
        try:
            read_verified(target, expected)
            return target
        except CorruptFileError:
            pass  # replaced below
    unknown = set(checksums or ()) - {s.filename for s in info.sources}
    if unknown:
        raise ValueError(f"checksums given for files {sorted(unknown)} that are not sources of {name}; its sources "
                         f"are {[s.filename for s in info.sources]}")
    created = [p for p in (home, *home.parents) if not p.exists()]
    home.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=home, prefix=f".{info.name}-download-"))
    try:
        base = (base_url or info.base_url).rstrip("/") + "/"
        files = {}
        for source in info.sources:
            checksum = source.checksum if checksums is None or source.filename not in checksums \
                else checksums[source.filename]
            files[source.filename] = work / source.filename
            _download(base + source.filename, files[source.filename], checksum, timeout)
        try:
            arrays = CONVERTERS[info.name](files)
        except (ValueError, KeyError, OSError, EOFError) as err:
            raise CorruptFileError(f"the files downloaded for {name} from {base} could not be converted: {err}") \
                from err
        found = content_digest(arrays)
        if found != expected:
            raise CorruptFileError(f"the {name} data downloaded from {base} converts to arrays with content digest "
                                   f"{found}, expected {expected}; nothing was written")
        write_npz_atomic(target, arrays, expected)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        for folder in created:  # deepest first: remove the folders made here if they stayed empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    shutil.rmtree(work, ignore_errors=True)
    return target
