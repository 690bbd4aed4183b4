"""Accuracy against wall time: KernelPCA's solvers and feature sets, every configuration in one run.

On a Zarr store of shifted MNIST training digits (every row a training digit moved by up
to 2 pixels in each direction, seeded; uint8, chunks of 8192 rows), Gaussian kernel with
the median bandwidth, every method is fitted on the store in one run and judged by
``sin^2`` of the largest principal angle between its projections of the 10,000 MNIST
test digits and those of a reference:

* ``KernelPCA(solver="subspace")`` (what ``"auto"`` runs): its defaults (Nyström blocks,
  full-data passes), other budgets, and the same budgets split into blocks of 1024 (each
  whitened on its own: ``whitening="block"``);
* ``KernelPCA(solver="subspace", features="fourier")``: Fourier blocks with the passes;
* ``KernelPCA(solver="dsgd", features="fourier")``, the paper's algorithm: defaults, and
  16,384 features with batches of 1024 for one epoch;
* ``KernelPCA(solver="rca")`` with Nyström and with Fourier features (one pass of the
  feature moments, dense eigensolve) at m = 256 ... 8192.

**Reference.** A converged float64 solve on one Nyström block of ``reference_features``
landmarks (``KernelPCA(n_features=R, block_size=R, tol=1e-9, compute_dtype="float64")``:
the problem ``KernelPCA(solver="rca", n_features=R)`` solves exactly, see
``tests/test_subspace.py``), for two
independent landmark draws; their agreement (``sin^2`` between the two) is recorded and
bounds how small a reported ``sin^2`` can meaningfully be.

The reference projections are kept beside the stores (``results/stores/reference_*.npz``)
and reused by later runs with the same store, k, landmarks and seeds.

Configurations predicted to take longer than ``max_seconds`` (from their flop count and
the machine's GEMM rate measured in the run) are not run and are listed as skipped.

Run ``python benchmarks/bench_frontier.py`` (``--quick`` for a smoke run; ``--rows`` and
``--components`` choose the cases). Writes ``results/frontier.json`` and ``frontier.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from _common import (
    RESULTS_DIR,
    STORES_DIR,
    default_budget,
    figure_path,
    gemm_rate,
    machine_info,
    pass_flops,
    run_clean,
    shifted_mnist_store,
    write_json,
)


@dataclass(frozen=True)
class Params:
    rows: tuple[int, ...] = (245_760, 1_048_576)
    components: tuple[int, ...] = (10, 50)
    chunk_rows: int = 8192
    nystroem: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)
    rff: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)
    dsgd_features: tuple[int, ...] = (1024, 4096)  # budgets besides the default
    dsgd_small_blocks: tuple[int, ...] = (2048, 4096)  # the same budgets in blocks of 1024
    reference_features: int = 4096
    reference_seeds: tuple[int, ...] = (101, 102)
    max_seconds: float = 600.0
    seed: int = 0
    wait: bool = True
    only: str | None = None  # regular expression: run only the matching "method label"s


PARAMS = Params()
#: Row labels: the class and its solver (and what differs from the defaults).
SUBSPACE = 'KernelPCA(solver="subspace")'
SUBSPACE_BLOCKS = 'KernelPCA(solver="subspace", whitening="block")'
SUBSPACE_FOURIER = 'KernelPCA(solver="subspace", features="fourier")'
DSGD_FOURIER = 'KernelPCA(solver="dsgd", features="fourier")'
RCA_NYSTROEM = 'KernelPCA(solver="rca", features="nystroem")'
RCA_FOURIER = 'KernelPCA(solver="rca", features="fourier")'
#: The summary's name for the defaults (``KernelPCA()``, which runs the subspace solver).
DEFAULTS = "KernelPCA() defaults"
QUICK = replace(PARAMS, rows=(16_384,), components=(10,), chunk_rows=4096, nystroem=(256, 512), rff=(512,),
                dsgd_features=(1024,), dsgd_small_blocks=(2048,), reference_features=1024, max_seconds=60.0,
                wait=False)
D = 784


def configurations(p: Params, n: int, k: int, rate: float):
    """``(method, label, factory, predicted seconds)`` for every configuration of one case."""
    from dsgd_dask import KernelPCA

    out = []
    f64 = rate / 2.5  # float64 products and kernel matrices: measured about 2.5x slower here
    for m in p.nystroem:
        if m >= k:
            out.append((RCA_NYSTROEM, f"m={m}", lambda m=m: KernelPCA(k, solver="rca", n_features=m,
                                                                      random_state=p.seed),
                        2 * n * m * (D + m) / f64))
    for m in p.rff:
        if m >= k:
            out.append((RCA_FOURIER, f"m={m}",
                        lambda m=m: KernelPCA(k, solver="rca", features="fourier", n_features=m, random_state=p.seed),
                        2 * n * m * (D + m) / rate))
    M = default_budget(k)
    out.append((SUBSPACE, f"defaults, M={M}", lambda: KernelPCA(k, solver="subspace", random_state=p.seed),
                pass_flops(n, M, k) / rate))
    for M in p.dsgd_features:
        if default_budget(k) != M and 2 * k + 10 <= M:
            out.append((SUBSPACE, f"M={M}",
                        lambda M=M: KernelPCA(k, solver="subspace", n_features=M, random_state=p.seed),
                        pass_flops(n, M, k) / rate))
    for M in p.dsgd_small_blocks:
        if 2 * k + 10 <= M:
            out.append((SUBSPACE_BLOCKS, f"M={M}, blocks of 1024",
                        lambda M=M: KernelPCA(k, solver="subspace", n_features=M, block_size=1024,
                                              whitening="block", random_state=p.seed),
                        pass_flops(n, M, k) / rate))
    out.append((SUBSPACE_FOURIER, "M=4096",
                lambda: KernelPCA(k, solver="subspace", features="fourier", n_features=4096, random_state=p.seed),
                pass_flops(n, 4096, k) / rate))
    if k <= 256:
        steps = max(250, min(3 * -(-n // 256), 3000))
        out.append((DSGD_FOURIER, "defaults",
                    lambda: KernelPCA(k, features="fourier", solver="dsgd", random_state=p.seed),
                    2 * steps * 256 * 4096 * (D + k) / rate))
        epoch = -(-n // 1024)
        out.append((DSGD_FOURIER, "M=16384, B=1024, 1 epoch",
                    lambda: KernelPCA(k, features="fourier", solver="dsgd", n_features=16384, batch_size=1024,
                                      max_iter=epoch, random_state=p.seed),
                    2 * epoch * 1024 * 16384 * (D + k) / rate))
    return out


def reference(p: Params, X, Xt, k: int, log) -> tuple[np.ndarray, dict]:
    """Test projections of the reference solve, and the agreement of two independent draws."""
    from dsgd_dask import KernelPCA
    from dsgd_dask.metrics import principal_angle_sin2

    R = p.reference_features
    cache = STORES_DIR / (f"reference_f64_{X.shape[0]}_{p.chunk_rows}_{p.seed}_k{k}_R{R}_"
                          f"{'-'.join(map(str, p.reference_seeds))}.npz")
    if cache.exists():  # the same solve of an earlier run (the store is seeded: the same rows)
        with np.load(cache, allow_pickle=False) as f:
            info = json.loads(str(f["info"]))
            info["cached"] = True
            log(f"  reference from {cache.name} (computed in {sum(info['seconds']):.0f} s)")
            return f["projection"], info
    projections, info = [], {"features": R, "seeds": list(p.reference_seeds), "seconds": [], "passes": []}
    for s in p.reference_seeds:
        t0 = time.perf_counter()
        # many directions beyond k: a fast rate, so few passes reach the tight tolerance
        est = KernelPCA(k, n_features=R, block_size=R, n_oversamples=max(90, 2 * k), tol=1e-9, max_iter=40,
                            compute_dtype="float64", random_state=s).fit(X)
        info["seconds"].append(time.perf_counter() - t0)
        info["passes"].append(est.n_iter_)
        info.setdefault("eigenvalues", est.eigenvalues_.tolist())
        projections.append(np.asarray(est.transform(Xt)))
        log(f"  reference seed {s}: {info['seconds'][-1]:.0f} s, {est.n_iter_} passes")
    info["agreement_sin2"] = principal_angle_sin2(projections[0], projections[1])
    np.savez(cache, projection=projections[0], info=json.dumps(info))
    return projections[0], info


def run_case(p: Params, n: int, k: int, rate: float, log) -> dict:
    import dask.array as da

    from dsgd_dask.datasets import load_mnist
    from dsgd_dask.metrics import principal_angle_sin2

    store = shifted_mnist_store(n, p.chunk_rows, p.seed)
    X = da.from_zarr(str(store))
    Xt = load_mnist("test")[0].astype(np.float32) / 255.0
    X = X / np.float32(255.0)  # lazy, per chunk
    log(f"case n={n:,} k={k}: store {store}")
    ref, ref_info = reference(p, X, Xt, k, log)
    log(f"  reference agreement sin^2 = {ref_info['agreement_sin2']:.2e}")
    runs, skipped = [], []
    for method, label, make, predicted in configurations(p, n, k, rate):
        if p.only and not re.search(p.only, f"{method} {label}"):
            continue
        if predicted > p.max_seconds:
            skipped.append({"method": method, "label": label, "predicted_seconds": predicted})
            log(f"  skip {method} {label}: predicted {predicted:.0f} s")
            continue
        gc.collect()

        def fit(make=make):
            est = make()
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                est.fit(X)
            return est, time.perf_counter() - t0, [str(w.message) for w in caught]

        (est, seconds, warns), info = run_clean(fit, attempts=1, wait=p.wait)
        sin2 = principal_angle_sin2(np.asarray(est.transform(Xt)), ref)
        rec = {"method": method, "label": label, "params": {kk: v for kk, v in est.get_params().items()
                                                              if not callable(v)},
               "fit_seconds": seconds, "sin2": sin2, "predicted_seconds": predicted,
               "n_features": getattr(est, "n_features_", None),
               "n_iter": getattr(est, "n_iter_", None), "convergence": getattr(est, "convergence_", None),
               "foreign_cores": info["foreign_cores"], "warnings": warns}
        runs.append(rec)
        log(f"  {method:50s} {label:26s} {seconds:8.1f} s  sin^2 {sin2:.2e}  (foreign {info['foreign_cores']:.2f})")
    return {"n_rows": n, "n_components": k, "reference": ref_info, "runs": runs, "skipped": skipped,
            "summary": summarise(runs)}


def summarise(runs: list[dict], target: float = 1e-3) -> dict:
    """Fastest configuration of each method reaching ``sin^2 <= target``; the defaults against rca's fastest."""
    best = {}
    for r in runs:
        fam = DEFAULTS if r["method"] == SUBSPACE and r["label"].startswith("defaults") else r["method"]
        if r["sin2"] <= target and (fam not in best or r["fit_seconds"] < best[fam]["fit_seconds"]):
            best[fam] = {"label": r["label"], "fit_seconds": r["fit_seconds"], "sin2": r["sin2"]}
    out = {"target_sin2": target, "fastest": best}
    if DEFAULTS in best and RCA_NYSTROEM in best:
        out["defaults_over_fastest_rca_nystroem"] = best[DEFAULTS]["fit_seconds"] / best[RCA_NYSTROEM]["fit_seconds"]
    return out


