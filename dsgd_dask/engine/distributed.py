"""The update loop on a ``distributed`` cluster: the state stays on the workers.

Each chunk task takes the previous task's state as a future, so the fit is a chain of
tasks, a few submitted ahead, that the scheduler places next to their chunks (the dask
chunk of a task is computed on a worker and stays there). The client fetches the state
only when it needs it: for a checkpoint, a callback and at the end. A task whose steps
diverge re-runs itself from its input state with half the step size, inside the task.
Data-parallel steps send the parts' sums worker to worker, and the update is applied
on a worker too.

The plan and the arithmetic are those of the local loop, so the result does not depend on
the scheduler or the number of workers. A lost worker costs the re-run of the tasks
since the last state the client holds (the start, or the last checkpoint or callback),
and the scatter again of the feature sets if it held their last copy (the scheduler may
drop the broadcast's other copies): the result does not change.
"""

from __future__ import annotations

import uuid
import warnings
from collections import deque
from concurrent.futures import CancelledError
from functools import partial

import dask
import dask.array as da
import numpy as np

from dsgd_dask.engine.parallel import apply_sums, part_sums, reduce_parts
from dsgd_dask.engine.steps import StepState, after_step, check_slab, run_chunk, run_with_restarts, step_target
from dsgd_dask.streams.batches import PartitionedTask

#: Re-runs from the last state the client holds after lost workers or failed reads, before the fit fails.
MAX_REPLAYS = 3


def local_cluster(n_workers: int, processes: bool = True):
    """A ``distributed.LocalCluster`` of ``n_workers`` single-threaded workers, no dashboard.

    Its scheduler's HTTP server takes a free port: without a dashboard address it would take
    8787, which another cluster on the machine may hold.
    """
    from distributed import LocalCluster

    return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=processes, dashboard_address=None,
                        scheduler_kwargs={"dashboard_address": ":0"})


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


def _lost_errors() -> tuple[type[BaseException], ...]:
    from distributed import KilledWorker

    # a cancelled future (its data lost with a worker) raises a CancelledError subclass
    return (KilledWorker, CancelledError, OSError)


def chunk_task(state: StepState, slab, task, features, rule, cfg, max_restarts: int) -> StepState:
    """A chunk task on a worker: its steps, re-run with half the step size while they diverge."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the client warns when it sees the smaller step
        return run_with_restarts(lambda st: run_chunk(st, slab, task, features, rule, cfg), state,
                                 task.first_step, max_restarts)


def part_task(state: StepState, slab, rows, t: int, features, rule, cfg):
    """The sums of one part of data-parallel step ``t``, next to the part's rows."""
    _, target = step_target(state.coef, features, rule, cfg, t)
    return part_sums(state.coef, slab, rows, target, features, rule)


def update_task(state: StepState, t: int, features, rule, cfg, *parts) -> StepState:
    """The update of data-parallel step ``t`` from its parts' sums."""
    coef = apply_sums(state.coef, reduce_parts(parts), t, state.eta_scale, features, rule, cfg)
    return after_step(state, coef, t, cfg)


class Scattered:
    """The graph key of each object of a fit (a feature set, a step rule).

    Under a client the object is scattered to every worker once, and again when its
    future is no longer finished: the scheduler may keep fewer copies than the broadcast
    made, and a lost worker can take the last one. Without a client, a delayed of it.
    """

    def __init__(self, client):
        self.client = client
        self.scatters = 0  # objects scattered so far, those scattered again included
        self._keys: dict[int, tuple] = {}  # id -> (object, key): the object is kept alive with its key

    def __call__(self, obj):
        from distributed import futures_of

        entry = self._keys.get(id(obj))
        if entry is None or (self.client is not None and any(f.status != "finished" for f in futures_of(entry[1]))):
            if self.client is not None:
                key = self.client.scatter(obj, broadcast=True, hash=False)
                self.scatters += 1
            else:
                key = dask.delayed(obj, name=f"dsgd-features-{uuid.uuid4().hex}", traverse=False)
            entry = self._keys[id(obj)] = (obj, key)
        return entry[1]

    def release(self) -> None:
        self._keys.clear()


def _compute_alone(block):
    """A chunk's own graph, computed inside the task that holds it (no task of it reaches the scheduler)."""
    return block.compute(scheduler="sync")


def renamed(data, seed: str):
    """The dask array ``data`` under new task names: the same chunks and values, each chunk one new task.

    A re-run after a lost worker or a failed read needs new names: the scheduler may still
    hold the input tasks that failed and would answer their old names with the same error.
    Each new task computes its chunk's own (optimised) graph on the worker, synchronously.
    ``dask.graph_manipulation.clone`` would rename the graph instead, but its clones of
    rechunked or blockwise graphs fail to fuse (``ValueError: Cannot fuse tasks with
    multiple outputs``, dask issue 12455). Anything but a dask array is returned as it is.
    """
    if not isinstance(data, da.Array):
        return data
    name = f"{seed}-{dask.base.tokenize(data, seed)}"
    parts = np.empty(data.numblocks, dtype=object)
    for index in np.ndindex(*data.numblocks):
        (block,) = dask.optimize(data.blocks[index])  # the chunk's own tasks alone
        read = dask.delayed(partial(_compute_alone, block))(dask_key_name="-".join(map(str, (name, *index))))
        parts[index] = da.from_delayed(read, shape=block.shape, meta=data._meta)
    return da.block(parts.tolist())


