"""The loaders: ``load_mnist``, ``load_usps``, ``load_sarcos``, ``load_a9a``, ``load_qm7``."""

from __future__ import annotations

import os
from pathlib import Path

from dsgd_dask.datasets._fetch import fetch as _fetch
from dsgd_dask.datasets._files import read_verified
from dsgd_dask.datasets._home import ENV_VAR, SAMPLE_DIR, dataset_info, get_data_home, search_dirs
from dsgd_dask.datasets._registry import DatasetInfo


def _sample_rows(info: DatasetInfo) -> str:
    if "X_train" in info.sample_rows:
        return (f"the first {info.sample_rows['X_train']} of {info.rows['X_train']} training and "
                f"{info.sample_rows['X_test']} of {info.rows['X_test']} test rows")
    return f"the first {info.sample_rows['X']} of {info.rows['X']} rows"


def find_file(name: str, data_home=None) -> Path:
    """Path of the full file of dataset ``name`` in the folders searched (see :func:`search_dirs`).

    Raises
    ------
    FileNotFoundError
        The file is in none of them; the message says where it was looked for and how
        to get it.
    """
    info = dataset_info(name)
    dirs = search_dirs(data_home)
    for folder in dirs:
        path = folder / info.filename
        if path.is_file():
            return path
    loader = f"load_{info.name}"
    env = os.environ.get(ENV_VAR)
    home = get_data_home(data_home)
    searched = str(home) + (f" (nor in {', '.join(map(str, dirs[1:]))})" if len(dirs) > 1 else "")
    call = f"data_home={str(home)!r}, " if data_home is not None else ""
    if data_home is not None:
        chosen = "given by the data_home argument"
    elif env:
        chosen = f"given by ${ENV_VAR}={env!r}, the only folder searched when it is set"
    else:
        chosen = f"the default, as ${ENV_VAR} is not set"
    raise FileNotFoundError(
        f"{info.filename} ({info.title}) was not found in the data home {searched}; the data home is {chosen} "
        f"(lookup: the data_home argument, else ${ENV_VAR}, else ~/dsgd_dask_data). To get it, do one of: "
        f"download and convert it with {loader}({call}fetch=True) or "
        f"dsgd_dask.datasets.fetch({info.name!r}{', ' + call[:-2] if call else ''}), "
        f"which writes {home / info.filename}; copy an existing {info.filename} into {home}; or use "
        f"{loader}(sample=True) for the subset shipped with dsgd_dask ({_sample_rows(info)}).")


def _load(name: str, subset: str, data_home, sample: bool, fetch: bool, as_dataset: bool):
    info = dataset_info(name)
    if subset not in info.subsets:
        raise ValueError(f"subset must be one of {', '.join(map(repr, info.subsets))} for {name}, got {subset!r}")
    if sample and fetch:
        raise ValueError("sample=True reads the subset shipped with dsgd_dask and fetch=True downloads the full "
                         "dataset: give one of them")
    if sample:
        path, digest = SAMPLE_DIR / info.sample_filename, info.sample_digest
        advice = ("The subset shipped with dsgd_dask is damaged: reinstall dsgd_dask, or regenerate it with "
                  "dsgd_dask/datasets/data/make_samples.py.")
        if not path.is_file():
            raise FileNotFoundError(f"{path}, the {name} subset shipped with dsgd_dask, is missing: reinstall "
                                    "dsgd_dask (the .npz files under dsgd_dask/datasets/data/ are package data)")
    else:
        try:
            path = find_file(name, data_home)
        except FileNotFoundError:
            if not fetch:
                raise
            path = _fetch(name, data_home=data_home)
        digest = info.digest
        advice = (f"Delete it and fetch it again with dsgd_dask.datasets.fetch({name!r}) "
                  f"(or load_{name}(fetch=True) once it is deleted), or copy a good {info.filename} there.")
    x_name, y_name = info.subsets[subset]
    names = (x_name, y_name, *(info.extra if as_dataset else ()))
    arrays = read_verified(path, digest, names, required=info.arrays, advice=advice)
    X = arrays[x_name]
    X = X.reshape(len(X), -1)
    y = arrays[y_name]
    if not as_dataset:
        return X, y
    import xarray as xr

    data_vars = {"X": (("sample", "feature"), X),
                 "y": (("sample",) if y.ndim == 1 else ("sample", "output"), y)}
    if info.name == "qm7":
        data_vars["Z"] = (("sample", "atom"), arrays["Z"])
        data_vars["R"] = (("sample", "atom", "xyz"), arrays["R"])
    rows = f"shipped sample: {_sample_rows(info)}" if sample else "full dataset"
    attrs = {"dataset": info.name, "title": info.title, "subset": subset, "rows": rows,
             "citation": info.citation, "license": info.license, "source_file": str(path),
             "content_digest": digest}
    return xr.Dataset(data_vars, attrs=attrs)


