"""Real benchmark datasets: loaders, a data home, downloads, and subsets shipped with the package.

Each loader returns ``(X, y)`` numpy arrays, ``X`` with one row per sample, or an
:class:`xarray.Dataset` with ``as_dataset=True``:

===================  ==========================  ==========================  ==============
loader               subsets                     X                           y
===================  ==========================  ==========================  ==============
:func:`load_mnist`   train 60,000 / test 10,000  (n, 784) uint8              (n,) uint8
:func:`load_usps`    train 7291 / test 2007      (n, 256) float32 in [0, 1]  (n,) uint8
:func:`load_sarcos`  all 4449                    (n, 21) float64             (n, 7) float64
:func:`load_a9a`     train 32,561 / test 16,281  (n, 123) uint8 0/1          (n,) int8 ±1
:func:`load_qm7`     all 7165                    (n, 529) float32            (n,) float32
===================  ==========================  ==========================  ==============

``sample=True`` reads a subset of real rows shipped with the package (the first rows of
each split, in their original order; see ``dsgd_dask/datasets/data/README.md``).
Otherwise the full file is read from the data home (:func:`get_data_home`): the
``data_home`` argument, else ``$DSGD_DATA_DIR``, else ``~/dsgd_dask_data``. A missing
file is downloaded from its original source by :func:`fetch` or ``fetch=True``. Every
file is checked against the digest of its contents.
"""

from dsgd_dask.datasets._fetch import coulomb_matrices, fetch
from dsgd_dask.datasets._files import CorruptFileError, content_digest
from dsgd_dask.datasets._home import ENV_VAR, get_data_home, search_dirs
from dsgd_dask.datasets._loaders import find_file, load_a9a, load_mnist, load_qm7, load_sarcos, load_usps
from dsgd_dask.datasets._registry import REGISTRY
from dsgd_dask.datasets.coulomb import coulomb_stream, sorted_coulomb
from dsgd_dask.datasets.digits import deform_digits, digit_stream

#: Names of the datasets.
DATASETS = tuple(REGISTRY)

__all__ = [
    "DATASETS",
    "ENV_VAR",
    "CorruptFileError",
    "content_digest",
    "coulomb_matrices",
    "coulomb_stream",
    "deform_digits",
    "digit_stream",
    "fetch",
    "find_file",
    "get_data_home",
    "load_a9a",
    "load_mnist",
    "load_qm7",
    "load_sarcos",
    "load_usps",
    "search_dirs",
    "sorted_coulomb",
]