def _chunk(view, c: int, replay: int):
    """Dask chunk ``c`` of the rows; in a re-run after a lost worker or a failed read, under new names."""
    block = view.data.blocks[c]
    return block if replay == 0 else renamed(block, f"dsgd-replay-{replay}")


def _submit(client, state, task, view, refs, max_restarts: int, replay: int = 0):
    """The future of the state after ``task``, from ``state`` (a value or a future)."""
    features, rule, cfg = refs
    parts = task.parts if isinstance(task, PartitionedTask) else (task,)
    slabs = [client.submit(check_slab, [client.compute(_chunk(view, c, replay)) for c in part.chunks], part,
                           pure=False) for part in parts]
    if not isinstance(task, PartitionedTask):
        return client.submit(chunk_task, state, slabs[0], task, features, rule, cfg, max_restarts, pure=False,
                             key=f"dsgd-step-{task.first_step}-{id(slabs[0])}")
    # data-parallel steps: part sums on the workers holding the parts, the update on a worker
    batches = task.part_batches([part.n_rows for part in task.parts], cfg.batch_size)
    for i in range(task.n_steps):
        t = task.first_step + i
        sums = [client.submit(part_task, state, slab, rows[i], t, features, rule, cfg, pure=False,
                              key=f"dsgd-part-{t}-{p}-{id(slab)}")
                for p, (slab, rows) in enumerate(zip(slabs, batches, strict=True))]
        state = client.submit(update_task, state, t, features, rule, cfg, *sums,
                              pure=False, key=f"dsgd-update-{t}-{id(slabs[0])}")
    return state


def run_plan_distributed(client, state: StepState, view, tasks, features, rule, cfg, progress=None,
                         on_state=None, due=None, read_ahead: int = 2, max_restarts: int = 12) -> StepState:
    """Run a plan of chunk tasks on ``client``'s workers (same results as the local loop).

    ``on_state(state)`` is called after the tasks whose last step ``s`` has ``due(s)``
    true; only then, and at the end, does the client fetch the state. ``progress(n)`` is
    called on the client with the steps of the tasks completed since the last call.
    """
    lost = _lost_errors()
    keys = Scattered(client)
    refs = (keys(features), keys(rule), cfg)
    tasks = iter(tasks)
    anchor, since = state, []  # the last state the client holds, and the tasks run from it
    running: deque = deque()  # (task, future of the state after it)
    current = state  # a value (the anchor) or the future of the last submitted task
    counted = state.step  # steps already reported to progress

    replays = 0

    def replay(err):
        nonlocal current, replays, refs
        replays += 1
        if replays > MAX_REPLAYS:
            raise err
        running.clear()
        scatters = keys.scatters
        refs = (keys(features), keys(rule), cfg)
        again = "; the feature sets and the rule, lost with it, are scattered again" if keys.scatters > scatters else ""
        warnings.warn(f"the steps after step {anchor.step} lost a worker or a read ({type(err).__name__}: {err}); they "
                      f"run again from there{again}", RuntimeWarning, stacklevel=4)
        current = anchor
        for task in since:
            current = _submit(client, current, task, view, refs, max_restarts, replays)
            running.append((task, current))

    def settle(block_until: int):
        """Wait for the oldest tasks until at most ``block_until`` are running; fetch states when due."""
        nonlocal anchor, since, counted
        from distributed import wait

        while len(running) > block_until:
            task, fut = running[0]
            try:
                wait(fut)
                end = task.first_step + task.n_steps
                need = on_state is not None and due is not None and due(end)
                st = fut.result() if need or (block_until == 0 and len(running) == 1) else None
            except lost as err:
                replay(err)
                continue
            running.popleft()
            if progress is not None and end > counted:
                progress(end - counted)
                counted = end
            if st is not None:
                if st.eta_scale < anchor.eta_scale:
                    warnings.warn(f"the updates diverged before step {st.step}; the step size was halved "
                                  f"to {st.eta_scale:.3g}", RuntimeWarning, stacklevel=4)
                anchor, since = st, since[since.index(task) + 1:]
                if need:
                    on_state(st)
        return anchor

    for task in tasks:
        current = _submit(client, current, task, view, refs, max_restarts, replays)
        running.append((task, current))
        since.append(task)
        settle(read_ahead)
    if not running:
        return state
    return settle(0)
