"""QM7 atomization energies: KernelRidge against exact scikit-learn KernelRidge.

Representation: Coulomb matrices with their atoms sorted by row norm, as upper
triangles (276 values; :func:`dsgd_dask.datasets.coulomb.sorted_coulomb`). Folds: a
seeded 5-fold split (the file carries no stratified splits). Kernels: Laplacian (L1
distance) and Gaussian. Each kernel's bandwidth (a multiple of the median distance) and
regulariser are chosen once, by exact kernel ridge on a seeded 1000-molecule validation
part of the first fold's training rows; every method then uses them (``KernelRidge(alpha
= a n)`` and ``KernelRidge(alpha = a)``, the same objective).

Per fold and kernel: exact ``KernelRidge`` on the training molecules; ``KernelRidge``
(default Nyström blocks) by full-data passes (``solver="cg"``, at most ``--max-iter`` of
them, the first included) over the same molecules and, with ``--dsgd-steps N``, by ``N``
doubly stochastic steps (``solver="dsgd"``); and, with ``--augment R``, on
``R`` randomly sorted copies of each training molecule (Montavon et al. 2012; a lazy
stream), predicting the mean over 10 random sortings of each test molecule: exact kernel
ridge on those ``R n`` rows (the kernel matrix factored in place, ``8 (R n)^2`` bytes: 4.2
GB at ``R = 4``; skipped unless twice that is available) and ``KernelRidge`` on the same rows
(``--augment-features`` Nyström features). Random sortings are what bring kernel ridge
with the Laplacian kernel below 3.5 kcal/mol (Hansen et al. 2013 report about 3). Mean
absolute error in kcal/mol and fit time. Rows are labelled with the class and its solver
(``KernelRidge(solver="cg")``); scikit-learn's with "scikit-learn".

Outputs in ``--out`` (default ``pipelines/results/qm7_ridge``): ``qm7_ridge.json`` and
``qm7_ridge.md``. Needs ``qm7.npz`` in the data home. ``run(..., sample=True)`` with small
budgets is ``python -m benchmarks run qm7-ridge --quick`` (the first 1000 molecules, shipped
with the package).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

SEED = 0
SCALES = (1.0, 2.0, 4.0, 8.0, 16.0)
ALPHAS = (1e-9, 1e-7, 1e-5)
METRIC = {"laplacian": "cityblock", "gaussian": "euclidean"}


def kernel(kind: str, D: np.ndarray, bandwidth: float) -> np.ndarray:
    return np.exp(-D / bandwidth) if kind == "laplacian" else np.exp(-(D**2) / (2 * bandwidth**2))


def folds(n: int, k: int = 5):
    perm = np.random.default_rng(SEED).permutation(n)
    parts = np.array_split(perm, k)
    return [(np.concatenate(parts[:i] + parts[i + 1:]), parts[i]) for i in range(k)]


def exact_ridge(F, y, train, test, kind, bandwidth, alpha):
    from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
    from sklearn.metrics import pairwise_distances

    metric = METRIC[kind]
    t0 = time.perf_counter()
    K = kernel(kind, pairwise_distances(F[train], metric=metric), bandwidth)
    mean = y[train].mean()
    model = SkKernelRidge(alpha=alpha * len(train), kernel="precomputed").fit(K, y[train] - mean)
    fit = time.perf_counter() - t0
    pred = model.predict(kernel(kind, pairwise_distances(F[test], F[train], metric=metric), bandwidth)) + mean
    return pred, fit


def kernel_rows(kind, A, B, bandwidth):
    """``k(A, B)`` in float64, row chunks on every core (scipy's ``cdist`` releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    from scipy.spatial.distance import cdist

    A, B = np.ascontiguousarray(A, dtype=np.float64), np.ascontiguousarray(B, dtype=np.float64)
    out = np.empty((len(A), len(B)))

    def fill(lo):
        hi = min(lo + 1024, len(A))
        out[lo:hi] = kernel(kind, cdist(A[lo:hi], B, METRIC[kind]), bandwidth)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(fill, range(0, len(A), 1024)))
    return out


def exact_ridge_rows(F, y, tests, kind, bandwidth, alpha):
    """Exact kernel ridge on ``F`` (centred targets ``y``), predicting the mean over the row sets ``tests``.

    For more rows than scikit-learn's ``KernelRidge`` holds (it copies the kernel matrix):
    the matrix is factored in place. The Cholesky factorisation runs on one BLAS thread:
    OpenBLAS's threaded ``potrf`` crashes on matrices of 16,384 rows and more on some
    machines (this 2-core one among them).
    """
    from scipy.linalg import cho_factor, cho_solve
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    K = kernel_rows(kind, F, F, bandwidth)
    K.flat[:: len(K) + 1] += alpha * len(F)
    with threadpool_limits(1):
        factor = cho_factor(K, lower=True, overwrite_a=True, check_finite=False)
    coef = cho_solve(factor, y, check_finite=False)
    fit = time.perf_counter() - t0
    del K, factor
    return np.mean([kernel_rows(kind, T, F, bandwidth) @ coef for T in tests], axis=0), fit