def load_mnist(subset: str = "train", *, data_home=None, sample: bool = False, fetch: bool = False,
               as_dataset: bool = False):
    """MNIST handwritten digits: 60,000 training and 10,000 test images of 28x28 pixels.

    Parameters
    ----------
    subset : {"train", "test"}
        The split.
    data_home : str or Path, optional
        Folder of the full file; default ``$DSGD_DATA_DIR`` when set (and only it), else
        ``~/dsgd_dask_data`` (and, in a source checkout, ``../shared/datasets`` beside it).
    sample : bool
        Read the real subset shipped with the package instead (the first 5000 training and
        2000 test images, in their original order); needs no data home.
    fetch : bool
        Download and convert the full dataset into the data home when it is not found
        there (see :func:`fetch`).
    as_dataset : bool
        Return an :class:`xarray.Dataset` instead of arrays: ``X`` with dims
        ``("sample", "feature")``, ``y`` with dims ``("sample",)``, and attributes naming
        the dataset, subset, rows, file, citation and licence.

    Returns
    -------
    X : ndarray of shape (n, 784), uint8
        Pixels 0..255, rows of 28x28 images in row-major order.
    y : ndarray of shape (n,), uint8
        Digits 0..9.

    Raises
    ------
    ValueError
        An unknown ``subset``; a file that is corrupt (not a readable ``.npz``, an
        array missing, or a content digest other than the registered one).
    FileNotFoundError
        The full file is not in the data home (and ``fetch`` is false); the message
        says where it was looked for and how to get it.

    Notes
    -----
    Every file is verified against the content digest of its arrays when it is first
    read in a process.

    Examples
    --------
    >>> from dsgd_dask.datasets import load_mnist
    >>> X, y = load_mnist("test", sample=True)
    >>> X.shape, X.dtype, y[:5]
    ((2000, 784), dtype('uint8'), array([7, 2, 1, 0, 4], dtype=uint8))
    """
    return _load("mnist", subset, data_home, sample, fetch, as_dataset)


def load_usps(subset: str = "train", *, data_home=None, sample: bool = False, fetch: bool = False,
              as_dataset: bool = False):
    """USPS handwritten digits: 7291 training and 2007 test images of 16x16 pixels.

    Parameters
    ----------
    subset : {"train", "test"}
        The split.
    data_home : str or Path, optional
        Folder of the full file; default ``$DSGD_DATA_DIR`` when set (and only it), else
        ``~/dsgd_dask_data`` (and, in a source checkout, ``../shared/datasets`` beside it).
    sample : bool
        Read the real subset shipped with the package instead (the first 2000 training and
        500 test images, in their original order); needs no data home.
    fetch : bool
        Download and convert the full dataset into the data home when it is not found
        there (see :func:`fetch`).
    as_dataset : bool
        Return an :class:`xarray.Dataset` instead of arrays: ``X`` with dims
        ``("sample", "feature")``, ``y`` with dims ``("sample",)``, and attributes naming
        the dataset, subset, rows, file, citation and licence.

    Returns
    -------
    X : ndarray of shape (n, 256), float32
        Grey levels in [0, 1] (multiples of 1/2000), rows of 16x16 images in row-major order.
    y : ndarray of shape (n,), uint8
        Digits 0..9.

    Raises
    ------
    ValueError
        An unknown ``subset``; a file that is corrupt (not a readable ``.npz``, an
        array missing, or a content digest other than the registered one).
    FileNotFoundError
        The full file is not in the data home (and ``fetch`` is false); the message
        says where it was looked for and how to get it.

    Notes
    -----
    Every file is verified against the content digest of its arrays when it is first
    read in a process.

    Examples
    --------
    >>> from dsgd_dask.datasets import load_usps
    >>> X, y = load_usps(sample=True)
    >>> X.shape, X.dtype, y[:5]
    ((2000, 256), dtype('float32'), array([6, 5, 4, 7, 3], dtype=uint8))
    """
    return _load("usps", subset, data_home, sample, fetch, as_dataset)


def load_sarcos(subset: str = "all", *, data_home=None, sample: bool = False, fetch: bool = False,
                as_dataset: bool = False):
    """SARCOS robot-arm inverse dynamics, the official test file (4449 time samples).

    The 44,484-row training file is not provided. The rows are consecutive time samples:
    shuffle before splitting them.

    Parameters
    ----------
    subset : {"all"}
        The data has no split.
    data_home : str or Path, optional
        Folder of the full file; default ``$DSGD_DATA_DIR`` when set (and only it), else
        ``~/dsgd_dask_data`` (and, in a source checkout, ``../shared/datasets`` beside it).
    sample : bool
        Read the real subset shipped with the package instead (the first 2000 rows, in
        their original order); needs no data home.
    fetch : bool
        Download and convert the full dataset into the data home when it is not found
        there (see :func:`fetch`).
    as_dataset : bool
        Return an :class:`xarray.Dataset` instead of arrays: ``X`` with dims
        ``("sample", "feature")``, ``y`` with dims ``("sample", "output")``, and
        attributes naming the dataset, subset, rows, file, citation and licence.

    Returns
    -------
    X : ndarray of shape (n, 21), float64
        7 joint positions, 7 velocities, 7 accelerations.
    y : ndarray of shape (n, 7), float64
        The 7 joint torques.

    Raises
    ------
    ValueError
        An unknown ``subset``; a file that is corrupt (not a readable ``.npz``, an
        array missing, or a content digest other than the registered one).
    FileNotFoundError
        The full file is not in the data home (and ``fetch`` is false); the message
        says where it was looked for and how to get it.

    Notes
    -----
    Every file is verified against the content digest of its arrays when it is first
    read in a process.

    Examples
    --------
    >>> from dsgd_dask.datasets import load_sarcos
    >>> X, y = load_sarcos(sample=True)
    >>> X.shape, y.shape
    ((2000, 21), (2000, 7))
    """
    return _load("sarcos", subset, data_home, sample, fetch, as_dataset)


