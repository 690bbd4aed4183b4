"""Steady-state throughput of ``KernelPCA.fit`` against this machine's GEMM rate.

For each batch size ``B``, feature budget ``M``, feature precision and block-cache
setting, one fit runs on MNIST rows (784 pixels scaled to [0, 1]). The fit callback
timestamps the end of every chunk of steps; only chunks after the feature budget is
reached are timed (the growth phase, in which steps are cheaper, and the set-up are
excluded). The result is samples/s and the achieved flop rate

    flops per step = 2 B d M  (features: X W, then cos)  +  2 B M k  (h = z A)

divided by the step time, as a fraction of the rate of a plain numpy GEMM of the
shape a step uses, ``(B x d) @ (d x 4096)`` on all cores in the same precision,
measured in the same run. A second model adds the measured cost of ``np.cos`` on the page
and, without the cache, of regenerating the frequencies: the step time numpy itself
would need, which separates the package's overhead from the limits of the kernels
it calls.

Run ``python benchmarks/bench_throughput.py`` (``--quick`` for a smoke run).
Writes ``results/throughput.json`` and ``results/throughput.png``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
from _common import figure_path, load_average, load_mnist, machine_info, result_path, run_clean, write_json


# --- parameters ------------------------------------------------------------------------
@dataclass(frozen=True)
class Params:
    batch_sizes: tuple[int, ...] = (256, 1024)
    n_features: tuple[int, ...] = (4096, 16384)
    dtypes: tuple[str, ...] = ("float32", "float64")
    caches: tuple[tuple[str, int | None], ...] = (("cached", None), ("regenerated", 0))  # (label, cache_bytes)
    n_components: int = 10
    block_size: int = 256
    n_rows: int = 49_152  # MNIST training rows used (trimmed to a multiple of the batch size)
    min_timed_steps: int = 128  # steady-state steps timed per fit (at least two chunks)
    repeats: int = 3  # fits per configuration (the median is reported)
    ref_rounds: int = 5  # timed rounds of each reference kernel; the best round is the machine's rate
    ref_round_seconds: float = 0.4
    idle_cores: float = 0.25  # a measurement is clean when other processes used fewer cores on average
    attempts: int = 3  # measurements repeated while other processes interfere (the cleanest is kept)
    idle_timeout: float = 900.0  # longest wait for the machine to become idle before a measurement
    seed: int = 0


PARAMS = Params()
QUICK = replace(PARAMS, batch_sizes=(256,), n_features=(1024, 2048), n_rows=8192, min_timed_steps=32,
                ref_rounds=2, ref_round_seconds=0.1, repeats=2, attempts=1, idle_timeout=60.0)
# ----------------------------------------------------------------------------------------


def _best_rate(fn, work: float, rounds: int, seconds: float) -> dict:
    """``work`` units per second of ``fn()``: best and median over timed rounds (warm-up excluded)."""
    for _ in range(3):
        fn()
    rates = []
    for _ in range(rounds):
        n = 0
        t0 = time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
        rates.append(n * work / elapsed)
    return {"best": max(rates), "median": float(np.median(rates)), "rounds": rates}


#: Width of the reference GEMM ``(B x d) @ (d x REFERENCE_COLUMNS)``: a wide product on all
#: cores, the machine's best case (wider than one page of the package).
REFERENCE_COLUMNS = 4096


def reference_rates(p: Params, batch: int, d: int, dtype: str) -> dict:
    """Reference rates for one precision and batch size.

    * GEMM (flop/s): numpy ``(B x d) @ (d x REFERENCE_COLUMNS)`` on all BLAS threads, with
      ``W`` C-contiguous and with ``W`` the transpose of a C-contiguous
      ``(REFERENCE_COLUMNS x d)`` array; the faster layout is the machine's rate.
    * ``np.cos`` (elements/s) on ``(B x PAGE_COLUMNS)`` pages of feature-sized arguments,
      ``REFERENCE_COLUMNS`` columns in all, spread over the package's threads as a step does.
    * Page regeneration (normals/s): the package's own generator filling the pages of
      ``REFERENCE_COLUMNS`` frequencies with the cache off, in the package's threads, as a
      step without cache does.
    """
    from dsgd_dask._threads import map_ordered, one_blas_thread
    from dsgd_dask.features import RandomFeatures
    from dsgd_dask.features.blocks import PAGE_COLUMNS
    from dsgd_dask.features.kernels import parse_kernel

    rng = np.random.default_rng(p.seed)
    x = rng.random((batch, d)).astype(dtype)
    w = rng.standard_normal((d, REFERENCE_COLUMNS)).astype(dtype)
    wt = np.ascontiguousarray(w.T)
    out = np.empty((batch, REFERENCE_COLUMNS), dtype=dtype)
    rounds, seconds = p.ref_rounds, p.ref_round_seconds
    flops = 2.0 * batch * d * REFERENCE_COLUMNS
    layouts = {"W": _best_rate(lambda: np.matmul(x, w, out=out), flops, rounds, seconds),
               "WT.T": _best_rate(lambda: np.matmul(x, wt.T, out=out), flops, rounds, seconds)}
    best = max(layouts, key=lambda key: layouts[key]["best"])
    gemm = {**layouts[best], "layout": best, "layouts": layouts}
    # arguments of the size the features meet: (x - c) W + b with W ~ N(0, 1/sigma^2)
    n_pages = REFERENCE_COLUMNS // PAGE_COLUMNS
    args = [(rng.standard_normal((batch, PAGE_COLUMNS)) + rng.uniform(0, 2 * np.pi, (batch, PAGE_COLUMNS)))
            .astype(dtype) for _ in range(n_pages)]
    zs = [np.empty_like(a) for a in args]
    feats = RandomFeatures(parse_kernel("gaussian", 1.0), d, p.block_size, p.seed, dtype, cache_bytes=0)
    n_blocks = REFERENCE_COLUMNS // p.block_size
    with one_blas_thread():
        cos = _best_rate(lambda: map_ordered(lambda i: np.cos(args[i], out=zs[i]), range(n_pages)),
                         float(batch * REFERENCE_COLUMNS), rounds, seconds)
        regen = _best_rate(lambda: map_ordered(lambda q: feats.page(q, n_blocks) and None, range(n_pages)),
                           float(d * REFERENCE_COLUMNS), rounds, seconds)
    return {"reference_columns": REFERENCE_COLUMNS, "page_columns": PAGE_COLUMNS, "gemm_flops": gemm,
            "cos_elements": cos, "regen_normals": regen}


def task_ends(n_rows: int, batch: int):
    """Global step counts at which the fit callback fires (ends of the chunk tasks).

    In-memory data is cut into slabs of ``BATCHES_PER_SLAB`` mini-batches per epoch; the
    callback runs after each slab. ``n_rows`` must be a multiple of ``batch``.
    """
    from dsgd_dask.streams.batches import BATCHES_PER_SLAB

    per_epoch = n_rows // batch
    chunks = [BATCHES_PER_SLAB] * (per_epoch // BATCHES_PER_SLAB)
    if per_epoch % BATCHES_PER_SLAB:
        chunks.append(per_epoch % BATCHES_PER_SLAB)
    step = 0
    while True:
        for c in chunks:
            step += c
            yield step


def plan_steps(n_rows: int, batch: int, n_blocks: int, min_timed: int) -> tuple[int, int]:
    """``(start, max_iter)``: the first callback after the growth phase and the fit length.

    Steps ``0 .. n_blocks - 2`` add one block each; from step ``n_blocks - 1`` on, every
    step evaluates all ``n_blocks`` blocks. At least two chunks are timed.
    """
    start = None
    n_chunks = 0
    for end in task_ends(n_rows, batch):
        if start is None:
            if end >= n_blocks - 1:
                start = end
            continue
        n_chunks += 1
        if end - start >= min_timed and n_chunks >= 2:
            return start, end
    raise AssertionError("unreachable")


def fit_throughput(p: Params, x: np.ndarray, batch: int, n_features: int, dtype: str, cache_bytes) -> dict:
    """Time the steady-state steps of one fit."""
    from dsgd_dask import KernelPCA

    n_blocks = -(-n_features // p.block_size)
    _, max_iter = plan_steps(x.shape[0], batch, n_blocks, p.min_timed_steps)
    marks: list[tuple[int, float]] = []

    def callback(step, model):
        marks.append((step, time.perf_counter()))

    est = KernelPCA(features="fourier", solver="dsgd", n_components=p.n_components, n_features=n_features,
                        block_size=p.block_size,
                        batch_size=batch, max_iter=max_iter, compute_dtype=dtype, cache_bytes=cache_bytes,
                        random_state=p.seed)
    gc.collect()
    load_before = load_average()
    t0 = time.perf_counter()
    est.fit(x, callback=callback)
    total = time.perf_counter() - t0
    steps = np.array([s for s, _ in marks])
    times = np.array([t for _, t in marks])
    # the first callback after the growth phase (``start`` if the plan is as predicted)
    i0 = int(np.searchsorted(steps, n_blocks - 1))
    if len(steps) - i0 < 3:
        raise RuntimeError(f"too few chunks after the growth phase: callbacks at {steps.tolist()}")
    d_steps = np.diff(steps[i0:])
    d_times = np.diff(times[i0:])
    n_steps = int(d_steps.sum())
    seconds = float(d_times.sum())
    return {
        "max_iter": max_iter,
        "growth_steps": n_blocks - 1,
        "timed_from_step": int(steps[i0]),
        "timed_steps": n_steps,
        "timed_seconds": seconds,
        "step_seconds": seconds / n_steps,
        "samples_per_s": n_steps * batch / seconds,
        "chunk_samples_per_s": (d_steps * batch / d_times).tolist(),
        "fit_seconds": total,
        "n_features": int(est.n_features_),
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }


def step_flops(batch: int, d: int, n_features: int, k: int) -> float:
    """Features ``2 B d M`` plus ``h`` ``2 B M k`` (the cost model of the design)."""
    return 2.0 * batch * d * n_features + 2.0 * batch * n_features * k


def model_step_seconds(ref: dict, flops: float, batch: int, d: int, n_features: int, regenerate: bool) -> float:
    """Step time of the bare numpy kernels at the rates ``ref``: GEMM + cos (+ regeneration)."""
    t = flops / ref["gemm_flops"] + batch * n_features / ref["cos_elements"]
    if regenerate:
        t += d * n_features / ref["regen_normals"]
    return t


COLORS = {("float32", "cached"): "#1f77b4", ("float32", "regenerated"): "#aec7e8",
          ("float64", "cached"): "#d62728", ("float64", "regenerated"): "#ff9896"}


def plot(p: Params, rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["batch_size"], r["n_features"]) for r in rows})
    series = [(dt, label) for dt in p.dtypes for label, _ in p.caches]
    width = 0.8 / len(series)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    panels = ((axes[0], "samples_per_s", "samples / s (steady state, log scale)", "{:,.0f}"),
              (axes[1], "gemm_fraction", "achieved flop rate / numpy GEMM rate (same precision)", "{:.2f}"))
    for ax, key, ylabel, fmt in panels:
        for j, (dt, cache) in enumerate(series):
            xs, hits = [], []
            for g, (b, m) in enumerate(groups):
                hit = [r for r in rows
                       if (r["batch_size"], r["n_features"], r["dtype"], r["cache"]) == (b, m, dt, cache)]
                if hit:
                    xs.append(g + (j - (len(series) - 1) / 2) * width)
                    hits.append(hit[0])
            ys = [r[key] for r in hits]
            bars = ax.bar(xs, ys, width, label=f"{dt}, {cache}", color=COLORS.get((dt, cache)))
            ax.bar_label(bars, [fmt.format(y) for y in ys], fontsize=7, rotation=90, padding=2)
            if key == "samples_per_s" and all("samples_per_s_min" in r for r in hits):
                # spread over the repeated fits
                err = [[r[key] - r["samples_per_s_min"] for r in hits], [r["samples_per_s_max"] - r[key] for r in hits]]
                ax.errorbar(xs, ys, yerr=err, fmt="none", ecolor="k", elinewidth=0.8, capsize=2)
            if key == "gemm_fraction":
                # what the step would reach if it cost exactly its numpy kernels
                bound = [r["gemm_fraction"] / r["model_fraction"] for r in hits]
                ax.hlines(bound, np.subtract(xs, width / 2), np.add(xs, width / 2), color="k", lw=2,
                          label="numpy kernels only (GEMM + cos [+ regeneration])" if j == 0 else None)
        ax.set_xticks(range(len(groups)), [f"B={b}\nM={m}" for b, m in groups])
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        if key == "samples_per_s":
            ax.set_yscale("log")
            vals = [r[key] for r in rows]
            ax.set_ylim(min(vals) / 3, max(vals) * 8)
        else:
            ax.set_ylim(0, max(1.0, max(r[key] / r["model_fraction"] for r in rows)) * 1.3)
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
    axes[0].legend(fontsize=8, loc="upper right")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"KernelPCA.fit steady-state throughput, d=784, k={p.n_components}, block {p.block_size}; "
                 f"median of {p.repeats} fits (whiskers: min-max); GEMM = numpy (B x 784) @ (784 x 4096) on all cores, "
                 "median rate of the run", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


KERNELS = ("gemm_flops", "cos_elements", "regen_normals")


def combine_references(sessions: list[dict], how: str) -> dict:
    """Per precision and batch size, one rate per kernel over the run's reference sessions.

    Each session holds the best round of each kernel; ``how="median"`` takes the median
    over sessions (the machine's typical rate during the run), ``"max"`` the highest
    (its best moment).
    """
    agg = np.median if how == "median" else np.max
    keys = dict.fromkeys(key for refs in sessions for key in refs)
    return {key: {kernel: float(agg([refs[key][kernel]["best"] for refs in sessions if key in refs]))
                  for kernel in KERNELS} for key in keys}


def derive(p: Params, runs: list[dict], typical: dict, peak: dict) -> dict:
    """One result row from the repeated measurements ``runs`` of a configuration."""
    first = runs[0]
    b, dt, m, d = first["batch_size"], first["dtype"], first["n_features"], first["d"]
    step = np.array([r["step_seconds"] for r in runs])
    t = float(np.median(step))
    flops = step_flops(b, d, m, p.n_components)
    achieved = flops / t
    gemm = typical[(dt, b)]["gemm_flops"]
    model = model_step_seconds(typical[(dt, b)], flops, b, d, m, regenerate=first["cache_bytes"] == 0)
    f32 = typical.get(("float32", b))
    keep = ("batch_size", "n_features", "dtype", "cache", "cache_bytes", "n_rows", "d", "n_components",
            "max_iter", "growth_steps", "timed_from_step")
    return {
        **{k: first[k] for k in keep},
        "n_repeats": len(runs),
        "timed_steps": [r["timed_steps"] for r in runs],
        "step_seconds": t,
        "step_seconds_all": step.tolist(),
        "samples_per_s": b / t,
        "samples_per_s_min": b / float(step.max()),
        "samples_per_s_max": b / float(step.min()),
        "foreign_cores": max(r["foreign_cores"] for r in runs),
        "flops_per_step": flops,
        "achieved_flops": achieved,
        "gemm_flops": gemm,
        "gemm_fraction": achieved / gemm,
        "gemm_fraction_vs_peak": achieved / peak[(dt, b)]["gemm_flops"],
        "gemm_fraction_vs_float32": achieved / f32["gemm_flops"] if f32 else None,
        "model_step_seconds": model,
        "model_fraction": model / t,
    }


def measure(p: Params, x_all: np.ndarray, config: tuple, repeat: int, clean) -> dict:
    """The raw timing of one fit of a configuration (cleanest attempt)."""
    b, m, dt, (cache, cache_bytes) = config
    n = x_all.shape[0] // b * b
    res, info_fit = clean(lambda: fit_throughput(p, x_all[:n], b, m, dt, cache_bytes))
    return {"batch_size": b, "dtype": dt, "cache": cache, "cache_bytes": cache_bytes, "n_rows": n,
            "d": x_all.shape[1], "n_components": p.n_components, "repeat": repeat, **res, **info_fit}


def measure_references(p: Params, d: int, clean, label: str) -> dict:
    refs = {}
    for dt, b in itertools.product(p.dtypes, p.batch_sizes):
        r, info_ref = clean(lambda dt=dt, b=b: reference_rates(p, b, d, dt))
        refs[(dt, b)] = r = {**r, **info_ref, "session": label}
        print(f"reference ({label}) {dt} B={b}: GEMM {r['gemm_flops']['best'] / 1e9:.1f} GF/s, "
              f"cos {r['cos_elements']['best'] / 1e6:,.0f} M/s, regeneration {r['regen_normals']['best'] / 1e6:,.0f} "
              f"M normals/s, foreign {r['foreign_cores']:.2f} cores", flush=True)
    return refs


def print_measurement(r: dict) -> None:
    print(f"  repeat {r['repeat']}: B={r['batch_size']} M={r['n_features']} {r['dtype']} {r['cache']}: "
          f"{r['samples_per_s']:,.0f} samples/s, {r['step_seconds'] * 1e3:.1f} ms/step, "
          f"foreign {r['foreign_cores']:.2f} cores", flush=True)


HEADER = (f"{'B':>5} {'M':>6} {'dtype':>7} {'cache':>11} {'samples/s':>10} {'[min, max]':>17} {'ms/step':>8} "
          f"{'GF/s':>6} {'GEMM':>6} {'frac':>5} {'peak':>5} {'model':>6} {'foreign':>7}")


def print_row(row: dict) -> None:
    spread = f"[{row['samples_per_s_min']:,.0f}, {row['samples_per_s_max']:,.0f}]"
    print(f"{row['batch_size']:>5} {row['n_features']:>6} {row['dtype']:>7} {row['cache']:>11} "
          f"{row['samples_per_s']:>10,.0f} {spread:>17} {row['step_seconds'] * 1e3:>8.1f} "
          f"{row['achieved_flops'] / 1e9:>6.1f} {row['gemm_flops'] / 1e9:>6.1f} {row['gemm_fraction']:>5.2f} "
          f"{row['gemm_fraction_vs_peak']:>5.2f} {row['model_fraction']:>6.2f} {row['foreign_cores']:>7.2f}",
          flush=True)


def _ref_list(refs: dict) -> list[dict]:
    return [{"dtype": dt, "batch_size": b, **r} for (dt, b), r in refs.items()]


def _ref_dict(items: list[dict]) -> dict:
    return {(r["dtype"], r["batch_size"]): r for r in items}


def _config_of(r: dict) -> tuple:
    return r["batch_size"], r["n_features"], r["dtype"], (r["cache"], r["cache_bytes"])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--data", choices=("mnist", "random"), default="mnist",
                        help="MNIST rows in [0, 1] (default), or uniform random rows of the same shape")
    parser.add_argument("--no-wait", action="store_true",
                        help="measure at once, without waiting for other processes to go quiet")
    parser.add_argument("--rerun-dirty", action="store_true",
                        help="re-measure the fits of an existing result file that other processes disturbed "
                             "(foreign load above idle_cores), keeping the cleaner measurement")
    parser.add_argument("--replot", action="store_true", help="only redraw the figure from the result file")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help=f"batch sizes (default {PARAMS.batch_sizes})")
    parser.add_argument("--n-features", type=int, nargs="+", help=f"feature budgets (default {PARAMS.n_features})")
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "float64"),
                        help=f"feature precisions (default {PARAMS.dtypes})")
    parser.add_argument("--repeats", type=int, help=f"fits per configuration (default {PARAMS.repeats})")
    parser.add_argument("--name", help="name of the result files (default: throughput, or throughput_quick)")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS
    grid = {"batch_sizes": args.batch_sizes, "n_features": args.n_features, "dtypes": args.dtypes,
            "repeats": args.repeats}
    p = replace(p, **{k: tuple(v) if isinstance(v, list) else v for k, v in grid.items() if v is not None})
    name = args.name or ("throughput_quick" if args.quick else "throughput")
    if args.replot:
        plot(p, json.loads(result_path(name).read_text())["results"], figure_path(name))
        print("wrote", figure_path(name))
        return

    def clean(fn):
        return run_clean(fn, p.idle_cores, p.attempts, wait=not args.no_wait, timeout=p.idle_timeout)

    previous = json.loads(result_path(name).read_text()) if args.rerun_dirty else None
    if previous is not None:
        args.data = previous["parameters"]["data"]
    if args.data == "mnist":
        x_all = load_mnist()[0][: p.n_rows].astype(np.float32)
    else:
        x_all = np.random.default_rng(p.seed).random((p.n_rows, 784), dtype=np.float32)
    d = x_all.shape[1]
    info = machine_info()
    print(f"{info['cpu_count']} CPUs, load average {info['load_average']}, data {args.data} {x_all.shape}")

    # warm-up (imports, thread pools, first-touch allocations): not timed
    from dsgd_dask import KernelPCA

    for dt in p.dtypes:
        KernelPCA(features="fourier", solver="dsgd", n_components=p.n_components, n_features=512, max_iter=8,
                      compute_dtype=dt,
                      random_state=p.seed).fit(x_all[:2048])

    configs = list(itertools.product(p.batch_sizes, p.n_features, p.dtypes, p.caches))
    if previous is None:
        payload = {"machine": info, "parameters": {"quick": args.quick, "data": args.data, **asdict(p)},
                   "reference_sessions": []}
        sessions = [measure_references(p, d, clean, "start")]
        measurements = []
        # repeats outermost: a slow drift of the machine's speed touches every configuration alike
        for rep in range(p.repeats):
            for config in configs:
                measurements.append(measure(p, x_all, config, rep, clean))
                print_measurement(measurements[-1])
            sessions.append(measure_references(p, d, clean, f"after repeat {rep}"))
    else:
        payload = previous
        payload["machine_rerun"] = info
        sessions = [_ref_dict(s) for s in previous["reference_sessions"]]
        measurements = previous["measurements"]
        for i, r in enumerate(measurements):
            if r["foreign_cores"] >= p.idle_cores:
                new = measure(p, x_all, _config_of(r), r["repeat"], clean)
                new["reruns"] = r.get("reruns", 0) + 1
                print_measurement(new)
                if new["foreign_cores"] < r["foreign_cores"]:
                    measurements[i] = new
        sessions.append(measure_references(p, d, clean, "rerun"))

    typical = combine_references(sessions, "median")
    peak = combine_references(sessions, "max")
    rows = [derive(p, [r for r in measurements if _config_of(r) == config], typical, peak)
            for config in configs if any(_config_of(r) == config for r in measurements)]
    print(f"\nmedian of {p.repeats} fits per configuration; GEMM = median reference rate of the run, "
          "peak = fraction of the highest one")
    print(HEADER)
    for row in rows:
        print_row(row)
    payload.update({
        "benchmark": "throughput",
        "description": "steady-state samples/s of KernelPCA.fit; achieved flop rate / numpy GEMM rate",
        "flops_definition": "2*B*d*M + 2*B*M*k per step; GEMM rate = numpy (B x d) @ (d x 4096) in the same "
                            "precision, best of its rounds per session, median over the run's sessions "
                            "(gemm_fraction_vs_peak: highest session)",
        "model_definition": "model_step_seconds = flops / GEMM rate + B*M / cos rate (+ d*M / regeneration "
                            "rate without cache); model_fraction = model_step_seconds / measured step time",
        "reference_sessions": [_ref_list(s) for s in sessions],
        "reference_typical": _ref_list(typical),
        "reference_peak": _ref_list(peak),
        "measurements": measurements,
        "results": rows,
        "load_average_end": load_average(),
    })
    print("wrote", write_json(name, payload))
    path = figure_path(name)
    plot(p, rows, path)
    print("wrote", path)


if __name__ == "__main__":
    main()
