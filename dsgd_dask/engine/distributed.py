"""The update loop on a ``distributed`` cluster: each chunk task runs where its data lives.

The dask chunk of a task is computed on a worker and stays there as a future; the task
``run_chunk(state, chunk)`` is submitted with the (small) model state as an argument, so
the scheduler places it next to the chunk: the model travels (``O(M k)`` bytes each way
per chunk task), the data never does. Chunks are read ahead so that I/O overlaps
compute. Every task depends only on its chunk and on a state the client holds, so a lost
worker costs at most the re-read of a chunk and the re-run of one task, and the result
does not change.
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import replace

from dsgd_dask.engine.steps import DivergenceError, KPCAState, run_chunk


def active_client():
    """The ``distributed.Client`` that dask would compute with now, or ``None``."""
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    from dask.base import get_scheduler

    sched = get_scheduler()
    owner = getattr(sched, "__self__", None)
    return owner if isinstance(owner, Client) else None


def run_plan_distributed(client, state: KPCAState, view, tasks, features, cfg, progress=None, callback=None,
                         read_ahead: int = 2, max_restarts: int = 12) -> KPCAState:
    """Run a plan of chunk tasks on ``client``'s workers (same results as the local loop)."""
    tasks = iter(tasks)
    queue: deque = deque()

    def refill():
        while len(queue) < read_ahead:
            task = next(tasks, None)
            if task is None:
                return
            queue.append((task, [client.compute(view.data.blocks[c]) for c in task.chunks]))

    refill()
    while queue:
        task, chunk = queue.popleft()
        refill()
        for _ in range(max_restarts):
            future = client.submit(run_chunk, state, chunk, task, features, cfg, pure=False,
                                   key=f"dsgd-step-{task.first_step}-{id(state)}")
            try:
                new_state = future.result()
                break
            except DivergenceError as err:
                state = replace(state, eta_scale=state.eta_scale / 2)
                warnings.warn(f"{err}; retrying from step {task.first_step} with half the step size",
                              RuntimeWarning, stacklevel=2)
        else:
            raise RuntimeError(f"the updates kept diverging after {max_restarts} step-size halvings; "
                               "check the data scale and lower eta0")
        del chunk, future
        state = new_state
        if progress is not None:
            progress.update(task.n_steps)
        if callback is not None:
            callback(state)
    return state
