"""The update loop: runs a plan of chunk tasks, prefetching data, guarding divergence."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from dsgd_dask.engine.distributed import active_client, run_plan_distributed
from dsgd_dask.engine.parallel import run_partitioned
from dsgd_dask.engine.steps import StepState, run_chunk, run_with_restarts
from dsgd_dask.streams.batches import PartitionedTask, load_slab

#: Halvings of the step size tried before a diverging fit gives up.
MAX_RESTARTS = 12


def run_task(state: StepState, slab, task, features, rule, cfg) -> StepState:
    """Run one task of a plan in this process: a chunk task or a partitioned task."""
    if isinstance(task, PartitionedTask):
        return run_partitioned(state, slab, task, features, rule, cfg)
    return run_chunk(state, slab, task, features, rule, cfg)


def run_plan(state: StepState, view, tasks, features: tuple, rule, cfg,
             progress: Callable[[int], None] | None = None, on_state=None, due=None) -> StepState:
    """Run every chunk task of ``rule``'s steps in order, loading the next slab while the current one runs.

    A task whose steps diverge is re-run from its starting state with half the step
    size (a warning says so); after ``MAX_RESTARTS`` halvings the fit fails.
    ``on_state(state)`` is called after every task whose last step ``s`` has ``due(s)``
    (every task when ``due`` is ``None``). ``progress(n)``, when given, is called with the
    number of steps of every task completed (the calls add up to the steps run); it is
    how a caller shows progress (e.g. :func:`dsgd_dask.progress.step_bar`).

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
                progress(task.n_steps)
            if on_state is not None and due(state.step):
                on_state(state)
            task = nxt
    return state
