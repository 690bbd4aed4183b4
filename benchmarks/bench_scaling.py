"""Data-parallel steps on 1 and 2 workers of a ``distributed.LocalCluster``, against the cost model.

A step with ``n_partitions = P`` splits its ``B`` rows over ``P`` parts; each part runs on
the worker holding its chunk and returns ``O(m^2 + m k + k^2)`` sums. Per step the driver
sends the coefficients (``M k`` float64) with each part task, gathers the sums and
applies one update. The cost model

    t_step(W) = ceil(P / W) * t_part + t_comm(W) + t_update

is built from parts measured separately, not fitted to the runs: ``t_part`` is the
compute of one part on one core (``part_sums`` timed in this process on one thread),
``t_update`` the driver's update from the sums, and ``t_comm(W)`` the round trip of one
step's messages on the cluster (``P`` tasks carrying the coefficients out and sums of
the right size back, no compute). The prediction is then checked against the measured
step time on 1 and 2 workers, and extrapolated in the README. Workers run one thread
each (and one BLAS thread each, as distributed sets), so 2 workers use both cores of
this machine.

Run ``python benchmarks/bench_scaling.py`` (``--quick`` for a smoke run). Writes
``results/scaling.json``.
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
    workers: tuple[int, ...] = (1, 2)
    n_partitions: int = 2
    n_rows: int = 131_072
    chunk_rows: int = 16_384
    n_components: int = 10
    n_features: int = 16_384
    block_size: int = 256
    batch_size: int = 4096
    steps: tuple[int, int] = (70, 100)  # two fits; the difference times steady-state steps (budget reached)
    seed: int = 0


PARAMS = Params()
QUICK = replace(PARAMS, n_rows=16_384, chunk_rows=2048, n_features=2048, batch_size=1024, steps=(10, 20))
# ----------------------------------------------------------------------------------------


def _median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _echo(coef, payload):
    """A part task without compute: takes the coefficients, returns sums of the right size."""
    return payload


def comm_round_trip(client, p: Params, coef: np.ndarray, repeats: int = 20) -> float:
    """Median seconds of one step's messages: P tasks carrying ``coef`` out, sums back."""
    from dsgd_dask.rules.statistics import StepSums

    payload = StepSums.empty(p.block_size, p.n_components)

    def one():
        futures = [client.submit(_echo, coef, payload, pure=False) for _ in range(p.n_partitions)]
        client.gather(futures)

    return _median_time(one, repeats)


