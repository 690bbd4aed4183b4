"""Full-data passes against the float32 GEMM roofline: one pass per kernel family and budget, threads and a cluster.

One pass of the subspace solver (``Cov(z) V`` and the mean of ``z`` over every row,
:func:`~dsgd_dask.engine.passes.covariance_request`) with Nyström kernel sections
(``whiten=False``, one block of ``M`` landmarks) and ``p`` directions, over in-memory
float32 rows of 784 uniform random pixels, for every kernel family and ``M`` in
``budgets``. Each pass is timed

* on threads: numpy input, the package's own threads (every core of the machine);
* on a ``distributed.LocalCluster`` of 2 single-threaded worker processes: the same rows
  as a dask array of two row chunks held by the workers (``persist``), the feature set
  scattered once;
* on one BLAS thread (``one thread``), by the CPU seconds of the process, against the
  flops per CPU-second of the same GEMM on one thread: what other work on the machine
  cannot hide (its ``seconds`` are CPU seconds).

Its rate (flops counted as ``2 n M (d + 2 p)``) is set against the float32 GEMM rate of a
4096 x 4096 by 4096 x 4096 product on all cores (best of three), measured in the same
run just before each pass; the pass's time is the best of ``repeats`` (three) too, all
of them in the JSON. Laplacian and Cauchy sections have no GEMM (an L1 distance, a
product over the input features, in compiled loops): their fraction of the roofline is
the same flop count over the same GEMM rate.

The JSON records threadpoolctl's BLAS configuration, the ``OPENBLAS_*`` environment and
the load other processes put on the machine during each pass (``foreign_cores``; none for
the CPU seconds on one thread). The
sums of the two schedulers are compared bit for bit (``identical_to_threads``) where both
cut the rows alike (two row chunks of :data:`~dsgd_dask.engine.passes.SLAB_ROWS` rows);
``--quick`` compares the cluster's with those of the local threaded scheduler on the
same row chunks.

Run ``python benchmarks/bench_roofline.py`` (``--quick`` for a smoke run in seconds;
``--name`` for another result file). Writes ``results/roofline.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, _jsonable, machine_info, run_clean

#: Kernel families, with the shape parameter of Matérn and arc-cosine kernels.
FAMILIES = {"gaussian": {}, "matern": {"nu": 1.5}, "arccos": {"order": 1}, "laplacian": {}, "cauchy": {}}


@dataclass(frozen=True)
class Params:
    n_rows: int = 65_536
    n_features_in: int = 784
    directions: int = 30
    budgets: tuple = (1024, 4096, 16384)
    families: tuple = tuple(FAMILIES)
    gemm_size: int = 4096
    workers: int = 2
    repeats: int = 3
    seed: int = 0


PARAMS = Params()
QUICK = replace(PARAMS, n_rows=4096, n_features_in=64, budgets=(256,), gemm_size=512, repeats=1)


def gemm_rate(size: int, clock=time.perf_counter) -> float:
    """float32 flops per second of ``clock`` of a ``size``-square product on all cores (best of three)."""
    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    a @ b
    best = np.inf
    for _ in range(3):
        t0 = clock()
        a @ b
        best = min(best, clock() - t0)
    return 2 * size**3 / best


def gemm_cpu_rate(size: int) -> float:
    """float32 flops per CPU-second of the same product on one BLAS thread (best of three)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return gemm_rate(size, time.process_time)


def bandwidth(family: str, d: int) -> float:
    """The median distance of uniform random rows in ``[0, 1)^d``: L1 ``d / 3``, Euclidean ``sqrt(d / 6)``."""
    return d / 3 if family == "laplacian" else float(np.sqrt(d / 6))