def choose(F, y, train, kind, scales=SCALES, alphas=ALPHAS):
    """Bandwidth and ``alpha`` by exact kernel ridge on a seeded validation part of ``train``.

    The validation part is 1000 molecules, or a fifth of ``train`` when that is fewer
    (the packaged 1000-molecule sample).
    """
    from sklearn.metrics import pairwise_distances

    rng = np.random.default_rng(SEED)
    perm = rng.permutation(train)
    n_valid = min(1000, len(train) // 5)
    valid, fit = perm[:n_valid], perm[n_valid:]
    D = pairwise_distances(F[fit[:2000]], metric=METRIC[kind])
    median = float(np.median(D[np.triu_indices(len(D), 1)]))
    trials = []
    for scale in scales:
        for alpha in alphas:
            pred, _ = exact_ridge(F, y, fit, valid, kind, scale * median, alpha)
            trials.append({"scale": scale, "alpha": alpha, "valid_mae": float(np.abs(pred - y[valid]).mean())})
    best = min(trials, key=lambda t: t["valid_mae"])
    return median * best["scale"], best["alpha"], median, trials


def run(out: Path, data_home=None, n_folds: int = 5, max_iter: int = 31, dsgd_steps: int = 0, augment: int = 0,
        verbose: bool = True, sample: bool = False, n_features="auto", kernels=("laplacian", "gaussian"),
        scales=SCALES, alphas=ALPHAS, augment_features=None, compute_dtype="float64") -> dict:
    """Choose each kernel's bandwidth and ``alpha``, fit every method per fold; the summary record.

    The defaults are the full run. ``sample=True`` reads the packaged subset (the first
    1000 molecules) instead of the full file; ``max_iter`` bounds the full passes of the
    ``solver="cg"`` fits (the first included: 31 is the first and 30 of conjugate
    gradients), ``dsgd_steps`` adds fits by that many steps (0: none); ``n_features`` is
    the feature budget of the ``KernelRidge`` fits (default: theirs) and ``augment_features`` that of the fits on
    random sortings (default ``n_features``); ``kernels``, ``scales`` (multiples of the
    median distance) and ``alphas`` the kernels and the validation grid. ``compute_dtype``
    is the precision of the DSGD fits: float64 by default, because at the small ``alpha``
    this representation wants, float32 features cost about 0.2 kcal/mol (4.83 against 4.65
    on fold 0 with the Laplacian kernel).
    """
    import dask
    import psutil

    from dsgd_dask import KernelRidge
    from dsgd_dask.datasets import load_qm7
    from dsgd_dask.datasets.coulomb import coulomb_stream, sorted_coulomb

    def say(msg):
        if verbose:
            print(msg, flush=True)

    out.mkdir(parents=True, exist_ok=True)
    X, y = load_qm7(data_home=data_home, sample=sample)
    y = y.astype(np.float64)
    F = sorted_coulomb(X, dtype="float64")
    splits = folds(len(y))[:n_folds]
    records, chosen = [], {}
    head = {"date": time.strftime("%Y-%m-%d"), "sample": sample, "n_molecules": len(y),
            "representation": "sorted Coulomb matrix, upper triangle", "folds": n_folds, "max_iter": max_iter,
            "compute_dtype": compute_dtype, "dsgd_steps": dsgd_steps, "augment": augment,
            "augment_features": augment_features}
    for kind in kernels:
        bandwidth, alpha, median, trials = choose(F, y, splits[0][0], kind, scales, alphas)
        chosen[kind] = {"bandwidth": bandwidth, "alpha": alpha, "median_distance": median, "trials": trials}
        say(f"{kind}: bandwidth {bandwidth:.4g} ({bandwidth / median:g} x median), alpha {alpha:g}")
        for i, (train, test) in enumerate(splits):
            def record(method, pred, fit, kind=kind, i=i, test=test, **extra):
                mae = float(np.abs(pred - y[test]).mean())
                records.append({"kernel": kind, "fold": i, "method": method, "mae": mae, "fit_seconds": fit,
                                **extra})
                say(f"  fold {i} {method:>50}: MAE {mae:6.2f} kcal/mol, fit {fit:7.1f} s")
                write(out, {**head, "chosen": chosen, "results": records})  # a stopped run keeps what it measured

            pred, fit = exact_ridge(F, y, train, test, kind, bandwidth, alpha)
            record("scikit-learn KernelRidge (exact)", pred, fit)
            mean = y[train].mean()  # the exact fit's offset, so both fit the same centred targets
            for solver in ("cg",) + (("dsgd",) if dsgd_steps else ()):
                t0 = time.perf_counter()
                model = KernelRidge(alpha=alpha, solver=solver, kernel=kind, bandwidth=bandwidth,
                                    max_iter=max_iter if solver == "cg" else dsgd_steps, n_features=n_features,
                                    compute_dtype=compute_dtype, random_state=SEED).fit(F[train], y[train] - mean)
                fit = time.perf_counter() - t0
                record(f'KernelRidge(solver="{solver}")', model.predict(F[test]) + mean, fit,
                       iterations=int(model.n_iter_), n_features=int(model.n_features_))
            if augment:
                Fs, ys = coulomb_stream(X[train], y[train], n_rows=augment * len(train), random_state=SEED + i,
                                        dtype="float64")
                rng = np.random.default_rng(SEED + 100 + i)
                tests = [sorted_coulomb(X[test], noise=1.0, random_state=rng, dtype="float64") for _ in range(10)]
                label = f"{augment} random sortings"
                rows = int(Fs.shape[0])
                if 2 * 8 * rows**2 < psutil.virtual_memory().available:
                    Fa, ya = dask.compute(Fs, ys)  # one pass over the stream's chunks for both
                    pred, fit = exact_ridge_rows(Fa, ya - mean, tests, kind, bandwidth, alpha)
                    del Fa, ya
                    record(f"scikit-learn KernelRidge (exact), {label}", pred + mean, fit, rows=rows)
                else:
                    say(f"  fold {i}: no exact fit on {label}: its {rows:,} x {rows:,} kernel matrix does not fit")
                t0 = time.perf_counter()
                model = KernelRidge(alpha=alpha, solver="cg", kernel=kind, bandwidth=bandwidth,
                                    max_iter=max_iter, n_features=augment_features or n_features,
                                    compute_dtype=compute_dtype, random_state=SEED).fit(Fs, ys - mean)
                fit = time.perf_counter() - t0
                pred = mean + np.mean([model.predict(T) for T in tests], axis=0)
                record(f'KernelRidge(solver="cg"), {label}', pred, fit, iterations=int(model.n_iter_),
                       n_features=int(model.n_features_), rows=rows)
    summary = write(out, {**head, "chosen": chosen, "results": records})
    say(summary["table"])
    return summary


def write(out: Path, summary: dict) -> dict:
    """Write the summary's JSON and markdown table (the table also returned, as ``summary["table"]``)."""
    records, chosen = summary["results"], summary["chosen"]
    lines = ["| kernel | method | MAE (kcal/mol), mean over folds | fit (s), mean |", "|---|---|---|---|"]
    for kind in chosen:
        for method in dict.fromkeys(r["method"] for r in records if r["kernel"] == kind):
            rows = [r for r in records if r["kernel"] == kind and r["method"] == method]
            lines.append(f"| {kind} | {method} | {np.mean([r['mae'] for r in rows]):.2f} | "
                         f"{np.mean([r['fit_seconds'] for r in rows]):.1f} |")
    summary = {**summary, "table": "\n".join(lines)}
    (out / "qm7_ridge.json").write_text(json.dumps(summary, indent=2))
    (out / "qm7_ridge.md").write_text(summary["table"] + "\n")
    return summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "qm7_ridge")
    parser.add_argument("--data-home", default=None, help="directory holding qm7.npz (default: the data home)")
    parser.add_argument("--folds", type=int, default=5, help="folds to run (of 5)")
    parser.add_argument("--max-iter", type=int, default=31,
                        help="full passes of each solver='cg' fit (max_iter), the first included")
    parser.add_argument("--dsgd-steps", type=int, default=0, help="also fit by this many steps (solver='dsgd')")
    parser.add_argument("--augment", type=int, default=0, help="random sortings per training molecule (0: none)")
    parser.add_argument("--n-features", type=int, default=None, help="features of the DSGD fits (default: theirs)")
    parser.add_argument("--augment-features", type=int, default=None,
                        help="features of the DSGD fits on random sortings (default: --n-features)")
    parser.add_argument("--kernels", nargs="+", default=["laplacian", "gaussian"], choices=["laplacian", "gaussian"])
    parser.add_argument("--compute-dtype", default="float64", choices=["float32", "float64"])
    args = parser.parse_args(argv)
    run(args.out, data_home=args.data_home, n_folds=args.folds, max_iter=args.max_iter, dsgd_steps=args.dsgd_steps,
        augment=args.augment, n_features=args.n_features or "auto", augment_features=args.augment_features,
        kernels=tuple(args.kernels), compute_dtype=args.compute_dtype)


if __name__ == "__main__":
    main()
