"""The update loop: runs a plan of chunk tasks, prefetching data, guarding divergence."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

from dsgd_dask.engine.distributed import active_client, run_plan_distributed
from dsgd_dask.engine.parallel import run_partitioned
from dsgd_dask.engine.steps import StepState, run_chunk, run_with_restarts
from dsgd_dask.streams.batches import PartitionedTask, load_slab

#: Halvings of the step size tried before a diverging fit gives up.
MAX_RESTARTS = 12


class Progress:
    """A one-line progress bar on a terminal stream (steps, samples, rate)."""

    def __init__(self, total: int, batch_size: int, stream=None, width: int = 30, done: int = 0):
        self.total = max(int(total), 1)
        self.batch_size = batch_size
        self.stream = stream or sys.stderr
        self.width = width
        self.done = self.start = done
        self.t0 = time.perf_counter()

    def update(self, steps: int) -> None:
        self.done += steps
        frac = min(self.done / self.total, 1.0)
        elapsed = time.perf_counter() - self.t0
        rate = (self.done - self.start) * self.batch_size / elapsed if elapsed > 0 else 0.0
        bar = "#" * int(frac * self.width)
        self.stream.write(
            f"\r[{bar:<{self.width}}] {self.done}/{self.total} steps  {rate:,.0f} samples/s  {elapsed:6.1f}s"
        )
        if self.done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


class PassProgress:
    """One line per sampled stage or full-data pass on a terminal stream: how far the subspace moved, time."""

    def __init__(self, max_passes: int, stream=None):
        self.max_passes = int(max_passes)
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()

    def update(self, n_passes: int, change: float, estimated_error: float | None, rows: int | None = None) -> None:
        elapsed = time.perf_counter() - self.t0
        err = "-" if estimated_error is None else f"{estimated_error:.2e}"
        what = f"pass {n_passes}/{self.max_passes}" if rows is None else f"stage on {rows:,} rows"
        self.stream.write(f"{what}: subspace moved by sin^2 {change:.2e}, estimated error {err}  {elapsed:6.1f}s\n")
        self.stream.flush()


def run_task(state: StepState, slab, task, features, rule, cfg) -> StepState:
    """Run one task of a plan in this process: a chunk task or a partitioned task."""
    if isinstance(task, PartitionedTask):
        return run_partitioned(state, slab, task, features, rule, cfg)
    return run_chunk(state, slab, task, features, rule, cfg)


def run_plan(state: StepState, view, tasks, features: tuple, rule, cfg, progress: Progress | None = None,
             on_state=None, due=None) -> StepState:
    """Run every chunk task of ``rule``'s steps in order, loading the next slab while the current one runs.

    A task whose steps diverge is re-run from its starting state with half the step
    size (a warning says so); after ``MAX_RESTARTS`` halvings the fit fails.
    ``on_state(state)`` is called after every task whose last step ``s`` has ``due(s)``
    (every task when ``due`` is ``None``).

    Under a ``distributed`` client and with dask input, the tasks run on the workers
    next to their chunks and the state stays there
    (:func:`~dsgd_dask.engine.distributed.run_plan_distributed`).
    """
    if due is None:
        def due(step):
            return True
    if view.is_dask:
        client = active_client()
        if client is not None:
            return run_plan_distributed(client, state, view, tasks, features, rule, cfg, progress, on_state, due,
                                        max_restarts=MAX_RESTARTS)
    tasks = iter(tasks)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsgd-prefetch") as pool:
        task = next(tasks, None)
        pending = pool.submit(load_slab, view, task) if task is not None else None
        while task is not None:
            slab = pending.result()
            nxt = next(tasks, None)
            pending = pool.submit(load_slab, view, nxt) if nxt is not None else None
            state = run_with_restarts(lambda st, s=slab, t=task: run_task(st, s, t, features, rule, cfg), state,
                                      task.first_step, MAX_RESTARTS)
            if progress is not None:
                progress.update(task.n_steps)
            if on_state is not None and due(state.step):
                on_state(state)
            task = nxt
    return state
