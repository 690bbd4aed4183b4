"""Subspace quality against fit time: KernelPCA and its peers on the same MNIST subset.

All methods use the Gaussian kernel with the bandwidth ``KernelPCA`` picks by the
median trick (``bandwidth_``), i.e. ``gamma = 1 / (2 bandwidth^2)`` in scikit-learn:

* scikit-learn's exact ``KernelPCA`` (the reference),
* scikit-learn's ``Nystroem(m) + PCA`` and ``RBFSampler(m) + PCA`` at several ``m``,
* ``KernelPCA(solver="dsgd", features="fourier")`` at several feature budgets and numbers of steps.

Quality is ``sin^2`` of the largest principal angle between each method's projections
of held-out test rows and the exact ones (``dsgd_dask.metrics.principal_angle_sin2``):
0 when the ``k``-dimensional subspaces agree, 1 when some direction is missed. The
metric is only meaningful with a clear gap between eigenvalues ``k`` and ``k + 1``,
which is checked and recorded. Fit times exclude a warm-up fit of every method.

Run ``python benchmarks/bench_quality.py`` (``--quick`` for a smoke run).
Writes ``results/quality.json`` and ``results/quality.png``.
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings
from dataclasses import asdict, dataclass, replace

import numpy as np
from _common import figure_path, load_average, load_mnist, machine_info, run_clean, write_json


# --- parameters ------------------------------------------------------------------------
@dataclass(frozen=True)
class Params:
    n_train: int = 5000  # random MNIST training rows (pixels / 255)
    n_test: int = 2000  # random MNIST test rows, held out
    n_components: int = 6  # k: MNIST, Gaussian kernel, median bandwidth has a clear gap after 3 and 6
    nystroem: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    rff: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)
    dsgd_features: tuple[int, ...] = (1024, 2048, 4096, 8192)
    dsgd_max_iter: tuple[int, ...] = (100, 250, 1000)
    dsgd_batch_size: int = 256
    repeats: int = 3  # seeds per randomised configuration
    gap_extra: int = 4  # eigenvalues beyond k computed for the eigengap check
    min_relative_gap: float = 0.1  # warn below (lambda_k - lambda_k+1) / lambda_k
    idle_cores: float = 0.25  # a timing is clean when other processes used fewer cores on average
    attempts: int = 2  # timings repeated while other processes interfere (the cleanest is kept)
    idle_timeout: float = 900.0  # longest wait for the machine to become idle before a timing
    seed: int = 0


PARAMS = Params()
QUICK = replace(PARAMS, n_train=1000, n_test=500, nystroem=(128, 512), rff=(256, 1024), dsgd_features=(512, 1024),
                dsgd_max_iter=(50, 100), repeats=1, attempts=1, idle_timeout=60.0)
# ----------------------------------------------------------------------------------------


def subsets(p: Params):
    x_train, x_test = load_mnist()
    rng = np.random.default_rng(p.seed)
    tr = np.sort(rng.choice(len(x_train), p.n_train, replace=False))
    te = np.sort(rng.choice(len(x_test), p.n_test, replace=False))
    return x_train[tr], x_test[te]


def timed_fit(make, x_train, x_test) -> tuple[object, float, np.ndarray, float]:
    """Fit a fresh estimator: ``(estimator, fit seconds, test projections, transform seconds)``."""
    est = make()
    gc.collect()
    t0 = time.perf_counter()
    est.fit(x_train)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    z = est.transform(x_test)
    return est, fit_s, np.asarray(z), time.perf_counter() - t0


def make_methods(p: Params, gamma: float, bandwidth: float):
    """``(method, parameter label, parameters, factory(seed))`` for every randomised configuration."""
    from sklearn.decomposition import PCA
    from sklearn.kernel_approximation import Nystroem, RBFSampler
    from sklearn.pipeline import make_pipeline

    from dsgd_dask import KernelPCA

    k = p.n_components
    out = []
    for m in p.nystroem:
        out.append(("scikit-learn Nystroem+PCA", f"m={m}", {"n_components": m},
                    lambda s, m=m: make_pipeline(Nystroem(gamma=gamma, n_components=m, random_state=s),
                                                 PCA(k, random_state=s))))
    for m in p.rff:
        out.append(("scikit-learn RBFSampler+PCA", f"m={m}", {"n_components": m},
                    lambda s, m=m: make_pipeline(RBFSampler(gamma=gamma, n_components=m, random_state=s),
                                                 PCA(k, random_state=s))))
    for it in p.dsgd_max_iter:
        for m in p.dsgd_features:
            out.append((f'KernelPCA(solver="dsgd", features="fourier") T={it}', f"M={m}",
                        {"n_features": m, "max_iter": it},
                        lambda s, m=m, it=it: KernelPCA(k, features="fourier", solver="dsgd",
                                                            bandwidth=bandwidth, n_features=m, max_iter=it,
                                                            batch_size=p.dsgd_batch_size, random_state=s)))
    return out


def eigengap(p: Params, x_train, gamma: float) -> dict:
    """Top ``k + gap_extra`` eigenvalues of the centred kernel operator (``KernelPCA.eigenvalues_ / n``)."""
    from sklearn.decomposition import KernelPCA

    kp = KernelPCA(p.n_components + p.gap_extra, kernel="rbf", gamma=gamma, eigen_solver="arpack",
                   random_state=p.seed).fit(x_train)
    vals = np.sort(kp.eigenvalues_)[::-1] / x_train.shape[0]
    rel = (vals[:-1] - vals[1:]) / vals[:-1]
    return {"eigenvalues": vals.tolist(), "relative_gaps": rel.tolist(),
            "relative_gap_at_k": float(rel[p.n_components - 1])}


def summarise(runs: list[dict]) -> list[dict]:
    """Median fit time and quality over the seeds of each configuration."""
    keys = []
    for r in runs:
        if (r["method"], r["label"]) not in keys:
            keys.append((r["method"], r["label"]))
    rows = []
    for method, label in keys:
        rs = [r for r in runs if (r["method"], r["label"]) == (method, label)]
        s2 = np.array([r["sin2"] for r in rs])
        fit = np.array([r["fit_seconds"] for r in rs])
        rows.append({"method": method, "label": label, "params": rs[0]["params"], "n_runs": len(rs),
                     "fit_seconds_median": float(np.median(fit)), "fit_seconds_min": float(fit.min()),
                     "fit_seconds_max": float(fit.max()), "sin2_median": float(np.median(s2)),
                     "sin2_min": float(s2.min()), "sin2_max": float(s2.max())})
    return rows


def plot(p: Params, summary: list[dict], runs: list[dict], exact: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = 1e-8  # sin^2 below this is drawn at the floor (log scale)
    fig, ax = plt.subplots(figsize=(9.5, 6.5))
    styles = {"scikit-learn Nystroem+PCA": ("#2ca02c", "s"), "scikit-learn RBFSampler+PCA": ("#ff7f0e", "^")}
    dsgd_colors = iter(["#9ecae1", "#4292c6", "#08519c", "#08306b", "#6a51a3"])
    methods = list(dict.fromkeys(r["method"] for r in summary))
    for method in methods:
        color, marker = styles.get(method) or (next(dsgd_colors), "o")
        rows = sorted((r for r in summary if r["method"] == method), key=lambda r: r["fit_seconds_median"])
        xs = [r["fit_seconds_median"] for r in rows]
        ys = [max(r["sin2_median"], floor) for r in rows]
        ax.plot(xs, ys, marker=marker, color=color, label=method, lw=1.5, ms=6)
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(r["label"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
        each = [r for r in runs if r["method"] == method]
        ax.scatter([r["fit_seconds"] for r in each], [max(r["sin2"], floor) for r in each], color=color,
                   marker=marker, s=10, alpha=0.35, lw=0)
    ax.axvline(exact["fit_seconds"], color="k", ls="--", lw=1)
    ax.text(exact["fit_seconds"], 0.98, f" exact KernelPCA fit\n {exact['fit_seconds']:.2f} s (reference, sin²=0)",
            transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fit time (s)")
    ax.set_ylabel("sin² of the largest principal angle to exact KernelPCA (held-out rows)")
    ax.set_title(f"MNIST n={p.n_train} (test {p.n_test}), Gaussian kernel, k={p.n_components}, median bandwidth; "
                 f"median over {p.repeats} seed(s) (dots: single runs)", fontsize=9)
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--no-wait", action="store_true",
                        help="time at once, without waiting for other processes to go quiet")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS

    def clean(fn):
        return run_clean(fn, p.idle_cores, p.attempts, wait=not args.no_wait, window=1.0, timeout=p.idle_timeout)
    name = "quality_quick" if args.quick else "quality"

    from sklearn.decomposition import KernelPCA as SkKernelPCA

    from dsgd_dask import KernelPCA
    from dsgd_dask.metrics import principal_angle_sin2

    x_train, x_test = subsets(p)
    info = machine_info()
    print(f"{info['cpu_count']} CPUs, load average {info['load_average']}, train {x_train.shape}, "
          f"test {x_test.shape}")
    k = p.n_components
    bandwidth = float(KernelPCA(k, features="fourier", solver="dsgd", n_features=256, max_iter=1,
                                    random_state=p.seed).fit(x_train).bandwidth_)
    gamma = 1.0 / (2.0 * bandwidth**2)
    gap = eigengap(p, x_train, gamma)
    print(f"bandwidth {bandwidth:.4f} (gamma {gamma:.3g}); eigenvalues {np.round(gap['eigenvalues'], 5).tolist()}")
    print(f"relative gap after component {k}: {gap['relative_gap_at_k']:.3f}")
    if gap["relative_gap_at_k"] < p.min_relative_gap:
        warnings.warn(f"small eigengap after component {k} ({gap['relative_gap_at_k']:.3f}): "
                      "the subspace metric is unreliable; choose another n_components", stacklevel=1)

    methods = make_methods(p, gamma, bandwidth)
    # warm-up of every estimator class on a small slice: imports, thread pools; not timed
    warm = x_train[: min(500, len(x_train))]
    SkKernelPCA(k, kernel="rbf", gamma=gamma).fit(warm).transform(warm)
    for method in dict.fromkeys(m[0].split(" T=")[0] for m in methods):
        factory = next(m[3] for m in methods if m[0].startswith(method))
        factory(p.seed).fit(warm)

    (ref, exact_fit, z_ref, exact_tr), info_exact = clean(
        lambda: timed_fit(lambda: SkKernelPCA(k, kernel="rbf", gamma=gamma, random_state=p.seed), x_train, x_test))
    # what eigen_solver="auto" picks (scikit-learn's rule)
    solver = "arpack" if x_train.shape[0] > 200 and k < 10 else "dense"
    exact = {"fit_seconds": exact_fit, "transform_seconds": exact_tr, "eigen_solver": solver,
             "eigenvalues": (ref.eigenvalues_ / x_train.shape[0]).tolist(), **info_exact}
    print(f"exact KernelPCA: fit {exact_fit:.2f} s (eigen_solver='auto' -> {solver})")

    runs = []
    print(f"{'method':<22} {'config':<8} {'seed':>4} {'fit s':>8} {'sin2':>10} {'foreign':>7}")
    for rep in range(p.repeats):
        for method, label, params, factory in methods:
            seed = p.seed + rep
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                (est, fit_s, z, tr_s), info_run = clean(
                    lambda f=factory, s=seed: timed_fit(lambda: f(s), x_train, x_test))
            run = {**info_run, "method": method, "label": label, "params": params, "seed": seed, "fit_seconds": fit_s,
                   "transform_seconds": tr_s, "sin2": principal_angle_sin2(z, z_ref),
                   "warnings": [str(w.message) for w in caught], "load_average": load_average()}
            if hasattr(est, "eigenvalues_"):
                run["eigenvalues"] = np.asarray(est.eigenvalues_).tolist()
            runs.append(run)
            print(f"{method:<22} {label:<8} {seed:>4} {fit_s:>8.3f} {run['sin2']:>10.2e} "
                  f"{run['foreign_cores']:>7.2f}", flush=True)

    summary = summarise(runs)
    print(f"\n{'method':<22} {'config':<8} {'fit s (median)':>15} {'sin2 median':>12} {'[min, max]':>22}")
    print(f"{'exact KernelPCA':<22} {'':<8} {exact_fit:>15.3f} {0.0:>12.2e}")
    for r in summary:
        print(f"{r['method']:<22} {r['label']:<8} {r['fit_seconds_median']:>15.3f} {r['sin2_median']:>12.2e} "
              f"[{r['sin2_min']:.2e}, {r['sin2_max']:.2e}]")

    payload = {
        "benchmark": "quality",
        "description": "sin^2 of the largest principal angle between held-out projections and exact KernelPCA, "
                       "against fit time",
        "machine": info,
        "parameters": {"quick": args.quick, **asdict(p)},
        "kernel": {"name": "gaussian", "bandwidth": bandwidth, "gamma": gamma},
        "eigengap": gap,
        "exact": exact,
        "summary": summary,
        "runs": runs,
        "load_average_end": load_average(),
    }
    print("wrote", write_json(name, payload))
    path = figure_path(name)
    plot(p, summary, runs, exact, path)
    print("wrote", path)


if __name__ == "__main__":
    main()
