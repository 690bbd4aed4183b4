"""Where the full dataset files live: the data home and the folders searched for them."""

from __future__ import annotations

import os
from pathlib import Path

from dsgd_dask.datasets._registry import REGISTRY, DatasetInfo

#: Environment variable naming the data home; when set, it is the only folder searched.
ENV_VAR = "DSGD_DATA_DIR"
#: Data home when neither ``data_home`` nor ``$DSGD_DATA_DIR`` is given.
DEFAULT_HOME = Path("~") / "dsgd_dask_data"
#: Folder of the shipped samples.
SAMPLE_DIR = Path(__file__).resolve().parent / "data"


def get_data_home(data_home=None) -> Path:
    """The folder the full dataset files are read from and fetched into.

    Parameters
    ----------
    data_home : str or Path, optional
        The folder; default ``$DSGD_DATA_DIR`` when set, else ``~/dsgd_dask_data``.

    Returns
    -------
    Path
        The folder, with ``~`` expanded. It is not created (:func:`fetch` creates it).

    Notes
    -----
    Without ``data_home`` and ``$DSGD_DATA_DIR``, the loaders also accept a file in
    ``../shared/datasets`` beside a source checkout of ``dsgd_dask`` when that folder
    exists (see :func:`search_dirs`); :func:`fetch` always writes to this data home.

    Examples
    --------
    >>> get_data_home("/tmp/data")
    PosixPath('/tmp/data')
    """
    if data_home is None:
        data_home = os.environ.get(ENV_VAR) or DEFAULT_HOME
    return Path(data_home).expanduser()


def _checkout_datasets() -> Path | None:
    """``../shared/datasets`` beside a source checkout of the package, if both exist."""
    import dsgd_dask

    root = Path(dsgd_dask.__file__).resolve().parents[1]
    path = root.parent / "shared" / "datasets"
    if (root / "pyproject.toml").is_file() and path.is_dir():
        return path
    return None


def search_dirs(data_home=None) -> list[Path]:
    """The folders searched, in order, for a full dataset file.

    ``[data_home]`` when given; else ``[$DSGD_DATA_DIR]`` when that is set (and only it);
    else ``~/dsgd_dask_data`` followed by ``../shared/datasets`` beside a source checkout
    when that folder exists.
    """
    if data_home is not None or os.environ.get(ENV_VAR):
        return [get_data_home(data_home)]
    dirs = [get_data_home()]
    shared = _checkout_datasets()
    if shared is not None:
        dirs.append(shared)
    return dirs


def dataset_info(name: str) -> DatasetInfo:
    """The registry entry of ``name``; an unknown name is a ValueError naming the choices."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(sorted(REGISTRY))}") from None
