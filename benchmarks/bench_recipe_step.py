"""One block-preconditioned step of the kernel machines against what numpy allows on this machine.

A step of ``KernelLogisticRegression(solver="dsgd", features="fourier",
preconditioner="block")`` (Dai et al.'s recipe) on a batch of ``B`` rows of ``d`` inputs,
with ``t`` active blocks of ``m`` random Fourier features and ``c`` outputs, does:

* the features of the ``t`` active blocks and the new one: ``(B x d) @ (d x m)`` and
  ``cos`` on ``B x m`` per block;
* the function values ``z A``: ``(B x m) @ (m x c)`` per block;
* the new block's second moment ``z^T z`` (``B x m``, a symmetric rank-``B`` update);
* its Cholesky factor and solve (``m x m``, float64).

The limit is the time numpy itself takes for the same operations on all cores, each
measured on its own in the same run: the feature GEMM of all ``t + 1`` blocks as one
``(B x d) @ (d x (t+1) m)`` product with every BLAS thread, ``np.cos`` on the same
number of elements split over the cores' threads, the products with the coefficients,
one ``z^T z`` with every BLAS thread (float32) and the float64 factorisation. The step's
fraction of the limit is ``limit / step time`` (1 would be numpy's own speed, with no
overhead and nothing else done). The square float32 GEMM rate of the run is recorded
beside it, as the machine's peak.

Run ``python benchmarks/bench_recipe_step.py`` (``--quick`` for a smoke run). Writes
``results/recipe_step.json`` (``recipe_step_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.linalg import cho_factor, cho_solve

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, _jsonable, load_average, machine_info, run_clean


@dataclass(frozen=True)
class Params:
    batch: int = 16384  # the batch of svm-mnist8m's recipe (4 rows per feature of the new block)
    d: int = 100
    block_size: int = 4096
    n_classes: int = 10
    active: tuple[int, ...] = (0, 8, 32)  # blocks already fitted when the timed step runs
    repeats: int = 3  # timed steps per configuration (the best is reported)
    seed: int = 0


QUICK = Params(batch=1024, d=20, block_size=256, active=(0, 4), repeats=2)


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def split_cos(a: np.ndarray, pool: ThreadPoolExecutor, threads: int) -> None:
    """``np.cos`` in place, the rows split over ``threads`` threads of ``pool`` (numpy releases the GIL)."""
    bounds = np.linspace(0, len(a), threads + 1).astype(int)
    list(pool.map(lambda i: np.cos(a[bounds[i]:bounds[i + 1]], out=a[bounds[i]:bounds[i + 1]]), range(threads)))


def limits(p: Params, t: int, threads: int) -> dict:
    """Seconds numpy takes for each operation of a step with ``t`` active blocks, on all cores."""
    rng = np.random.default_rng(p.seed)
    B, d, m, c = p.batch, p.d, p.block_size, p.n_classes
    x = rng.random((B, d), dtype=np.float32)
    w = rng.standard_normal((d, (t + 1) * m), dtype=np.float32)
    z = np.empty((B, (t + 1) * m), dtype=np.float32)
    coef = rng.standard_normal(((t + 1) * m, c)).astype(np.float32)
    out = {"features_gemm": best_seconds(lambda: np.matmul(x, w, out=z), p.repeats)}
    with ThreadPoolExecutor(threads) as pool:
        out["cos"] = best_seconds(lambda: split_cos(z, pool, threads), p.repeats)
    out["function_values"] = best_seconds(lambda: z @ coef, p.repeats)
    block = np.ascontiguousarray(z[:, :m])
    out["block_moment"] = best_seconds(lambda: block.T @ block, p.repeats)
    C = (block.T.astype(np.float64) @ block.astype(np.float64)) / B + 1e-3 * np.eye(m)
    G = rng.standard_normal((m, c))
    out["solve"] = best_seconds(lambda: cho_solve(cho_factor(C, lower=True), G), p.repeats)
    out["total"] = sum(out.values())
    return out


def square_gemm_rate(repeats: int, n: int = 4096) -> float:
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    return 2 * n ** 3 / best_seconds(lambda: a @ a, repeats)


def step_seconds(p: Params, t: int) -> float:
    """The package's step with ``t`` active blocks (the best of ``repeats`` steps)."""
    from dsgd_dask import KernelLogisticRegression
    from dsgd_dask.engine.steps import StepConfig, rule_step

    rng = np.random.default_rng(p.seed)
    X = rng.standard_normal((p.batch, p.d)).astype(np.float32)
    y = rng.integers(0, p.n_classes, p.batch)
    y[:p.n_classes] = np.arange(p.n_classes)
    est = KernelLogisticRegression(alpha=0, features="fourier", preconditioner="block", block_size=p.block_size,
                                   n_features=(t + 1) * p.block_size, batch_size=p.batch, max_iter=1,
                                   bandwidth=float(np.sqrt(p.d)), random_state=p.seed).fit(X, y)
    rule, features = est._rule, est._features
    cfg = StepConfig(n_blocks=t + 1, batch_size=p.batch, eta_decay=est._config.eta_decay)
    coef = (rng.standard_normal((t * p.block_size, p.n_classes)) * 1e-3,)
    slab = np.column_stack([X, y.astype(np.float32)])
    from dsgd_dask._threads import one_blas_thread

    def step():
        with one_blas_thread():  # as a chunk task runs its steps
            rule_step(coef, slab, t, 1.0, features, rule, cfg)

    return best_seconds(step, p.repeats)


def run(p: Params, quick: bool) -> dict:
    import os

    threads = os.cpu_count() or 1
    rows = []
    for t in p.active:
        def one(t=t):
            return {"limit": limits(p, t, threads), "step": step_seconds(p, t)}

        measured, info = run_clean(one, wait=not quick, attempts=1 if quick else 3)
        lim = measured["limit"]
        row = {"active_blocks": t, "features": (t + 1) * p.block_size, "step_seconds": measured["step"],
               "limit_seconds": lim["total"], "fraction": lim["total"] / measured["step"],
               "limit_parts": lim, "foreign_cores": info["foreign_cores"]}
        rows.append(row)
        print(f"t = {t:3d}  step {row['step_seconds']:.3f} s  limit {row['limit_seconds']:.3f} s  "
              f"fraction {row['fraction']:.2f}  (other processes: {info['foreign_cores']:.2f} cores)", flush=True)
    return {"params": asdict(p), "quick": quick, "threads": threads,
            "square_gemm_flops": square_gemm_rate(p.repeats), "load_average": load_average(),
            "machine": machine_info(), "rows": rows,
            "solver": "KernelLogisticRegression(solver='dsgd', features='fourier', preconditioner='block')"}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default benchmarks/results)")
    args = parser.parse_args(argv)
    result = run(QUICK if args.quick else Params(), args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("recipe_step_quick.json" if args.quick else "recipe_step.json")
    path.write_text(json.dumps(_jsonable(result), indent=2) + "\n")
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
