"""The one pass of ``solver="rca"`` on the pass driver: the mean and covariance of explicit features.

Randomized component analysis (PCA, CCA, SIR on random Fourier or Nyström features) needs
the first two moments of an explicit feature map ``z`` over every row, then a dense solve
(an ``M x M`` eigenproblem). The moments are one pass of the driver
(:func:`~dsgd_dask.engine.driver.run_passes`): :func:`~dsgd_dask.engine.passes.gram_request`
reduces ``[z - shift, 1]^T [z - shift, 1]`` over the row chunks and
:func:`~dsgd_dask.engine.passes.feature_covariance` turns the sums into the moments. The
pass is not checkpointed (its state is ``M x M``, and one pass has nothing to resume).

:func:`split_moments` takes the moments of two disjoint sets of row chunks in the same
read of the data (a ridge fitted on one set and scored on the other), and
:func:`pooled_moments` the moments of all the rows from the two.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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


@dataclass(frozen=True)
class Moments:
    """The first two moments of features over ``n`` rows: ``mean`` (M,) and covariance ``cov`` (M, M)."""

    n: int
    mean: np.ndarray
    cov: np.ndarray


def pooled_moments(a: Moments, b: Moments) -> Moments:
    """The moments of the rows of ``a`` and ``b`` together (the pooled mean and covariance, exact)."""
    n = a.n + b.n
    wa, wb = a.n / n, b.n / n
    d = a.mean - b.mean
    cov = wa * a.cov + wb * b.cov + (wa * wb) * np.outer(d, d)
    return Moments(n, wa * a.mean + wb * b.mean, 0.5 * (cov + cov.T))


class _SplitSolver(_RcaSolver):
    """Two passes of :class:`_RcaSolver` over two sets of row chunks: a stage on ``first``, then ``second``."""

    name = "rca-split"

    def __init__(self, fmap, shift: np.ndarray, first, second, name: str = "feature-moments"):
        super().__init__(fmap, shift, True, name)
        self.chunks = (tuple(int(i) for i in first), tuple(int(i) for i in second))

    def plan(self, state: dict):
        part = 1 if "fit" in state else 0
        return replace(super().plan(state), chunks=self.chunks[part], name=f"{self.task_name}-{part}")

    def update(self, state: dict, totals: PassTotals) -> Update:
        moments = super().update(state, totals).state
        if "fit" not in state:
            return Update({"fit": moments}, float("nan"), counted=False)
        return Update({"fit": state["fit"], "held": moments}, float("nan"), counted=True)

    def done(self, record: dict) -> bool:
        return not record.get("stage", False)


def split_moments(view: DataView, fmap, shift: np.ndarray, fit_chunks, held_chunks, *, clock: Clock | None = None,
                  verbose: bool = False, desc: str | None = None,
                  name: str = "feature-moments") -> tuple[Moments, Moments, PassRun]:
    """``(fit, held, run)``: the feature moments of the row chunks ``fit_chunks`` and of ``held_chunks`` of ``view``.

    ``view`` is a dask input; each row is read once (the two sets in two reductions, the
    first recorded as a stage). ``run.records`` holds the one counted record (``rows``: all
    the rows of both sets). Each set's moments are those :func:`rca_moments` gives on its
    rows alone; :func:`pooled_moments` of the two are the moments of all the rows.
    """
    run = run_passes(_SplitSolver(fmap, shift, fit_chunks, held_chunks, name), view, 1, clock=clock,
                     verbose=verbose, desc=desc)
    parts = [Moments(int(run.state[k]["n"]), run.state[k]["mean"], run.state[k]["cov"]) for k in ("fit", "held")]
    run.records = [r for r in run.records if not r.get("stage", False)]
    return parts[0], parts[1], run
