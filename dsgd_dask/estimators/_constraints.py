"""The estimators' parameter constraints, in scikit-learn's declarative form.

Every public estimator declares ``_parameter_constraints`` (each constructor parameter
with a list of :mod:`sklearn.utils._param_validation` constraints), merged from the
entries below, and its ``fit`` and ``partial_fit`` validate them on entry, before any
data are read: a value that meets none of a parameter's constraints raises
``InvalidParameterError`` (a ``ValueError`` and a ``TypeError``) naming the parameter,
its valid values and the value given. What depends on the data (``n_components`` at
most the features or rows, a budget that the blocks divide) or on several parameters
(``solver`` with ``features``, :func:`~dsgd_dask.estimators._solvers.check_solver`;
``kernel_params`` with ``kernel``) is checked where it is resolved.
"""

from __future__ import annotations

import os
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from dsgd_dask.estimators._solvers import SOLVERS
from dsgd_dask.features.kernels import _ALIASES, KERNELS

#: Largest feature budget ``n_features`` (and block): ``2**24`` features hold 128 MiB of
#: float64 coefficients per component, a Fourier block of them ``2**24 d`` frequencies. A
#: larger budget is refused before any data are read, not when its arrays are allocated.
MAX_FEATURES = 2**24

AUTO = StrOptions({"auto"})
COUNT = [Interval(Integral, 1, None, closed="left")]
POSITIVE = [Interval(Real, 0, None, closed="neither")]
NON_NEGATIVE = [Interval(Real, 0, None, closed="left")]
#: A ridge: a positive number, or ``"auto"`` (chosen on held-out row chunks during ``fit``).
RIDGE = [*POSITIVE, AUTO]
#: ``alpha`` of :class:`~dsgd_dask.KernelRidge`: a non-negative number, or ``"auto"`` (chosen during ``fit``).
ALPHA = [*NON_NEGATIVE, AUTO]

#: The kernel of one view (two-view estimators: each with the suffix ``_x`` or ``_y``).
KERNEL: dict[str, list] = {
    "kernel": [StrOptions({*KERNELS, *_ALIASES})],
    "bandwidth": [StrOptions({"median"}), *POSITIVE],
    "kernel_params": [dict, None],
}

#: :data:`KERNEL` for each of two views: ``kernel_x``, ``kernel_y``, ``bandwidth_x``...
TWO_VIEW_KERNELS: dict[str, list] = {f"{name}_{view}": c for name, c in KERNEL.items() for view in "xy"}

#: ``random_state``: besides scikit-learn's, a ``numpy.random.Generator`` and any
#: non-negative integer (the ``seed_`` of an earlier fit reproduces it).
RANDOM_STATE: dict[str, list] = {
    "random_state": [Interval(Integral, 0, None, closed="left"), np.random.RandomState, np.random.Generator, None],
}

#: Every estimator on random features fitted by the engines: budget, steps, precision, checkpoints.
STEPS: dict[str, list] = {
    # each solver's own features are checked against its table (estimators._solvers.SOLVERS)
    "features": [StrOptions({"nystroem", "fourier", "fourier_pairs"})],
    "n_features": [Interval(Integral, 1, MAX_FEATURES, closed="both"), AUTO],
    "block_size": [Interval(Integral, 1, MAX_FEATURES, closed="both"), AUTO],
    "batch_size": COUNT,
    "max_iter": [*COUNT, AUTO],
    "shuffle_chunks": COUNT,
    "n_partitions": COUNT,
    "eta0": POSITIVE,
    "eta_decay": NON_NEGATIVE,
    "average": [Interval(Integral, 0, None, closed="left"), "boolean"],
    "compute_dtype": [StrOptions({"float32", "float64"})],
    "cache_bytes": [Interval(Integral, 0, None, closed="left"), None],
    "checkpoint": [str, os.PathLike, None],
    "checkpoint_every": COUNT,
    "verbose": ["verbose"],
    **RANDOM_STATE,
}


#: ``preconditioner`` of the kernel classifiers' steps: none or each step's block's own second moment.
STEP_PRECONDITIONER: dict[str, list] = {"preconditioner": [StrOptions({"block"}), None],
                                         "preconditioner_jitter": [Interval(Real, 0, None, closed="neither"), AUTO]}


def solver_constraint(estimator: str) -> dict[str, list]:
    """``solver``: ``"auto"`` or a solver of ``estimator`` in :data:`~dsgd_dask.estimators._solvers.SOLVERS`."""
    return {"solver": [StrOptions({"auto", *SOLVERS[estimator]})]}
