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

from collections import deque

from dsgd_dask.engine.parallel import apply_sums, part_sums
from dsgd_dask.engine.steps import KPCAState, check_slab, run_chunk, run_with_restarts, target_block
from dsgd_dask.rules.statistics import StepSums
from dsgd_dask.streams.batches import PartitionedTask


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
            parts = task.parts if isinstance(task, PartitionedTask) else (task,)
            futures = [client.submit(check_slab, [client.compute(view.data.blocks[c]) for c in part.chunks], part,
                                     pure=False) for part in parts]
            queue.append((task, futures))

    refill()
    while queue:
        task, chunk = queue.popleft()
        refill()

        def run(st, task=task, chunk=chunk):
            if isinstance(task, PartitionedTask):
                return _run_partitioned_remote(client, st, chunk, task, features, cfg)
            future = client.submit(run_chunk, st, chunk[0], task, features, cfg, pure=False,
                                   key=f"dsgd-step-{task.first_step}-{id(st)}")
            return future.result()

        new_state = run_with_restarts(run, state, task.first_step, max_restarts)
        del chunk
        state = new_state
        if progress is not None:
            progress.update(task.n_steps)
        if callback is not None:
            callback(state)
    return state


def _run_partitioned_remote(client, state: KPCAState, slabs: list, task: PartitionedTask, features, cfg) -> KPCAState:
    """Data-parallel steps: every part's sums computed on the worker holding its slab."""
    batches = task.part_batches([part.n_rows for part in task.parts], cfg.batch_size)
    coef = state.coef
    m = features.block_size
    for i in range(task.n_steps):
        t = task.first_step + i
        _, target = target_block(coef.shape[0] // m, cfg.n_blocks, t)
        # the coefficients travel with the tasks (no separate scatter round trip)
        futures = [client.submit(part_sums, coef, slab, rows[i], target, features, pure=False,
                                 key=f"dsgd-part-{t}-{p}-{id(coef)}")
                   for p, (slab, rows) in enumerate(zip(slabs, batches, strict=True))]
        total = StepSums.empty(m, coef.shape[1])
        for sums in client.gather(futures):  # reduced in part order: the same sum on any cluster
            total = total + sums
        coef = apply_sums(coef, total, t, state.eta_scale, features, cfg)
    return KPCAState(coef, task.first_step + task.n_steps, state.eta_scale)