def load_a9a(subset: str = "train", *, data_home=None, sample: bool = False, fetch: bool = False,
             as_dataset: bool = False):
    """LIBSVM a9a: UCI Adult binarised, 32,561 training and 16,281 test rows of 123 features.

    Parameters
    ----------
    subset : {"train", "test"}
        The split (LIBSVM's ``a9a`` and ``a9a.t``).
    data_home : str or Path, optional
        Folder of the full file; default ``$DSGD_DATA_DIR`` when set (and only it), else
        ``~/dsgd_dask_data`` (and, in a source checkout, ``../shared/datasets`` beside it).
    sample : bool
        Read the real subset shipped with the package instead (the first 3000 training and
        1000 test rows, in their original order); needs no data home.
    fetch : bool
        Download and convert the full dataset into the data home when it is not found
        there (see :func:`fetch`).
    as_dataset : bool
        Return an :class:`xarray.Dataset` instead of arrays: ``X`` with dims
        ``("sample", "feature")``, ``y`` with dims ``("sample",)``, and attributes naming
        the dataset, subset, rows, file, citation and licence.

    Returns
    -------
    X : ndarray of shape (n, 123), uint8
        Binary features 0/1; LIBSVM feature j is column j - 1.
    y : ndarray of shape (n,), int8
        -1 or +1 (+1: income above 50K).

    Raises
    ------
    ValueError
        An unknown ``subset``; a file that is corrupt (not a readable ``.npz``, an
        array missing, or a content digest other than the registered one).
    FileNotFoundError
        The full file is not in the data home (and ``fetch`` is false); the message
        says where it was looked for and how to get it.

    Notes
    -----
    Every file is verified against the content digest of its arrays when it is first
    read in a process.

    Examples
    --------
    >>> from dsgd_dask.datasets import load_a9a
    >>> X, y = load_a9a(sample=True)
    >>> X.shape, X.dtype, sorted(set(y.tolist()))
    ((3000, 123), dtype('uint8'), [-1, 1])
    """
    return _load("a9a", subset, data_home, sample, fetch, as_dataset)


def load_qm7(subset: str = "all", *, data_home=None, sample: bool = False, fetch: bool = False,
             as_dataset: bool = False):
    """QM7: 7165 small organic molecules, Coulomb matrices and atomization energies.

    The Coulomb matrices are in atomic units (``C_ii = 0.5 Z_i^2.4``,
    ``C_ij = Z_i Z_j / |R_i - R_j|`` in Bohr), padded to 23 atoms with zeros, atoms in
    their stored order (not sorted by norm).

    Parameters
    ----------
    subset : {"all"}
        The data has no split.
    data_home : str or Path, optional
        Folder of the full file; default ``$DSGD_DATA_DIR`` when set (and only it), else
        ``~/dsgd_dask_data`` (and, in a source checkout, ``../shared/datasets`` beside it).
    sample : bool
        Read the real subset shipped with the package instead (the first 1000 molecules,
        in their original order); needs no data home.
    fetch : bool
        Download and convert the full dataset into the data home when it is not found
        there (see :func:`fetch`).
    as_dataset : bool
        Return an :class:`xarray.Dataset` instead of arrays: ``X`` with dims
        ``("sample", "feature")``, ``y`` with dims ``("sample",)``, plus the nuclear
        charges ``Z`` (dims ``("sample", "atom")``, 0 for padding) and positions ``R`` in
        Ångström (dims ``("sample", "atom", "xyz")``), and attributes naming the dataset,
        subset, rows, file, citation and licence.

    Returns
    -------
    X : ndarray of shape (n, 529), float32
        Flattened 23x23 Coulomb matrices.
    y : ndarray of shape (n,), float32
        Atomization energies in kcal/mol.

    Raises
    ------
    ValueError
        An unknown ``subset``; a file that is corrupt (not a readable ``.npz``, an
        array missing, or a content digest other than the registered one).
    FileNotFoundError
        The full file is not in the data home (and ``fetch`` is false); the message
        says where it was looked for and how to get it.

    Notes
    -----
    Every file is verified against the content digest of its arrays when it is first
    read in a process.

    Examples
    --------
    >>> from dsgd_dask.datasets import load_qm7
    >>> X, y = load_qm7(sample=True)
    >>> X.shape, round(float(X[0, 0]), 3)
    ((1000, 529), 36.858)
    """
    return _load("qm7", subset, data_home, sample, fetch, as_dataset)
