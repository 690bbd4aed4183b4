"""Peak memory of ``KernelPCA.fit`` on Zarr stores of growing size, one larger than RAM.

Each fit runs in a fresh process and reports its peak resident set size (``ru_maxrss``)
and its resident size after the imports, before reading anything. The stores hold
float32 rows of 784 values in chunks of ``chunk_rows`` rows and are generated here
chunk by chunk (uncompressed random values, so the bytes on disk equal the array's
size) and deleted after use.

* ``flat``: the same fit (same steps, same features) on stores of 0.25M, 1M and 4M rows:
  the peak must not grow with n (the 4M / 0.25M ratio is reported).
* ``larger_than_memory``: one full epoch over a store larger than the machine's memory
  (every row read once), with peak RSS compared to 4 GiB.

Run ``python benchmarks/bench_memory.py`` (``--quick`` for a smoke run with small
stores, ``--skip-large`` to leave out the store larger than memory). Writes
``results/memory.json`` and ``results/memory.png``. Needs free disk space of about
1.1 x the memory size in ``--workdir`` (default: a temporary folder beside this file).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from _common import figure_path, machine_info, write_json


# --- parameters ------------------------------------------------------------------------
@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (250_000, 1_000_000, 4_000_000)
    d: int = 784
    chunk_rows: int = 16_384
    n_components: int = 10
    n_features: int = 4096
    batch_size: int = 1024
    max_iter: int = 200  # steps of the "flat" fits (the same for every size)
    large_bytes_over_memory: float = 1.08  # the large store is this many times the machine's memory
    large_batch_size: int = 4096  # one epoch over the large store: n / large_batch_size steps
    seed: int = 0


PARAMS = Params()
QUICK = replace(PARAMS, sizes=(20_000, 80_000), chunk_rows=4096, n_features=1024, max_iter=40)
# ----------------------------------------------------------------------------------------

CHILD = """
import json, os, resource, sys, time
import dask.array as da
import psutil
from dsgd_dask import KernelPCA
args = json.loads(sys.argv[1])
X = da.from_zarr(args.pop("store"))
rss_before = psutil.Process().memory_info().rss
t0 = time.perf_counter()
model = KernelPCA(**args).fit(X)
elapsed = time.perf_counter() - t0
print(json.dumps({"seconds": elapsed, "rss_before_fit": rss_before,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "n_iter": model.n_iter_, "rows_seen": model.n_iter_ * args["batch_size"]}))
"""


def make_store(path: Path, n: int, p: Params) -> float:
    """Write an ``n x d`` float32 store chunk by chunk (uncompressed); returns seconds."""
    import dask.array as da
    import numpy as np
    import zarr

    t0 = time.perf_counter()
    arr = zarr.create_array(store=str(path), shape=(n, p.d), chunks=(p.chunk_rows, p.d), dtype="float32",
                            compressors=None)
    rng = da.random.default_rng(p.seed)
    data = rng.random((n, p.d), chunks=(p.chunk_rows, p.d), dtype=np.float32)
    da.store(data, arr, lock=False)
    return time.perf_counter() - t0


def run_fit(store: Path, **params) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps({"store": str(store), **params})],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    rows = result["flat"]
    xs = [r["n_rows"] for r in rows]
    ax.plot(xs, [r["peak_rss"] / 2**30 for r in rows], "o-", label="peak RSS of fit (same steps)")
    ax.plot(xs, [r["rss_before_fit"] / 2**30 for r in rows], "s--", label="RSS after imports")
    ax.plot(xs, [r["n_rows"] * result["parameters"]["d"] * 4 / 2**30 for r in rows], ":", color="grey",
            label="size of the store")
    big = result.get("larger_than_memory")
    if big:
        ax.plot([big["n_rows"]], [big["peak_rss"] / 2**30], "r*", ms=12,
                label=f"one epoch over a {big['store_bytes'] / 2**30:.0f} GiB store")
        ax.axhline(result["machine"]["memory_bytes"] / 2**30, color="r", lw=0.8, ls="--", label="machine memory")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows in the Zarr store (784 float32 columns)")
    ax.set_ylabel("GiB")
    ax.set_title("KernelPCA.fit memory does not grow with n")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path(__file__).resolve().parent / "results" / "stores")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS
    info = machine_info()
    args.workdir.mkdir(parents=True, exist_ok=True)
    fit_params = dict(features="fourier", solver="dsgd", n_components=p.n_components, n_features=p.n_features,
                      batch_size=p.batch_size,
                      max_iter=p.max_iter, random_state=p.seed)
    result = {"parameters": asdict(p), "machine": info, "flat": []}
    for n in p.sizes:
        store = args.workdir / f"X_{n}.zarr"
        try:
            write_s = make_store(store, n, p)
            r = run_fit(store, **fit_params)
        finally:
            shutil.rmtree(store, ignore_errors=True)
        r.update(n_rows=n, store_bytes=n * p.d * 4, write_seconds=write_s)
        result["flat"].append(r)
        print(f"n={n:>9,}: peak RSS {r['peak_rss'] / 2**20:7.0f} MiB (after imports {r['rss_before_fit'] / 2**20:.0f}"
              f" MiB), fit {r['seconds']:.1f}s", flush=True)
    peaks = [r["peak_rss"] for r in result["flat"]]
    result["flat_ratio_largest_to_smallest"] = peaks[-1] / peaks[0]
    print(f"peak RSS ratio {p.sizes[-1]:,} / {p.sizes[0]:,} rows: {result['flat_ratio_largest_to_smallest']:.3f}")

    if not args.skip_large and not args.quick:
        mem = info["memory_bytes"]
        n = int(p.large_bytes_over_memory * mem / (p.d * 4)) // p.chunk_rows * p.chunk_rows
        free = shutil.disk_usage(args.workdir).free
        if free < n * p.d * 4 * 1.05:
            raise SystemExit(f"not enough disk for the large store: need {n * p.d * 4 / 2**30:.1f} GiB, "
                             f"have {free / 2**30:.1f} GiB in {args.workdir}")
        store = args.workdir / "X_large.zarr"
        try:
            write_s = make_store(store, n, p)
            print(f"wrote {n * p.d * 4 / 2**30:.1f} GiB ({n:,} rows) in {write_s:.0f}s", flush=True)
            steps = -(-n // p.large_batch_size)
            r = run_fit(store, **{**fit_params, "batch_size": p.large_batch_size, "max_iter": steps})
        finally:
            shutil.rmtree(store, ignore_errors=True)
        r.update(n_rows=n, store_bytes=n * p.d * 4, write_seconds=write_s, memory_bytes=mem,
                 peak_under_4GiB=r["peak_rss"] < 4 * 2**30)
        result["larger_than_memory"] = r
        print(f"larger than memory: {n:,} rows ({r['store_bytes'] / 2**30:.1f} GiB store, {mem / 2**30:.1f} GiB "
              f"memory): one epoch in {r['seconds']:.0f}s, peak RSS {r['peak_rss'] / 2**30:.2f} GiB")
    name = "memory_quick" if args.quick else "memory"
    print("wrote", write_json(name, result))
    plot(result, figure_path(name))
    return result


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
