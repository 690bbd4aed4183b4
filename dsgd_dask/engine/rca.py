"""The one pass of ``solver="rca"`` on the pass driver: the mean and covariance of explicit features.

Randomized component analysis (PCA, CCA, SIR on random Fourier or Nyström features) needs
the first two moments of an explicit feature map ``z`` over every row, then a dense solve
(an ``M x M`` eigenproblem). The moments are one pass of the driver
(:func:`~dsgd_dask.engine.driver.run_passes`): :func:`~dsgd_dask.engine.passes.gram_request`
reduces ``[z - shift, 1]^T [z - shift, 1]`` over the row chunks and
:func:`~dsgd_dask.engine.passes.feature_covariance` turns the sums into the moments. The
pass is not checkpointed (its state is ``M x M``, and one pass has nothing to resume).
"""

from __future__ import annotations

import numpy as np

from dsgd_dask.engine.driver import Clock, PassRun, Update, run_passes
from dsgd_dask.engine.passes import PassTotals, feature_covariance, gram_request
from dsgd_dask.streams.inputs import DataView


class _RcaSolver:
    """The moments pass of the rca solvers, as a :class:`~dsgd_dask.engine.driver.PassSolver`.

    Parameters
    ----------
    fmap : callable
        The feature map: ``fmap(rows) -> z`` (``rows x M``, any float precision), with an
        ``n_features`` attribute (``M``); e.g.
        :class:`~dsgd_dask.baselines._moments.FourierMap`,
        :class:`~dsgd_dask.baselines._moments.NystroemMap`, or a map of stacked views
        (``PairedMap``, ``SlicedMap``). It is called on the row chunks of the data (on the
        workers under ``distributed``), so it must pickle.
    shift : ndarray of shape (M,)
        Subtracted from ``z`` before the products (in ``z``'s precision); close to the mean
        (e.g. the mean features of a seeded sample), it keeps float32 sums free of
        cancellation. Any value gives the same moments up to round-off.
    center : bool, default=True
        ``True``: the covariance of the features and their mean; ``False``: the uncentred
        second moment ``E[z z^T]`` and a zero mean.
    name : str, default="feature-moments"
        Prefix of the pass's task names.

    Notes
    -----
    The state after the pass is ``{"n": rows (0-d int64), "mean": (M,), "cov": (M, M)}``
    (the result of :func:`~dsgd_dask.engine.passes.feature_covariance`, bit for bit the
    old ``baselines._moments.feature_moments`` on a dask input). The pass is an iteration
    (``counted=True``) with measure ``NaN``, and :meth:`done` always holds: run with
    ``max_iter=1`` (or more: it stops after one pass anyway), without a checkpoint.
    :func:`rca_moments` does that.
    """

    name = "rca"
    measure_name = "measure"

    def __init__(self, fmap, shift: np.ndarray, center: bool = True, name: str = "feature-moments"):
        self.fmap = fmap
        self.shift = np.asarray(shift, dtype=np.float64)
        self.center = bool(center)
        self.task_name = str(name)

    def start(self) -> dict:
        return {}

    def plan(self, state: dict):
        return gram_request(self.fmap, self.shift, name=self.task_name)

    def update(self, state: dict, totals: PassTotals) -> Update:
        n, mean, cov = feature_covariance(totals, self.shift, self.center)
        return Update({"n": np.asarray(n, dtype=np.int64), "mean": mean, "cov": cov}, float("nan"), counted=True)

    def done(self, record: dict) -> bool:
        return True


def rca_moments(view: DataView, fmap, shift: np.ndarray, center: bool = True, *, clock: Clock | None = None,
                verbose: bool = False, desc: str | None = None,
                name: str = "feature-moments") -> tuple[int, np.ndarray, np.ndarray, PassRun]:
    """``(n, mean, cov, run)``: the moments of ``fmap`` over the rows of ``view`` in one driver pass.

    ``run.records`` is the one ``convergence_`` record of the pass (``iteration=1``, the
    rows, the seconds on ``clock``, ``measure=NaN``). See :class:`_RcaSolver` for the
    other parameters.
    """
    run = run_passes(_RcaSolver(fmap, shift, center, name), view, 1, clock=clock, verbose=verbose, desc=desc)
    state = run.state
    return int(state["n"]), state["mean"], state["cov"], run
