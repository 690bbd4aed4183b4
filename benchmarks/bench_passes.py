"""Full-data passes on a distributed cluster: time of one pass on 1 and 2 workers, same sums.

One pass of the subspace solver (``Cov(z) V`` over every row, a reduction over the row
chunks) on the shifted-MNIST store of ``bench_frontier.py``, with the default feature set
of ``KernelPCA(10)`` (2048 Nyström features, 30 directions), timed on a
``distributed.LocalCluster`` of 1 and of 2 single-threaded worker processes, and with the
local threaded scheduler. The sums of every run are compared bit for bit.

Run ``python benchmarks/bench_passes.py`` (``--quick`` for a smoke run).
Writes ``results/passes.json``. (``foreign_cores`` counts the worker processes too: on the
cluster it is high by construction.)
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
from _common import machine_info, run_clean, shifted_mnist_store, write_json


@dataclass(frozen=True)
class Params:
    n_rows: int = 245_760
    chunk_rows: int = 8192
    n_components: int = 10
    repeats: int = 3
    seed: int = 0


PARAMS = Params()
QUICK = replace(PARAMS, n_rows=32_768, chunk_rows=4096, repeats=1)


def main(argv=None) -> dict:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster

    from dsgd_dask import KernelPCA
    from dsgd_dask._threads import one_blas_thread
    from dsgd_dask.engine.passes import covariance_request, covariance_times, reduce_pass
    from dsgd_dask.rules.subspace import orthonormal
    from dsgd_dask.streams.inputs import as_view

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS
    store = shifted_mnist_store(p.n_rows, p.chunk_rows, p.seed)
    X = da.from_zarr(str(store)) / np.float32(255.0)
    # the default feature set, fitted once (one pass) to get its landmarks and shift
    with dask.config.set(scheduler="threads"):
        est = KernelPCA(p.n_components, max_iter=1, random_state=p.seed)
        est._validate_input(X, reset=True)
        with one_blas_thread():
            view = est._validate_input(X, reset=False)
            est._initialise(view)
            shift = est._subspace_solver(view).start()["shift"]  # the warm start's
    features, J = est._features, est._params["n_blocks"]
    width = p.n_components + est._params["n_oversamples"]
    V = orthonormal(np.random.default_rng(0).standard_normal((J * features.block_size, width)))
    view = as_view(X)

    ref = {"features": None}

    def one_pass():
        t0 = time.perf_counter()
        scattered = ref["features"]
        request = covariance_request(features, J, V, shift)
        totals = reduce_pass(view, request, None if scattered is None else (lambda f: scattered))
        sums = covariance_times(totals, features, V, shift, True)
        return sums, time.perf_counter() - t0

    results = {}
    with dask.config.set(scheduler="threads"):
        one_pass()
        times, foreign = [], []
        for _ in range(p.repeats):
            (sums, t), info = run_clean(one_pass, attempts=1)
            times.append(t)
            foreign.append(info["foreign_cores"])
        results["threads"] = {"seconds": times, "foreign_cores": foreign, "cov_times": sums.cov_times}
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
                Client(c) as client:
            # as fit does: the feature set sent to the workers once
            ref["features"] = client.scatter(features, broadcast=True, hash=False)
            one_pass()  # warm the workers (imports)
            times, foreign = [], []
            for _ in range(p.repeats):
                (sums, t), info = run_clean(one_pass, attempts=1)
                times.append(t)
                foreign.append(info["foreign_cores"])
            results[f"workers_{workers}"] = {"seconds": times, "foreign_cores": foreign, "cov_times": sums.cov_times}
            ref["features"] = None
    ref = results["workers_1"]["cov_times"]
    same = {name: bool(np.array_equal(r["cov_times"], ref)) for name, r in results.items()}
    summary = {name: float(np.median(r["seconds"])) for name, r in results.items()}
    speedup = summary["workers_1"] / summary["workers_2"]
    print(f"one pass: {summary}; speed-up 1 -> 2 workers {speedup:.2f}; identical sums: {same}")
    payload = {"params": asdict(p), "machine": machine_info(), "median_seconds": summary,
               "seconds": {k: r["seconds"] for k, r in results.items()},
               "foreign_cores": {k: r["foreign_cores"] for k, r in results.items()}, "speedup_1_to_2_workers": speedup,
               "identical_to_1_worker": same, "n_features": J * features.block_size, "directions": width}
    write_json("passes_quick" if args.quick else "passes", payload)
    return payload


if __name__ == "__main__":
    main()
