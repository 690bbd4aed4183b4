"""Threads: one BLAS thread while the package computes, its own threads across feature pages.

OpenBLAS computes single-precision products differently with one thread and with
several (the results differ in the last bits), and a ``distributed`` worker runs its
tasks with one BLAS thread while a laptop runs them with all cores. So that the same
``random_state`` gives the same model on any scheduler, the package computes with one
BLAS thread and parallelises on its own: the feature pages of a step and the row slices
of a pass (fixed by the model and the data's shape, never by the machine) are evaluated
in parallel threads, each with one BLAS thread, and their results are added in page (or
slice) order. The products are then the same calls with the same shapes everywhere, and
so are their results.

While any computation of the package runs, the process's BLAS uses one thread
(reference counted across threads, so that overlapping computations never restore
the limit under each other's feet); the width of the package's own parallelism is the
BLAS thread count the process had before (its cores, or what ``OPENBLAS_NUM_THREADS``
/ ``OMP_NUM_THREADS`` say: one on a ``distributed`` worker started by a nanny). The count
is set with OpenBLAS's ``openblas_set_num_threads_local`` where the library has it (it
works from any thread; the plain setter that threadpoolctl calls is ignored from other
threads once the main thread has set a count), otherwise with threadpoolctl.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

_lock = threading.Lock()
_depth = 0
_saved: list = []
_width = 1
_setters: list | None = None
_pools: dict[int, ThreadPoolExecutor] = {}
_local = threading.local()


def _openblas_setter(lib) -> Callable[[int], object] | None:
    """``openblas_set_num_threads_local`` of an OpenBLAS library, if it has one.

    Unlike ``openblas_set_num_threads`` (which recent OpenBLAS ignores when called from a
    thread other than the main one once the main thread has set a count), it takes effect
    from any thread.
    """
    names = ["openblas_set_num_threads_local",
             f"{getattr(lib, '_symbol_prefix', '')}openblas_set_num_threads_local{getattr(lib, '_symbol_suffix', '')}"]
    for name in names:
        try:
            fn = getattr(lib.dynlib, name)
        except AttributeError:
            continue
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int]
        return fn
    return None


def _blas_setters() -> list:
    """``(get, set)`` thread-count functions of the BLAS libraries loaded (numpy's and scipy's)."""
    global _setters
    if _setters is None:
        from threadpoolctl import ThreadpoolController

        setters = []
        for lib in ThreadpoolController().lib_controllers:
            if lib.user_api != "blas":
                continue
            if lib.get_num_threads() is None:  # a library that does not report (nor take) a count
                continue
            local = _openblas_setter(lib) if lib.internal_api == "openblas" else None
            setters.append((lib.get_num_threads, local or lib.set_num_threads))
        _setters = setters
    return _setters


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with one BLAS thread (nestable, and shared by overlapping threads)."""
    global _depth, _saved, _width
    with _lock:
        if _depth == 0:
            setters = _blas_setters()
            counts = [get() for get, _ in setters]
            _width = max(max(counts, default=os.cpu_count() or 1), 1)
            _saved = [(set_, n) for (_, set_), n in zip(setters, counts, strict=True)]
            for set_, _ in _saved:
                set_(1)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for set_, n in _saved:
                    set_(n)
                _saved = []


def parallel_width() -> int:
    """Threads the package's parallel loops use (the BLAS width the process had)."""
    return _width


def _executor(width: int) -> ThreadPoolExecutor:
    with _lock:
        pool = _pools.get(width)
        if pool is None:
            pool = _pools[width] = ThreadPoolExecutor(max_workers=width, thread_name_prefix="dsgd-compute",
                                                      initializer=_mark_worker)
        return pool


def _mark_worker() -> None:
    _local.worker = True


def map_ordered(fn: Callable, items: Sequence, parallel: bool = True) -> list:
    """``[fn(item) for item in items]``, in parallel threads when it pays; results in order.

    Runs sequentially inside a worker of the pool (no nested waiting), with one item, on
    a width of one, or when ``parallel`` is false. Call it inside :func:`one_blas_thread`.
    """
    if not parallel or len(items) < 2 or _width < 2 or getattr(_local, "worker", False):
        return [fn(item) for item in items]
    return list(_executor(_width).map(fn, items))


def imap_ordered(fn: Callable, items: Sequence, parallel: bool = True) -> Iterator:
    """``fn(item)`` for each item, in order, computed in parallel threads at most a pool's width ahead.

    Like :func:`map_ordered` (and sequential in the same cases), but a generator: the
    results are yielded in the order of ``items`` as they are consumed, and no more than
    one per thread of the pool wait at once, so their memory stays bounded. Call it
    inside :func:`one_blas_thread`.
    """
    if not parallel or len(items) < 2 or _width < 2 or getattr(_local, "worker", False):
        for item in items:
            yield fn(item)
        return
    pool = _executor(_width)
    todo = iter(items)
    pending = deque(pool.submit(fn, item) for item in itertools.islice(todo, _width))
    try:
        while pending:
            result = pending.popleft().result()
            for item in itertools.islice(todo, 1):
                pending.append(pool.submit(fn, item))
            yield result
    finally:
        for future in pending:
            future.cancel()
        for future in pending:
            if not future.cancelled():
                future.exception()  # wait: no thread still writes into a caller's buffers


#: Alignment of :func:`scratch` buffers: BLAS kernels may take paths that depend on the
#: operands' addresses (and round differently), so buffers at a fixed alignment give the
#: same results in any process.
ALIGNMENT = 64


def scratch(name: str, shape: tuple, dtype) -> np.ndarray:
    """A per-thread buffer of at least ``shape``, aligned to :data:`ALIGNMENT` bytes (valid until the next call)."""
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    bufs = getattr(_local, "buffers", None)
    if bufs is None:
        bufs = _local.buffers = {}
    buf = bufs.get((name, dtype.str))
    if buf is None or buf.size < size:
        raw = np.empty(size * dtype.itemsize + ALIGNMENT, dtype=np.uint8)
        start = -raw.ctypes.data % ALIGNMENT
        buf = bufs[(name, dtype.str)] = raw[start:start + size * dtype.itemsize].view(dtype)
    return buf[:size].reshape(shape)
