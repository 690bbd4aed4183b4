"""Threads: one BLAS thread while the package computes, its own threads across feature pages.

OpenBLAS computes single-precision products differently with one thread and with
several (the results differ in the last bits), and a ``distributed`` worker runs its
tasks with one BLAS thread while a laptop runs them with all cores. So that the same
``random_state`` gives the same model on any scheduler, the package computes with one
BLAS thread and parallelises on its own: the feature pages of a step (fixed by the
model, never by the machine) are evaluated in parallel threads, each with one BLAS
thread, and their results are added in page order. The products are then the same
calls with the same shapes everywhere, and so are their results.

While any computation of the package runs, the process's BLAS uses one thread
(reference counted across threads, so that overlapping computations never restore
the limit under each other's feet); the width of the package's own parallelism is the
BLAS thread count the process had before (its cores, or what ``OPENBLAS_NUM_THREADS``
/ ``OMP_NUM_THREADS`` say: one on a ``distributed`` worker started by a nanny).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from threadpoolctl import threadpool_limits

_lock = threading.Lock()
_depth = 0
_limiter = None
_width = 1
_pool: ThreadPoolExecutor | None = None
_local = threading.local()


def _blas_threads() -> int:
    """The BLAS thread count in force now (the largest over the loaded BLAS libraries)."""
    from threadpoolctl import threadpool_info

    counts = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
    return max(counts) if counts else (os.cpu_count() or 1)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with one BLAS thread (nestable, and shared by overlapping threads)."""
    global _depth, _limiter, _width
    with _lock:
        if _depth == 0:
            _width = max(1, _blas_threads())
            _limiter = threadpool_limits(limits=1, user_api="blas")
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _limiter.restore_original_limits()
                _limiter = None


def parallel_width() -> int:
    """Threads the package's parallel loops use (the BLAS width the process had)."""
    return _width


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1), thread_name_prefix="dsgd-compute",
                                       initializer=_mark_worker)
        return _pool


def _mark_worker() -> None:
    _local.worker = True


def map_ordered(fn: Callable, items: Sequence, parallel: bool = True) -> list:
    """``[fn(item) for item in items]``, in parallel threads when it pays; results in order.

    Runs sequentially inside a worker of the pool (no nested waiting), with one item, on
    a width of one, or when ``parallel`` is false. Call it inside :func:`one_blas_thread`.
    """
    if not parallel or len(items) < 2 or _width < 2 or getattr(_local, "worker", False):
        return [fn(item) for item in items]
    return list(_executor().map(fn, items))


def scratch(name: str, shape: tuple, dtype) -> np.ndarray:
    """A per-thread buffer of at least ``shape`` (reused between calls: valid until the next one)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    bufs = getattr(_local, "buffers", None)
    if bufs is None:
        bufs = _local.buffers = {}
    buf = bufs.get((name, dtype.str))
    if buf is None or buf.size < size:
        buf = bufs[(name, dtype.str)] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)
