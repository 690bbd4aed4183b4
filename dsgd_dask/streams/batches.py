"""Seeded mini-batch plans: which rows every update step sees.

A plan is a sequence of *chunk tasks*; each names a slab of rows (a dask chunk, or a
piece of a per-epoch permutation of an in-memory array), the number of steps taken on
it and the seed that shuffles its rows into mini-batches. The plan depends only on the
seed and the shapes, never on the scheduler, so every scheduler takes the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np

from dsgd_dask.streams.inputs import DataView, check_finite_block

#: Spawn-key tag separating data streams from feature blocks (which use ``(j,)``).
STREAM_TAG = 0x5354
SAMPLE_TAG = 0x5341
#: Spawn-key tag of the landmark draw (Nyström features).
LANDMARK_TAG = 0x4E59
#: Spawn-key tag of the row-chunk subsets of the subspace solver's sampled stages.
STAGE_TAG = 0x5347
#: Spawn-key tag of the per-view feature seeds of two-view methods: two views never share frequencies.
VIEW_TAG = 0x5657
#: Mini-batches per slab of an in-memory array.
BATCHES_PER_SLAB = 64


def stream_rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(STREAM_TAG, *key))))


def view_seed(seed: int, view: int) -> int:
    """The root seed of the feature blocks of input view ``view`` (0: ``X``, 1: ``Y``) of a fit seeded ``seed``."""
    state = np.random.SeedSequence(seed, spawn_key=(VIEW_TAG, view)).generate_state(1, np.uint64)[0]
    return int(state >> np.uint64(1))


@dataclass(frozen=True)
class ChunkTask:
    """Steps ``first_step .. first_step + n_steps - 1`` on one slab of rows."""

    epoch: int
    chunks: tuple[int, ...]  # dask chunk indices (rows shuffled together), or () for an in-memory slab
    rows: object  # index array of an in-memory slab, or None
    n_rows: int
    first_step: int
    n_steps: int
    seed: int  # shuffles the slab's rows into mini-batches

    def batches(self, n_rows: int, batch_size: int) -> list[np.ndarray]:
        """Row indices (into the slab) of this task's mini-batches."""
        rng = np.random.Generator(np.random.SFC64(self.seed))
        perm = rng.permutation(n_rows)
        n_split = max(1, -(-n_rows // batch_size))
        return np.array_split(perm, n_split)[: self.n_steps]


def _epoch_slabs(view: DataView, rng: np.random.Generator, slab_rows: int, shuffle_chunks: int):
    """``(chunks, rows, n_rows, seed)`` of every slab of one epoch, in the epoch's order."""
    if view.is_dask:
        sizes = view.data.chunks[0]
        order = [int(c) for c in rng.permutation(len(sizes))]
        slabs = [tuple(order[i:i + shuffle_chunks]) for i in range(0, len(order), shuffle_chunks)]
        slabs = [(chunks, None, sum(sizes[c] for c in chunks)) for chunks in slabs]
    else:
        perm = rng.permutation(view.n_samples)
        slabs = [((), np.sort(perm[a:a + slab_rows]), len(perm[a:a + slab_rows]))
                 for a in range(0, view.n_samples, slab_rows)]
    seeds = rng.integers(0, 2**63, size=len(slabs))
    for (chunks, rows, n_rows), s in zip(slabs, seeds, strict=True):
        yield chunks, rows, n_rows, int(s)


def chunk_tasks(view: DataView, batch_size: int, seed: int, first_step: int, n_steps: int,
                epoch_offset: int = 0, shuffle_chunks: int = 1, partitions: int = 1):
    """Yield the tasks of ``n_steps`` steps starting at global step ``first_step``.

    Per epoch the dask chunks come in a seeded order, ``shuffle_chunks`` consecutive ones
    forming one slab whose rows are shuffled together (a shuffle buffer over several
    chunks); an in-memory array is permuted whole and cut into slabs. Epochs are counted
    from ``epoch_offset``; a truncated last task keeps its first mini-batches.

    With ``partitions = P > 1`` the tasks are :class:`PartitionedTask` s: ``P``
    consecutive slabs advanced in lockstep, each step taking ``ceil(batch_size / P)`` rows
    from every slab (data-parallel steps). The plan never depends on the scheduler or
    on the number of workers.
    """
    step = first_step
    end = first_step + n_steps
    epoch = epoch_offset
    part_batch = -(-batch_size // partitions)
    while step < end:
        slabs = list(_epoch_slabs(view, stream_rng(seed, epoch), BATCHES_PER_SLAB * part_batch, shuffle_chunks))
        for i in range(0, len(slabs), partitions):
            group = slabs[i:i + partitions]
            k = min(max(max(1, -(-n_rows // part_batch)) for _, _, n_rows, _ in group), end - step)
            parts = tuple(ChunkTask(epoch, chunks, rows, n_rows, step, k, s) for chunks, rows, n_rows, s in group)
            yield parts[0] if partitions == 1 else PartitionedTask(parts)
            step += k
            if step >= end:
                return
        epoch += 1


@dataclass(frozen=True)
class PartitionedTask:
    """Data-parallel steps over several slabs: step ``i`` takes a sub-batch from each part."""

    parts: tuple[ChunkTask, ...]

    @property
    def first_step(self) -> int:
        return self.parts[0].first_step

    @property
    def n_steps(self) -> int:
        return self.parts[0].n_steps

    @property
    def epoch(self) -> int:
        return self.parts[0].epoch

    def part_batches(self, n_rows: list[int], batch_size: int) -> list[list[np.ndarray]]:
        """Per part, the row indices of every step (empty where a part has run out of rows)."""
        b = -(-batch_size // len(self.parts))
        out = []
        for part, n in zip(self.parts, n_rows, strict=True):
            batches = part.batches(n, b)
            out.append(batches + [np.empty(0, dtype=np.intp)] * (self.n_steps - len(batches)))
        return out


def skip_done(tasks, step: int):
    """The tasks of a plan from global step ``step`` on (a task boundary, e.g. a checkpoint)."""
    for task in tasks:
        if task.first_step + task.n_steps <= step:
            continue
        if task.first_step < step:
            raise ValueError(f"step {step} is not a chunk-task boundary of this plan (task at {task.first_step})")
        yield task


def load_slab(view: DataView, task) -> np.ndarray | list[np.ndarray]:
    """The rows of one task as a numpy array (computes the task's dask chunks, checked one by one).

    For a :class:`PartitionedTask`, a list with one array per part.
    """
    if isinstance(task, PartitionedTask):
        return [load_slab(view, part) for part in task.parts]
    if not view.is_dask:
        return view.data[task.rows]
    parts = dask.compute(*(view.data.blocks[c] for c in task.chunks))
    for c, part in zip(task.chunks, parts, strict=True):
        check_finite_block(part, f"chunk {c}")
    return np.asarray(parts[0]) if len(parts) == 1 else np.concatenate(parts)


def load_pair(views: tuple[DataView, DataView], task: ChunkTask) -> tuple[np.ndarray, np.ndarray]:
    """The rows of one task from two row-aligned views."""
    return load_slab(views[0], task), load_slab(views[1], task)


def sample_rows(view: DataView, n: int, seed: int, key: int = 0) -> np.ndarray:
    """A seeded uniform sample of up to ``n`` rows from all of ``view``, in a seeded random order.

    The rows are drawn without replacement from every row (so from every chunk: data
    stored in order, by class or by time, gives an unbiased sample) and read with one
    compute, each chunk contributing the rows drawn in it. The same seed gives the same
    rows for an array in memory and for a dask or Zarr copy of it. Non-finite rows raise.
    """
    rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(SAMPLE_TAG, key))))
    total = view.n_samples
    n = min(n, total)
    idx = np.sort(rng.choice(total, size=n, replace=False))
    if view.is_dask:
        # one task per chunk with draws, each returning only its drawn rows
        bounds = np.cumsum((0,) + view.data.chunks[0])
        cut = np.searchsorted(idx, bounds)
        chunks = [c for c in range(len(bounds) - 1) if cut[c + 1] > cut[c]]
        parts = dask.compute(*(view.data.blocks[c][idx[cut[c]:cut[c + 1]] - bounds[c]] for c in chunks))
        for c, part in zip(chunks, parts, strict=True):
            check_finite_block(part, f"chunk {c}")
        sample = np.concatenate([np.asarray(part) for part in parts])
    else:
        sample = np.asarray(view.data[idx])
        check_finite_block(sample, "the sample rows")
    return sample[rng.permutation(n)]


def landmark_rows(view: DataView, n: int, seed: int, shuffle: bool = False) -> np.ndarray:
    """``n`` distinct rows drawn uniformly (seeded) from all of ``view``, as float64.

    The rows are read in index order (a lazy input reads only those rows, with one
    compute); with ``shuffle`` they are returned in a seeded random order, so that
    consecutive groups of them are uniform draws too. Non-finite rows raise.
    """
    rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(LANDMARK_TAG,))))
    idx = np.sort(rng.choice(view.n_samples, size=n, replace=False))
    if view.is_dask:
        (rows,) = dask.compute(view.data[idx])
    else:
        rows = view.data[idx]
    rows = np.asarray(rows, dtype=np.float64)
    check_finite_block(rows, "the landmark rows")
    if shuffle:
        rows = rows[rng.permutation(n)]
    return rows


def chunk_subset(sizes, rows: int, seed: int, key: int) -> np.ndarray:
    """Increasing indices of seeded random row chunks (of ``sizes`` rows each) holding at least ``rows`` rows.

    All chunks when they hold fewer. The chunks are drawn uniformly without replacement,
    so the rows they hold are a uniform sample of the chunks, not of the rows: data
    stored in order makes a biased subset.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(STAGE_TAG, key))))
    order = rng.permutation(len(sizes))
    count = int(np.searchsorted(np.cumsum(sizes[order]), rows) + 1)
    return np.sort(order[:count])