def local_costs(model, data: np.ndarray, p: Params, repeats: int = 5) -> dict:
    """``t_part`` (one part's sums on one core) and ``t_update`` (the driver's update), in seconds."""
    from threadpoolctl import threadpool_limits

    from dsgd_dask.engine.parallel import apply_sums, part_sums
    from dsgd_dask.engine.steps import StepConfig
    from dsgd_dask.rules.kpca import pca_rule

    coef, features = (model.model_.coef,), (model.model_.features,)
    rule = pca_rule(ordered=False, center=True, guard_limit=np.inf)
    rows = np.arange(p.batch_size // p.n_partitions)
    with threadpool_limits(1):  # one core, as on a worker
        t_part = _median_time(lambda: part_sums(coef, data, rows, 0, features, rule), repeats)
        sums = part_sums(coef, data, rows, 0, features, rule)
    total = sums
    for _ in range(p.n_partitions - 1):
        total = total + sums
    cfg = StepConfig(n_blocks=coef[0].shape[0] // p.block_size, batch_size=p.batch_size, eta_decay=0.01)
    t_update = _median_time(lambda: apply_sums(coef, total, 10_000, 1e-3, features, rule, cfg), repeats)
    return {"t_part": t_part, "t_update": t_update}


def main(argv=None) -> dict:
    import dask.array as da
    import zarr
    from distributed import Client, LocalCluster

    from dsgd_dask import KernelPCA

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS
    assert p.steps[0] * p.block_size >= p.n_features, "the first fit must reach the feature budget"

    x_train, _ = load_mnist()
    data = np.tile(x_train.astype(np.float32), (-(-p.n_rows // len(x_train)), 1))[: p.n_rows]
    tmp = Path(tempfile.mkdtemp(prefix="dsgd-scaling-", dir=Path(__file__).resolve().parent))
    rows = []
    try:
        path = str(tmp / "mnist.zarr")
        zarr.create_array(store=path, data=data, chunks=(p.chunk_rows, data.shape[1]))
        X = da.from_zarr(path)
        params = dict(features="fourier", solver="dsgd", n_components=p.n_components, n_features=p.n_features,
                      block_size=p.block_size,
                      batch_size=p.batch_size, n_partitions=p.n_partitions, random_state=p.seed)
        coefs = {}
        comm = {}
        for w in p.workers:
            with LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                    Client(cluster) as client:
                KernelPCA(**{**params, "n_features": 1024, "max_iter": 4}).fit(X)  # warm the workers
                times = []
                for n in p.steps:
                    t0 = time.perf_counter()
                    model = KernelPCA(**params, max_iter=n).fit(X)
                    times.append(time.perf_counter() - t0)
                coefs[w] = model.model_.coef
                comm[w] = comm_round_trip(client, p, model.model_.coef)
            step = (times[1] - times[0]) / (p.steps[1] - p.steps[0])
            rows.append({"workers": w, "fit_seconds": times, "step_seconds": step,
                         "samples_per_second": p.batch_size / step, "t_comm": comm[w]})
            print(f"{w} worker(s): {step * 1e3:.0f} ms per step, {p.batch_size / step:,.0f} samples/s; "
                  f"messages of a step {comm[w] * 1e3:.1f} ms", flush=True)
        local = local_costs(model, data, p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    identical = all(np.array_equal(coefs[p.workers[0]], c) for c in coefs.values())
    m, k, M = p.block_size, p.n_components, p.n_features
    sums = (m * m + m * k + k * k + m + k + 1) * 8
    comm_bytes = {"coef_per_part": M * k * 8, "sums_per_part": sums,
                  "per_step_total": (M * k * 8 + sums) * p.n_partitions}
    flops = 2 * p.batch_size * data.shape[1] * M + 2 * p.batch_size * M * k + 2 * p.batch_size * m * m
    t_part, t_update = local["t_part"], local["t_update"]
    for r in rows:
        w = r["workers"]
        r["predicted_step_seconds"] = -(-p.n_partitions // w) * t_part + r["t_comm"] + t_update
        r["prediction_error"] = r["predicted_step_seconds"] / r["step_seconds"] - 1
        print(f"{w} worker(s): predicted {r['predicted_step_seconds'] * 1e3:.0f} ms = {-(-p.n_partitions // w)} x "
              f"{t_part * 1e3:.0f} ms (part) + {r['t_comm'] * 1e3:.1f} ms (messages) + {t_update * 1e3:.1f} ms "
              f"(update); measured {r['step_seconds'] * 1e3:.0f} ms ({r['prediction_error']:+.1%})")
    model = {"t_part": t_part, "t_update": t_update, "flop_rate_per_core": flops / p.n_partitions / t_part,
             "speedup_2": rows[0]["step_seconds"] / rows[1]["step_seconds"] if len(rows) > 1 else None}
    if model["speedup_2"] is not None:
        print(f"speedup 1 -> 2 workers: {model['speedup_2']:.2f}")
    result = {"parameters": asdict(p), "machine": machine_info(), "rows": rows,
              "same_model_on_every_cluster": identical, "communication_bytes": comm_bytes,
              "flops_per_step": flops, "model": model}
    print("same model on 1 and 2 workers:", identical)
    print("wrote", write_json("scaling_quick" if args.quick else "scaling", result))
    return result


if __name__ == "__main__":
    main()