def plot(cases: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cases), figsize=(6.5 * len(cases), 5), squeeze=False)
    for ax, case in zip(axes[0], cases, strict=True):
        families = {}
        for r in case["runs"]:
            families.setdefault(r["method"], []).append(r)
        for i, (name, rs) in enumerate(families.items()):
            rs = sorted(rs, key=lambda r: r["fit_seconds"])
            t = [r["fit_seconds"] for r in rs]
            s = [max(r["sin2"], 1e-7) for r in rs]
            ax.plot(t, s, marker="os^vD<>p"[i % 8], label=name, lw=1 if len(rs) > 1 else 0)
            for r in rs:
                ax.annotate(r["label"], (r["fit_seconds"], max(r["sin2"], 1e-7)), fontsize=6)
        ax.axhline(case["reference"]["agreement_sin2"], color="gray", ls=":", label="reference agreement")
        ax.axhline(1e-3, color="k", lw=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("fit wall time (s)")
        ax.set_ylabel("sin² of largest principal angle to the reference")
        ax.set_title(f"shifted MNIST, n = {case['n_rows']:,}, k = {case['n_components']}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a minute")
    parser.add_argument("--rows", type=int, nargs="+", help="store sizes (default: 245760 1048576)")
    parser.add_argument("--components", type=int, nargs="+", help="k values (default: 10 50)")
    parser.add_argument("--max-seconds", type=float, help="skip configurations predicted to take longer")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for the machine to be idle")
    parser.add_argument("--name", help="result file name (default: frontier, frontier_quick)")
    parser.add_argument("--only", help="run only the configurations whose 'method label' matches this regex")
    parser.add_argument("--dsgd-features", type=int, nargs="+",
                        help="subspace solver's feature budgets besides the default (default: 1024 4096)")
    parser.add_argument("--reference-features", type=int,
                        help="landmarks of the one-block reference solve (default: 4096)")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS
    if args.rows:
        p = replace(p, rows=tuple(args.rows))
    if args.components:
        p = replace(p, components=tuple(args.components))
    if args.max_seconds:
        p = replace(p, max_seconds=args.max_seconds)
    if args.no_wait:
        p = replace(p, wait=False)
    if args.only:
        p = replace(p, only=args.only)
    if args.dsgd_features:
        p = replace(p, dsgd_features=tuple(args.dsgd_features))
    if args.reference_features:
        p = replace(p, reference_features=args.reference_features)
    name = args.name or ("frontier_quick" if args.quick else "frontier")
    rate = gemm_rate()

    def log(msg):
        print(msg, flush=True)

    log(f"float32 GEMM rate {rate / 1e9:.0f} GF/s")
    t0 = time.perf_counter()
    cases = []
    for n in p.rows:
        for k in p.components:
            cases.append(run_case(p, n, k, rate, log))
            payload = {"params": asdict(p), "machine": machine_info(), "gemm_rate": rate, "cases": cases,
                       "seconds": time.perf_counter() - t0}
            write_json(name, payload)
    plot(cases, figure_path(name))
    log(f"wrote {RESULTS_DIR / (name + '.json')} and {figure_path(name)}")
    for case in cases:
        log(f"n={case['n_rows']:,} k={case['n_components']}: {case['summary']}")
    return payload


if __name__ == "__main__":
    main()
