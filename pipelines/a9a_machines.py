"""Kernel machines on a9a (Adult): KernelSVC and KernelLogisticRegression by steps, against scikit-learn.

The standard split: 32,561 training rows, 16,281 test rows, 123 binary features, labels
``{-1, +1}``. Every method gets the Gaussian kernel with the median-trick bandwidth of
``KernelSVC`` (the same number for all). Its regulariser is chosen once, on a seeded
10 % of the training rows held out for validation, from a grid for ``KernelSVC``;
the kernel methods then use it (``SVC(C = 1 / (alpha n))``, the same objective), and the
linear ones their own ``C = 1 / (alpha n)``. Every method is then fitted on all the
training rows and scored on the test rows, one after the other in this process. Rows
are labelled with the class and its solver (``KernelSVC(solver="dsgd")``); the
scikit-learn peers' labels start with "scikit-learn".

Outputs in ``--out`` (default ``pipelines/results/a9a_machines``): ``a9a_machines.json``
and ``a9a_machines.md`` (test accuracy and fit time per method). About ten minutes on
two cores. Needs ``a9a.npz`` in the data home. ``run(..., sample=True)`` with small budgets
is ``python -m benchmarks run a9a-machines --quick`` (the subsets shipped with the package).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SEED = 0
ALPHAS = (1e-4, 1e-5, 1e-6)


def timed(fit):
    t0 = time.perf_counter()
    model = fit()
    return model, time.perf_counter() - t0


def run(out: Path, data_home=None, verbose: bool = True, sample: bool = False, alphas=ALPHAS,
        nystroem_sizes=(1024, 4096), dsgd_steps: int | None = None) -> dict:
    """Choose ``alpha``, fit every method on the training rows, score it on the test rows; the summary record.

    The defaults are the full run. ``sample=True`` reads the subsets shipped with the
    package (the first 3000 training and 1000 test rows) instead of the full files;
    ``alphas`` is the validation grid, ``nystroem_sizes`` the ``m`` of the
    ``Nystroem(m) + LinearSVC`` peers, ``dsgd_steps`` the steps of the classifiers'
    ``solver="dsgd"`` (default: their own ``max_iter="auto"``).
    """
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC, LinearSVC

    from dsgd_dask import KernelLogisticRegression, KernelSVC
    from dsgd_dask.datasets import load_a9a

    out.mkdir(parents=True, exist_ok=True)
    X, y = load_a9a("train", data_home=data_home, sample=sample)
    Xt, yt = load_a9a("test", data_home=data_home, sample=sample)
    # the plain steps (the functional gradient through one block) of the objective the
    # regulariser is chosen for, with their batch of 256 rows and Nyström blocks
    steps = {"solver": "dsgd", "preconditioner": None}
    if dsgd_steps is not None:
        steps["max_iter"] = dsgd_steps
    X, Xt = X.astype(np.float64), Xt.astype(np.float64)
    perm = np.random.default_rng(SEED).permutation(len(X))
    cut = int(0.9 * len(X))
    fit_rows, valid_rows = perm[:cut], perm[cut:]

    def say(msg):
        if verbose:
            print(msg, flush=True)

    validation = []
    for alpha in alphas:
        est, fit = timed(lambda a=alpha: KernelSVC(alpha=a, random_state=SEED, **steps).fit(X[fit_rows],
                                                                                           y[fit_rows]))
        acc = est.score(X[valid_rows], y[valid_rows])
        validation.append({"alpha": alpha, "valid_accuracy": acc, "fit_seconds": fit})
        say(f'validation: KernelSVC(solver="dsgd") alpha={alpha:g}: {acc:.4f} ({fit:.1f} s)')
    alpha = max(validation, key=lambda r: r["valid_accuracy"])["alpha"]
    C = 1.0 / (alpha * len(X))
    say(f"alpha = {alpha:g} (C = {C:.3g})")
    records = []

    def record(method, model, fit):
        acc = float(model.score(Xt, yt))
        records.append({"method": method, "test_accuracy": acc, "fit_seconds": fit})
        say(f"{method:>46}: test accuracy {acc:.4f}, fit {fit:7.1f} s")

    svc, fit = timed(lambda: KernelSVC(alpha=alpha, random_state=SEED, **steps).fit(X, y))
    record('KernelSVC(solver="dsgd")', svc, fit)
    gamma = 1.0 / (2 * svc.bandwidth_**2)
    model, fit = timed(lambda: KernelLogisticRegression(alpha=alpha, bandwidth=svc.bandwidth_,
                                                             random_state=SEED, **steps).fit(X, y))
    record('KernelLogisticRegression(solver="dsgd")', model, fit)
    model, fit = timed(lambda: LinearSVC(C=C, random_state=SEED).fit(X, y))
    record("scikit-learn LinearSVC", model, fit)
    for m in nystroem_sizes:
        model, fit = timed(lambda m=m: make_pipeline(Nystroem(gamma=gamma, n_components=m, random_state=SEED),
                                                     LinearSVC(C=C, random_state=SEED)).fit(X, y))
        record(f"scikit-learn Nystroem({m}) + LinearSVC", model, fit)
    model, fit = timed(lambda: SVC(C=C, gamma=gamma).fit(X, y))
    record("scikit-learn SVC(rbf), exact", model, fit)
    summary = {"date": time.strftime("%Y-%m-%d"), "sample": sample, "n_train": len(X), "n_test": len(Xt),
               "alpha": alpha, "C": C, "bandwidth": svc.bandwidth_,
               "validation": validation, "results": records}
    (out / "a9a_machines.json").write_text(json.dumps(summary, indent=2))
    lines = ["| method | test accuracy | fit (s) |", "|---|---|---|"]
    lines += [f"| {r['method']} | {r['test_accuracy']:.4f} | {r['fit_seconds']:.1f} |" for r in records]
    (out / "a9a_machines.md").write_text("\n".join(lines) + "\n")
    return summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "a9a_machines")
    parser.add_argument("--data-home", default=None, help="directory holding a9a.npz (default: the data home)")
    args = parser.parse_args(argv)
    run(args.out, data_home=args.data_home)


if __name__ == "__main__":
    main()
