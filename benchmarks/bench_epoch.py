"""One epoch over a Zarr store against its parts: reading alone, computing alone.

Three timings, side by side, of the same epoch (same chunk order, same steps):

* ``read``: only read and decompress every chunk of the store (the faster of a
  sequential pass in the fit's chunk order and a parallel pass with dask threads);
* ``compute``: the fit on the same rows already in memory (a dask array over numpy
  chunks of the same shape, so the plan and the steps are identical);
* ``fit``: the fit on the Zarr store, reading the next chunk while the current one is
  used.

With I/O overlapped, ``fit <= 1.1 x max(read, compute)``. The store holds MNIST digits
(784 pixels scaled to [0, 1], float32, zstd-compressed as zarr writes by default),
tiled to ``n_rows`` rows. Reads come from the page cache after a warm-up pass (the
cold-disk case is the memory benchmark's large store).

Run ``python benchmarks/bench_epoch.py`` (``--quick`` for a smoke run). Writes
``results/epoch.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from _common import load_mnist, machine_info, write_json


# --- parameters ------------------------------------------------------------------------
@dataclass(frozen=True)
class Params:
    n_rows: int = 245_760
    chunk_rows: int = 16_384
    n_components: int = 10
    n_features: int = 16_384
    batch_size: int = 1024
    repeats: int = 2  # best of
    seed: int = 0


PARAMS = Params()
QUICK = replace(PARAMS, n_rows=32_768, chunk_rows=4096, n_features=2048, repeats=1)
# ----------------------------------------------------------------------------------------


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> dict:
    import dask
    import dask.array as da
    import zarr

    from dsgd_dask import KernelPCA
    from dsgd_dask.streams import as_view, chunk_tasks

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS

    x_train, _ = load_mnist()
    reps = -(-p.n_rows // len(x_train))
    data = np.tile(x_train.astype(np.float32), (reps, 1))[: p.n_rows]
    steps = p.n_rows // p.batch_size
    fit_params = dict(features="fourier", solver="dsgd", n_components=p.n_components, n_features=p.n_features,
                      batch_size=p.batch_size,
                      max_iter=steps, random_state=p.seed)
    tmp = Path(tempfile.mkdtemp(prefix="dsgd-epoch-", dir=Path(__file__).resolve().parent))
    try:
        path = str(tmp / "mnist.zarr")
        zarr.create_array(store=path, data=data, chunks=(p.chunk_rows, data.shape[1]))
        stored = da.from_zarr(path)
        in_memory = da.from_array(data, chunks=stored.chunks)
        view = as_view(stored)
        order = [t.chunks[0] for t in chunk_tasks(view, p.batch_size, p.seed, 0, steps)]

        def read_sequential():
            for c in order:
                np.asarray(stored.blocks[c].compute(scheduler="sync"))

        def read_parallel():
            stored.map_blocks(lambda b: np.zeros((1, 1), b.dtype), chunks=(1, 1)).compute(scheduler="threads")

        read_sequential()  # warm the page cache
        read_s = {"sequential": _best(read_sequential, p.repeats), "parallel": _best(read_parallel, p.repeats)}
        with dask.config.set(scheduler="threads"):
            compute_s = _best(lambda: KernelPCA(**fit_params).fit(in_memory), p.repeats)
            fit_s = _best(lambda: KernelPCA(**fit_params).fit(stored), p.repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    read = min(read_s.values())
    bound = max(read, compute_s)
    result = {
        "parameters": asdict(p), "machine": machine_info(),
        "store_bytes_uncompressed": data.nbytes,
        "read_seconds": read_s, "compute_seconds": compute_s, "fit_seconds": fit_s,
        "fit_over_max_read_compute": fit_s / bound,
        "fit_over_read_plus_compute": fit_s / (read + compute_s),
        "samples_per_second_fit": steps * p.batch_size / fit_s,
    }
    print(f"read only: {read:.2f}s (sequential {read_s['sequential']:.2f}s, parallel {read_s['parallel']:.2f}s); "
          f"compute only: {compute_s:.2f}s; fit on the store: {fit_s:.2f}s = "
          f"{result['fit_over_max_read_compute']:.3f} x max(read, compute)")
    print("wrote", write_json("epoch_quick" if args.quick else "epoch", result))
    return result


if __name__ == "__main__":
    main()
