"""The pass driver: the one loop of every full-data pass solver.

A pass solver (block subspace iteration, block LOBPCG, conjugate gradients, the one pass
of the rca moments) is a small object with a ``name`` and four hooks (:class:`PassSolver`):

* ``start()``: its state before the first pass, a dict of named numpy arrays holding all
  it needs to go on (what it derives from them, such as a preconditioner's factor, it
  rebuilds from the state and its own constructor's inputs);
* ``plan(state)``: the :class:`~dsgd_dask.engine.passes.PassRequest` of the next pass, the
  directions it multiplies or the sums it needs;
* ``update(state, totals)``: an :class:`Update`, the state after the pass from the pass's
  sums (:class:`~dsgd_dask.engine.passes.PassTotals`), with the solver's stopping measure;
* ``done(record)``: its stopping test, on the ``convergence_`` record of the pass.

The driver (:func:`run_passes`) owns everything else: the reduction over row chunks (one
kernel, :func:`~dsgd_dask.engine.passes.reduce_pass`: one task per row chunk and a fixed
tree of additions, the same totals on any scheduler and number of workers); on a
``distributed`` cluster the feature sets scattered to every worker once per fit, and a
pass that loses a worker run again from the solver's last state; a checkpoint after every
pass (the solver's state and the counters: a resumed fit ends bit for bit where an
uninterrupted one does); the callback; the progress bar; one ``convergence_`` record per
pass (:func:`record`).
"""

from __future__ import annotations

import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.engine.checkpoint import PassCheckpoint
from dsgd_dask.engine.distributed import MAX_REPLAYS, Scattered, _lost_errors, active_client, renamed
from dsgd_dask.engine.passes import PassRequest, PassTotals, reduce_pass
from dsgd_dask.progress import pass_bar
from dsgd_dask.streams.inputs import DataView


def record(iteration: int, rows: int, seconds: float, measure: float, **extra) -> dict:
    """One ``convergence_`` record: ``iteration``, ``rows``, ``seconds``, ``measure``, then the solver's entries."""
    return {"iteration": int(iteration), "rows": int(rows), "seconds": float(seconds),
            "measure": float(measure) if measure is not None else float(np.nan), **extra}


class Clock:
    """Seconds since the start of a fit, for ``convergence_`` records."""

    def __init__(self):
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start


@dataclass
class Update:
    """What a solver's ``update`` returns.

    Attributes
    ----------
    state : dict of str to ndarray
        The state after the pass (what a checkpoint saves).
    measure : float
        The solver's stopping measure after the pass (``NaN`` if it has none).
    counted : bool, default=True
        Whether the pass is an iteration (what ``max_iter`` bounds and ``n_iter_`` counts).
        A pass that is not (a sampled stage, a first pass for a right-hand side) gets
        ``stage=True`` in its record, and no callback.
    extra : dict
        The solver's own entries of the record (JSON values: numbers, strings, lists).
    """

    state: dict
    measure: float
    counted: bool = True
    extra: dict = field(default_factory=dict)


class PassSolver(Protocol):
    """The hooks of a pass solver (see the module docstring).

    Optional: ``model(state)``, what the callback gets (default: the state), and
    ``measure_name``, the measure's label on the progress bar (default ``"measure"``).
    ``name`` is saved with a checkpoint: another solver's checkpoint is refused.
    """

    name: str

    def start(self) -> dict: ...

    def plan(self, state: dict) -> PassRequest: ...

    def update(self, state: dict, totals: PassTotals) -> Update: ...

    def done(self, record: dict) -> bool: ...


@dataclass
class PassRun:
    """The result of :func:`run_passes`.

    Attributes
    ----------
    state : dict of str to ndarray
        The solver's state after the last pass (its start when no pass ran).
    n_iter : int
        Passes counted as iterations (resumed ones included).
    n_passes : int
        All passes, stages included.
    records : list of dict
        One ``convergence_`` record per pass, from the first (a resumed fit's earlier passes
        as saved): ``iteration`` the iterations so far, ``rows`` the rows read so far
        (stages included), ``seconds`` since the start of the fit, ``measure`` the solver's;
        ``stage=True`` on passes that are not iterations.
    converged : bool
        Whether the solver's stopping test held after the last pass.
    """

    state: dict
    n_iter: int
    n_passes: int
    records: list
    converged: bool


