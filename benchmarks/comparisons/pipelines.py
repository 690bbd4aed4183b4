"""mnist-halves, mnist-machines, a9a-machines, qm7-ridge: the comparisons of ``pipelines/`` in the runner.

Each ``measure`` calls its pipeline's own ``run()`` (the same code as its command line)
in a fresh spawned process, as the command line would run it, so that its memory and
threads stay its own and do not distort what the runner's process measures afterwards
(``mnist-halves`` already fits each method in a process of its own, and runs its ``run()``
here). The work folder is under the output folder (``<name>_work``, ``<name>_quick_work``
for ``--quick``; the pipeline also writes its own JSON and table there); the pipeline's
summary becomes the runner's table, notes and figure:

* ``mnist-halves``: :mod:`pipelines.mnist_halves`, kernel CCA of the left and right
  halves of MNIST digits;
* ``mnist-machines``: :mod:`pipelines.mnist_machines`, 10-class kernel machines on MNIST;
* ``a9a-machines``: :mod:`pipelines.a9a_machines`, binary kernel machines on a9a;
* ``qm7-ridge``: :mod:`pipelines.qm7_ridge`, kernel ridge regression of QM7 atomization
  energies.

Full runs use the pipelines' full settings (the command lines' defaults; ``qm7-ridge``
the README's ``--folds 2 --augment 4 --augment-features 16384``) and need the full datasets in the data home.
``--quick`` runs them on the packaged subsets (``sample=True``) with small budgets, and
their processes with one BLAS thread: on a shared machine two spinning BLAS threads can
cost several times the computation itself, and a quick run checks the plumbing, not the
speed.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from benchmarks.runner import Comparison, Report, register

#: The thread counts the BLAS and OpenMP libraries of a new process read when they load.
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _work(ctx, name: str) -> Path:
    return ctx.out / (f"{name}_quick_work" if ctx.quick else f"{name}_work")


@contextmanager
def _running(ctx):
    """Processes started in the block get one BLAS thread for ``--quick``; a missing dataset is a clear exit."""
    saved = {k: os.environ.get(k) for k in _THREAD_VARS}
    if ctx.quick:
        os.environ.update(dict.fromkeys(_THREAD_VARS, "1"))
    try:
        yield
    except FileNotFoundError as err:
        raise SystemExit(f"{err}\n(`--quick` runs on the subsets shipped with the package)") from err
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _in_process(ctx, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a pipeline's ``run``) in a fresh spawned process; its return value."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with _running(ctx), ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _verdict(ours_value: float, peer_value: float, higher_is_better: bool, peer_name: str, ours: str) -> str:
    """Who is ahead, ours (named ``ours``) or the peer, and by how much (relative to the loser's value).

    A gap that rounds to 0.0 % is level.
    """
    ours_ahead = (ours_value > peer_value) == higher_is_better
    loser = peer_value if ours_ahead else ours_value
    if ours_value == peer_value:
        gap = 0.0
    else:
        gap = abs(ours_value - peer_value) / abs(loser) if loser else float("inf")
    if gap < 0.0005:
        return f"{ours} and {peer_name} are level"
    return f"{ours if ours_ahead else peer_name} is ahead, by {gap:.1%}"


def _s(seconds: float) -> str:
    """Seconds for a note: 3 significant digits below 10 s."""
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.3g} s"


# -- mnist-halves ---------------------------------------------------------------------------

HALVES_FULL = {"quick": False}
HALVES_QUICK = {"sample": True}  # the pipeline's SAMPLE budgets


def measure_mnist_halves(ctx) -> Report:
    from pipelines import mnist_halves

    with _running(ctx):
        summary = mnist_halves.run(_work(ctx, "mnist-halves"), data_home=ctx.data_home, **(
            ctx.config(HALVES_FULL, HALVES_QUICK)))
    records, k, n_train = summary["results"], summary["k"], summary["n_train"]
    rows = []
    for r in records:
        failed = r.get("failed")
        rows.append({"method": r["method"], "features": r["features"], "epochs": r["epochs"] or None,
                     "test_correlation_sum": r["test_correlation_sum"], "fit_seconds": r["fit_seconds"],
                     "peak_rss_mib": r["peak_rss_mib"], "note": failed or "", "skipped": bool(failed)})
    done = [r for r in rows if not r["skipped"]]
    best = max(done, key=lambda r: r["test_correlation_sum"])
    dsgd = [r for r in done if r["method"] in (mnist_halves.LOBPCG, mnist_halves.DSGD)]
    rca = [r for r in done if r["method"] in (mnist_halves.RCA_NYSTROEM, mnist_halves.RCA_FOURIER)]
    valid = ", ".join(f"{v['reg']:g}: {v['valid_correlation_sum']:.2f}" for v in summary["validation"]
                      if v.get("valid_correlation_sum") is not None)
    notes = [f"Best test top-{k} correlation sum: {best['method']} ({best['features']:,} features per view), "
             f"{best['test_correlation_sum']:.2f} in {_s(best['fit_seconds'])}."]
    if dsgd and rca:
        d = max(dsgd, key=lambda r: r["test_correlation_sum"])
        p = max(rca, key=lambda r: r["test_correlation_sum"])
        ahead = _verdict(d["test_correlation_sum"], p["test_correlation_sum"], True, p["method"], d["method"])
        run = f"{d['epochs']} epochs" if d["epochs"] else "passes until converged"
        notes.append(f"Best of the passes and steps, {d['method']} ({d['features']:,} features, {run}) "
                     f"{d['test_correlation_sum']:.2f} in {_s(d['fit_seconds'])} against {p['method']} "
                     f"({p['features']:,} features) {p['test_correlation_sum']:.2f} in {_s(p['fit_seconds'])}: "
                     f"{ahead}.")
    if len(summary["validation"]) > 1:
        how = f", the best validation score of {mnist_halves.RCA_NYSTROEM} on the held-out digits ({valid})."
    elif valid:
        how = (f" (the only candidate of the grid; {mnist_halves.RCA_NYSTROEM}'s validation score "
               f"{valid.split(': ')[1]}).")
    else:
        how = " (given)."
    notes.append(f"One ridge for every method, reg = {summary['reg']:g}{how}")
    notes.append(f"{n_train:,} training digits; each method fits in a fresh process (its own peak RSS).")
    for r in rows:
        if r["skipped"]:
            notes.append(f"{r['method']} ({r['features']:,} features): {r['note']}.")

    def figure(path):
        mnist_halves.plot(records, path, n_train=n_train)

    return Report(
        columns={"method": "method", "features": "features per view", "epochs": "epochs",
                 "test_correlation_sum": f"test top-{k} correlation sum", "fit_seconds": "fit (s)",
                 "peak_rss_mib": "peak RSS (MiB)", "note": "note"},
        rows=rows, notes=notes, figure=figure, curves={"validation": summary["validation"]},
        params={"k": k, "n_train": n_train, "reg": summary["reg"], "sample": ctx.quick,
                "blas_threads": 1 if ctx.quick else None,
                "config": mnist_halves.SAMPLE if ctx.quick else mnist_halves.FULL})


register(Comparison(
    name="mnist-halves", title="Kernel CCA of the left and right halves of MNIST digits: passes and steps against RCA",
    data="MNIST, left/right 392-pixel halves; 54,000 training digits in two Zarr stores, 6,000 for "
         "validation, 10,000 test digits",
    methods=('KernelCCA(solver="lobpcg")', 'KernelCCA(solver="dsgd")', 'KernelCCA(solver="rca", features="nystroem")',
             'KernelCCA(solver="rca", features="fourier")', "linear CCA"),
    budgets="k = 50; rca 1,024-8,192 features per view, lobpcg 4,096-16,384 features, dsgd 4,096 for 5 epochs; "
            'one ridge chosen for KernelCCA(solver="rca", n_features=1024) on the validation digits',
    measure=measure_mnist_halves))


# -- mnist-machines -------------------------------------------------------------------------

MACHINES_FULL = {}  # the command line's defaults
MACHINES_QUICK = {"sample": True, "n_features": 1024, "max_passes": 4, "svc_steps": 50, "svc_rows": 1000,
                  "peer_sizes": (256,), "choose_features": 256, "linear_svc_features": 0}


def measure_mnist_machines(ctx) -> Report:
    from pipelines import mnist_machines

    cfg = ctx.config(MACHINES_FULL, MACHINES_QUICK)
    summary = _in_process(ctx, mnist_machines.run, _work(ctx, "mnist-machines"), data_home=ctx.data_home, **cfg)
    rows = [{"method": r["method"], "rows": r["rows"], "features": r["features"] or None,
             "test_error": r["test_error"], "test_error_pct": 100 * r["test_error"], "fit_seconds": r["fit_seconds"],
             "note": r["note"]} for r in summary["results"]]
    dsgd = min((r for r in rows if r["method"].startswith("Kernel")), key=lambda r: r["test_error"])
    peer = min((r for r in rows if not r["method"].startswith("Kernel")), key=lambda r: r["test_error"])
    ahead = _verdict(dsgd["test_error"], peer["test_error"], False, peer["method"], dsgd["method"])
    notes = [f"Best of ours: {dsgd['method']}, {dsgd['test_error_pct']:.2f}% test error in "
             f"{_s(dsgd['fit_seconds'])}; "
             f"best peer: {peer['method']} on {peer['rows']:,} rows, {peer['test_error_pct']:.2f}% in "
             f"{_s(peer['fit_seconds'])}: {ahead}.",
             f"Bandwidth {summary['bandwidth']:.3g} ({summary['bandwidth'] / summary['median']:.2f} x the median "
             f"distance) and nu {summary['nu']:g} for every method, chosen by Nyström kernel ridge on 90 % of the "
             "training digits, scored on the other 10 %.",
             "The ridge's fit times exclude the test evaluations after each pass."]

    def figure(path):
        mnist_machines.plot(summary, path, ylim=None if ctx.quick else (0.8, 5))

    return Report(
        columns={"method": "method", "rows": "training rows", "features": "features",
                 "test_error_pct": "test error (%)", "fit_seconds": "fit (s)", "note": "note"},
        rows=rows, notes=notes, figure=figure, curves={"curves": summary["curves"],
                                                       "validation": summary["validation"]},
        params={**cfg, "bandwidth": summary["bandwidth"], "median": summary["median"], "nu": summary["nu"],
                "blas_threads": 1 if ctx.quick else None})


register(Comparison(
    name="mnist-machines", title="Kernel machines on MNIST, 10 classes: KernelRidge and KernelSVC against "
                                 "Nyström, random features and exact SVC",
    data="MNIST, 60,000 training and 10,000 test digits, pixels / 255",
    methods=('KernelRidge(solver="cg"), one-hot', 'KernelSVC(solver="dsgd")',
             "scikit-learn Nystroem + RidgeClassifier/LinearSVC", "scikit-learn RBFSampler + RidgeClassifier/LinearSVC",
             "scikit-learn SVC (exact)"),
    budgets='16,384 features: KernelRidge(solver="cg") 21 full passes (the first and 20 of conjugate gradients), '
            'KernelSVC(solver="dsgd") 2,000 steps; peers 1,024-16,384 features; exact SVC on 20,000 digits',
    measure=measure_mnist_machines))


# -- a9a-machines ---------------------------------------------------------------------------

A9A_FULL = {}  # the command line's defaults
A9A_QUICK = {"sample": True, "alphas": (1e-4, 1e-5), "nystroem_sizes": (256,), "dsgd_steps": 150}


def measure_a9a_machines(ctx) -> Report:
    from dsgd_dask.datasets import load_a9a
    from pipelines import a9a_machines

    cfg = ctx.config(A9A_FULL, A9A_QUICK)
    summary = _in_process(ctx, a9a_machines.run, _work(ctx, "a9a-machines"), data_home=ctx.data_home, **cfg)
    _, yt = load_a9a("test", sample=True) if ctx.quick else load_a9a("test", data_home=ctx.data_home)
    majority = float(max((yt == 1).mean(), (yt == -1).mean()))
    rows = [{"method": r["method"], "test_accuracy": r["test_accuracy"], "fit_seconds": r["fit_seconds"]}
            for r in summary["results"]]
    dsgd = max((r for r in rows if r["method"].startswith("Kernel")), key=lambda r: r["test_accuracy"])
    peer = max((r for r in rows if not r["method"].startswith("Kernel")), key=lambda r: r["test_accuracy"])
    ahead = _verdict(dsgd["test_accuracy"], peer["test_accuracy"], True, peer["method"], dsgd["method"])
    at_majority = [r["method"] for r in rows if r["test_accuracy"] <= majority + 0.005]
    notes = [f"Best of ours: {dsgd['method']}, test accuracy {dsgd['test_accuracy']:.4f} in "
             f"{_s(dsgd['fit_seconds'])}; best peer: {peer['method']}, {peer['test_accuracy']:.4f} in "
             f"{_s(peer['fit_seconds'])}: {ahead}.",
             f"alpha = {summary['alpha']:g} (C = {summary['C']:.3g} for the scikit-learn peers), chosen for "
             "KernelSVC on a seeded 10 % of the training rows; bandwidth "
             f"{summary['bandwidth']:.3g} (KernelSVC's median) for every kernel method.",
             f"Predicting the majority class scores {majority:.4f} on these test rows"
             + (f"; {', '.join(at_majority)} scored within half a point of that (no better than a "
                "constant)." if at_majority else ".")]

    def figure(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7.5, 4.4))
        for r in rows:
            ax.scatter(max(r["fit_seconds"], 1e-3), r["test_accuracy"], marker="^" if r["method"].startswith("Kernel")
                       else "o", label=r["method"])
        ax.axhline(majority, color="grey", ls=":", label="majority class")
        ax.set_xscale("log")
        ax.set_xlabel("fit wall time (s)")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title(f"a9a, {summary['n_train']:,} training rows, {summary['n_test']:,} test rows")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return Report(
        columns={"method": "method", "test_accuracy": "test accuracy", "fit_seconds": "fit (s)"},
        rows=rows, notes=notes, figure=figure, curves={"validation": summary["validation"]},
        params={**cfg, "alpha": summary["alpha"], "C": summary["C"], "bandwidth": summary["bandwidth"],
                "n_train": summary["n_train"], "n_test": summary["n_test"], "majority_accuracy": majority,
                "blas_threads": 1 if ctx.quick else None})


register(Comparison(
    name="a9a-machines", title="Kernel machines on a9a (Adult): KernelSVC and KernelLogisticRegression by steps "
                               "against SVC, LinearSVC and Nyström + LinearSVC",
    data="a9a, 32,561 training and 16,281 test rows, 123 binary features",
    methods=('KernelSVC(solver="dsgd")', 'KernelLogisticRegression(solver="dsgd")', "scikit-learn LinearSVC",
             "scikit-learn Nystroem + LinearSVC", "scikit-learn SVC (rbf, exact)"),
    budgets='KernelSVC and KernelLogisticRegression (solver="dsgd"): their defaults; scikit-learn Nystroem 1,024 and '
            "4,096 features; alpha chosen on 10 % of the training rows",
    measure=measure_a9a_machines))


# -- qm7-ridge ------------------------------------------------------------------------------

QM7_FULL = {"n_folds": 2, "augment": 4, "augment_features": 16384}  # the README's run
QM7_QUICK = {"sample": True, "n_folds": 1, "max_iter": 11, "augment": 2}


def measure_qm7_ridge(ctx) -> Report:
    from pipelines import qm7_ridge

    cfg = ctx.config(QM7_FULL, QM7_QUICK)
    summary = _in_process(ctx, qm7_ridge.run, _work(ctx, "qm7-ridge"), data_home=ctx.data_home, **cfg)
    records = summary["results"]
    rows = []
    for kind, chosen in summary["chosen"].items():
        for method in dict.fromkeys(r["method"] for r in records if r["kernel"] == kind):
            rs = [r for r in records if r["kernel"] == kind and r["method"] == method]
            rows.append({"kernel": kind, "method": method, "mae": float(np.mean([r["mae"] for r in rs])),
                         "fit_seconds": float(np.mean([r["fit_seconds"] for r in rs])), "folds": len(rs),
                         "bandwidth": chosen["bandwidth"], "alpha": chosen["alpha"]})
    notes = []
    for kind, chosen in summary["chosen"].items():
        rs = [r for r in rows if r["kernel"] == kind]
        for exact in (r for r in rs if r["method"].startswith("scikit-learn")):
            # our fits on the same rows: sorted matrices, or the same random sortings
            same = "sortings" in exact["method"]
            dsgd = min((r for r in rs if r["method"].startswith("Kernel") and ("sortings" in r["method"]) == same),
                       key=lambda r: r["mae"], default=None)
            if dsgd is None:
                continue
            ahead = _verdict(dsgd["mae"], exact["mae"], False, exact["method"], dsgd["method"])
            notes.append(f"{kind.capitalize()} kernel (bandwidth {chosen['bandwidth']:.4g} = "
                         f"{chosen['bandwidth'] / chosen['median_distance']:g} x median, alpha {chosen['alpha']:g}): "
                         f"{exact['method']} MAE {exact['mae']:.2f} kcal/mol in {_s(exact['fit_seconds'])}, "
                         f"{dsgd['method']} {dsgd['mae']:.2f} ({100 * (dsgd['mae'] / exact['mae'] - 1):+.0f} %) "
                         f"in {_s(dsgd['fit_seconds'])}: {ahead}.")
    notes.append(f"{summary['n_molecules']:,} molecules, a seeded 5-fold split, {summary['folds']} fold(s) run; "
                 "bandwidth and alpha chosen by exact kernel ridge on a validation part of fold 0's training rows.")

    def figure(path):
        import matplotlib.pyplot as plt

        kinds = list(summary["chosen"])
        methods = list(dict.fromkeys(r["method"] for r in rows))
        fig, ax = plt.subplots(figsize=(7.5, 4.4))
        width = 0.8 / len(methods)
        for j, method in enumerate(methods):
            values = [next((r["mae"] for r in rows if r["kernel"] == kind and r["method"] == method), np.nan)
                      for kind in kinds]
            bars = ax.bar(np.arange(len(kinds)) + (j - (len(methods) - 1) / 2) * width, values, width, label=method)
            ax.bar_label(bars, fmt="%.2f", fontsize=8)
        ax.set_xticks(np.arange(len(kinds)), kinds)
        ax.set_ylabel("test MAE (kcal/mol), mean over folds")
        ax.legend(fontsize=8)
        ax.set_title(f"QM7 kernel ridge, {summary['n_molecules']:,} molecules, sorted Coulomb matrices")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return Report(
        columns={"kernel": "kernel", "method": "method", "mae": "MAE (kcal/mol), mean over folds",
                 "fit_seconds": "fit (s), mean", "folds": "folds"},
        rows=rows, notes=notes, figure=figure, curves={"results": records, "chosen": summary["chosen"]},
        params={**cfg, "n_molecules": summary["n_molecules"], "blas_threads": 1 if ctx.quick else None})


register(Comparison(
    name="qm7-ridge", title="QM7 atomization energies: KernelRidge against exact KernelRidge",
    data="QM7, 7165 molecules, sorted Coulomb matrices (276 entries), seeded 5-fold split",
    methods=("scikit-learn KernelRidge (exact)", 'KernelRidge(solver="cg")'),
    budgets="2 folds; each method on the sorted matrices and on 4 random sortings of each training molecule; "
            'KernelRidge(solver="cg") at most 31 full passes (the first and 30 of conjugate gradients), its default '
            "4,096 Nyström features on the sorted matrices and 16,384 on the random sortings; Laplacian and Gaussian "
            "kernels",
    measure=measure_qm7_ridge))