def blas_config() -> dict:
    """threadpoolctl's view of the BLAS libraries loaded, and the BLAS-related environment."""
    from threadpoolctl import threadpool_info

    return {"threadpools": threadpool_info(),
            "env": {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP_", "MKL_"))}}


def main(argv=None) -> dict:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_limits

    from dsgd_dask.engine.passes import SLAB_ROWS, covariance_request, reduce_pass
    from dsgd_dask.features.kernels import KernelSpec
    from dsgd_dask.features.nystroem import NystroemFeatures
    from dsgd_dask.streams.inputs import as_view

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small rows, budgets and GEMM: a smoke run in seconds")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=None)
    parser.add_argument("--budgets", nargs="+", type=int, default=None)
    parser.add_argument("--name", default=None, help="result file name (default roofline, roofline_quick)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default benchmarks/results)")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS
    if args.families:
        p = replace(p, families=tuple(args.families))
    if args.budgets:
        p = replace(p, budgets=tuple(args.budgets))
    d, q = p.n_features_in, p.directions
    rng = np.random.default_rng(p.seed)
    data = rng.random((p.n_rows, d), dtype=np.float32)
    cases = []
    for family in p.families:
        spec = KernelSpec(family, bandwidth(family, d), **FAMILIES[family])
        for M in p.budgets:
            landmarks = data[np.sort(rng.choice(len(data), M, replace=False))].astype(np.float64)
            features = NystroemFeatures(spec, landmarks, M, p.seed, "float32", whiten=False)
            V = rng.standard_normal((M, q))
            shift = np.zeros(M)
            cases.append({"family": family, "M": M, "n": p.n_rows, "features": features, "V": V, "shift": shift})

    def request(case):
        """The pass of a case: ``Cov(z) V`` and the mean of ``z``."""
        return covariance_request(case["features"], 1, case["V"], case["shift"])

    def timed(fn):
        """The pass's result, its ``repeats`` times, and the foreign load."""
        def once():
            times = []
            for _ in range(p.repeats):
                t0 = time.perf_counter()
                out = fn()
                times.append(time.perf_counter() - t0)
            return out, times
        (out, times), info = run_clean(once, attempts=1, wait=False)
        return out, times, info["foreign_cores"]

    rows, sums = [], {}
    name = args.name or ("roofline_quick" if args.quick else "roofline")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"

    def write(payload):
        path.write_text(json.dumps(_jsonable(payload), indent=2) + "\n")

    def record(case, scheduler, times, gemm, foreign):
        flops = 2 * case["n"] * case["M"] * (d + 2 * q)
        seconds = min(times)  # the best of the repeats, as the GEMM's
        row = {"family": case["family"], "M": case["M"], "n": case["n"], "scheduler": scheduler, "seconds": seconds,
               "all_seconds": times,
               "gflops": flops / seconds / 1e9, "gemm_gflops": gemm / 1e9, "fraction": flops / seconds / gemm,
               "foreign_cores": foreign}
        rows.append(row)
        load = "" if foreign is None else f" (foreign cores {foreign:.2f})"
        print(f"{row['family']:>9} M={row['M']:>5} n={row['n']:>6} {scheduler:>10}: {seconds:7.2f} s "
              f"{row['gflops']:6.1f} GF/s, GEMM {row['gemm_gflops']:6.1f} GF/s, fraction {row['fraction']:.2f}"
              f"{load}", flush=True)
        write({"params": asdict(p), "blas": config, "rows": rows, "complete": False})  # a stopped run keeps its rows

    config = {"client": blas_config()}
    # on threads: numpy rows, the package's threads
    for case in cases:
        view = as_view(data[:case["n"]])

        def one_pass(case=case, view=view):
            return reduce_pass(view, request(case))

        reduce_pass(as_view(data[:256]), request(case))  # warm
        gemm = gemm_rate(p.gemm_size)
        totals, times, foreign = timed(one_pass)
        sums[(case["family"], case["M"], "threads")] = totals
        record(case, "threads", times, gemm, foreign)
    # on one BLAS thread, in CPU seconds
    for case in cases:
        view = as_view(data[:case["n"]])
        gemm = gemm_cpu_rate(p.gemm_size)
        times = []
        with threadpool_limits(limits=1, user_api="blas"):
            for _ in range(p.repeats):
                t0 = time.process_time()
                reduce_pass(view, request(case))
                times.append(time.process_time() - t0)
        record(case, "one thread", times, gemm, None)
    # on a cluster of single-threaded workers: two row chunks held by the workers
    with LocalCluster(n_workers=p.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        config["workers"] = client.run(blas_config)
        repeats = itertools.count()
        for case in cases:
            n = case["n"]
            chunk = -(-n // p.workers)
            X = client.persist(da.from_array(data[:n], chunks=(chunk, d)))
            view = as_view(X)
            key = client.scatter(case["features"], broadcast=True, hash=False)

            def one_pass(case=case, view=view, key=key):
                # each repeat under new task names: the scheduler would answer a repeat of the same keys at once
                return reduce_pass(view, request(case), lambda f: key, salt=f"repeat-{next(repeats)}")

            # warm: imports, thread pools, the features prepared on each worker (small chunks on both)
            small = as_view(da.from_array(data[:64 * p.workers * 4], chunks=(64, d)))
            reduce_pass(small, request(case), lambda f, key=key: key)
            gemm = gemm_rate(p.gemm_size)
            totals, times, foreign = timed(one_pass)
            record(case, "cluster", times, gemm, foreign)
            if chunk == SLAB_ROWS:  # the numpy rows were cut alike
                ref = sums[(case["family"], case["M"], "threads")]
            elif args.quick:  # the same chunks on the local threaded scheduler
                with dask.config.set(scheduler="threads"):
                    ref = reduce_pass(as_view(da.from_array(data[:n], chunks=(chunk, d))), request(case))
            else:
                ref = None
            if ref is not None:
                rows[-1]["identical_to_threads"] = bool(
                    np.array_equal(totals.views[0].products, ref.views[0].products)
                    and np.array_equal(totals.views[0].sums, ref.views[0].sums)
                    and np.array_equal(totals.directions, ref.directions))
            del X, key
    table = ["| kernel | M | rows | threads: s | GF/s | fraction | cluster: s | GF/s | fraction "
             "| one thread: CPU s | fraction |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for case in cases:
        t, c, o = (next(r for r in rows if r["family"] == case["family"] and r["M"] == case["M"]
                        and r["scheduler"] == s) for s in ("threads", "cluster", "one thread"))
        table.append(f"| {case['family']} | {case['M']} | {case['n']} | {t['seconds']:.2f} | {t['gflops']:.0f} | "
                     f"{t['fraction']:.2f} | {c['seconds']:.2f} | {c['gflops']:.0f} | {c['fraction']:.2f} | "
                     f"{o['seconds']:.2f} | {o['fraction']:.2f} |")
    print("\n".join(table))
    payload = {"params": asdict(p), "machine": machine_info(), "blas": config, "rows": rows, "table": table,
               "complete": True}
    write(payload)
    payload["path"] = path
    return payload


if __name__ == "__main__":
    main()