def _reduce(view: DataView, request: PassRequest, keys: Scattered, index: int) -> PassTotals:
    """One pass; on a cluster, run again (with new task names) when it loses a worker, up to ``MAX_REPLAYS`` times.

    A pass run again also reads its rows under new names
    (:func:`~dsgd_dask.engine.distributed.renamed`): the scheduler may still hold the input
    tasks that failed with the worker, and would answer their old names with the same error.
    """
    lost = _lost_errors() if keys.client is not None else ()
    for attempt in range(MAX_REPLAYS + 1):
        rows = view if attempt == 0 else replace(view, data=renamed(view.data, f"dsgd-replay-{index}-{attempt}"))
        try:
            return reduce_pass(rows, request, keys, salt=f"{index}-{attempt}")
        except lost as err:
            if attempt == MAX_REPLAYS:
                raise
            warnings.warn(f"pass {index + 1} lost a worker ({type(err).__name__}: {err}); it runs again from the "
                          "solver's last state", RuntimeWarning, stacklevel=3)
    raise AssertionError("unreachable")  # pragma: no cover


def _show(progress, rec: dict, n_iter: int, stage_rows: int | None, shown: str) -> None:
    """Advance the bar: the record's ``change`` and measure (as the estimated error) if it has one, else the measure."""
    if rec.get("change") is not None:
        progress(n_iter, rec["change"], rec["measure"], rows=stage_rows)
    else:
        progress(n_iter, None, None, rows=stage_rows, **{shown: rec["measure"]})


def run_passes(solver: PassSolver, view: DataView, max_iter: int, *, callback=None,
               checkpoint: PassCheckpoint | None = None, verbose: bool = False, clock: Clock | None = None,
               desc: str | None = None) -> PassRun:
    """Run ``solver``'s passes over the rows of ``view`` until its stopping test holds or ``max_iter`` iterations.

    Parameters
    ----------
    solver : PassSolver
        The solver (see the module docstring).
    view : DataView
        The (stacked) rows: numpy, or dask with one chunk along the columns.
    max_iter : int
        Most passes counted as iterations (:attr:`Update.counted`); passes that are not
        (stages) are bounded by the solver.
    callback : callable, optional
        ``callback(n_iter, model)`` after every counted pass, once its checkpoint is
        written (so an exception from it interrupts a fit that resumes from that pass);
        ``model`` is ``solver.model(state)`` if the solver has it, else the state.
    checkpoint : PassCheckpoint, optional
        Where the state is saved after every pass. When it holds a checkpoint of this fit,
        the run resumes after its last pass; a checkpoint of another fit, of another
        solver or of the step engine is refused (``ValueError``).
    verbose : bool, default=False
        Show a progress bar of the passes with the stopping measure.
    clock : Clock, optional
        The fit's clock (the records' ``seconds``); a new one by default. A resumed run
        sets it back by the seconds of the last pass saved, so that the seconds go on.
    desc : str, optional
        Prefix of the progress bar.

    Returns
    -------
    PassRun
    """
    max_iter = int(max_iter)
    if max_iter < 0:
        raise ValueError(f"max_iter must be >= 0, got {max_iter}")
    clock = Clock() if clock is None else clock
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is not None:
        if saved.solver != solver.name:
            raise ValueError(f"the checkpoint at {checkpoint.path} was written by solver {saved.solver!r}, not "
                             f"{solver.name!r}; delete it or choose another checkpoint path")
        state, passes, n_iter, records = saved.state, saved.n_passes, saved.n_iter, list(saved.records)
        if records:  # the seconds go on from those of the last pass saved
            clock.start -= records[-1]["seconds"]
    else:
        state, passes, n_iter, records = solver.start(), 0, 0, []
    rows = records[-1]["rows"] if records else 0
    done = bool(records) and bool(solver.done(records[-1]))
    model = getattr(solver, "model", None)
    label = str(getattr(solver, "measure_name", "measure"))
    shown = label if label not in ("n_passes", "change", "estimated_error", "rows") else f"{label} "
    keys = Scattered(active_client() if view.is_dask else None)
    bar = pass_bar(max_iter, desc=desc) if verbose else nullcontext()
    try:
        with one_blas_thread(), bar as progress:
            while not done and n_iter < max_iter:
                totals = _reduce(view, solver.plan(state), keys, passes)
                step = solver.update(state, totals)
                state = step.state
                passes += 1
                n_iter += bool(step.counted)
                extra = dict(step.extra) if step.counted else {**step.extra, "stage": True}
                rows += totals.n
                records.append(record(n_iter, rows, clock(), step.measure, **extra))
                done = bool(solver.done(records[-1]))
                if checkpoint is not None:
                    checkpoint.save(solver.name, state, passes, n_iter, records)
                if progress is not None:
                    _show(progress, records[-1], n_iter, None if step.counted else totals.n, shown)
                if callback is not None and step.counted:
                    callback(n_iter, model(state) if model is not None else state)
    finally:
        keys.release()
    return PassRun(state, n_iter, passes, records, done)
