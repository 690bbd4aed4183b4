"""The classifiers' default steps against a stop chosen on held-out rows, on data no default was chosen on.

With their defaults the classifiers take Dai et al.'s recipe for a number of steps set by
the rows (``max_iter="auto"``: eight passes, between 16 and 128 steps). A stop chosen by a
held-out score, as scikit-learn's ``HistGradientBoostingClassifier(early_stopping=True)``
chooses its iterations, is the other way to set it. This script measures what such a
stop would give. For each dataset and classifier, and each number of steps ``T`` of a
grid, with every other parameter at its default:

* the fit on a seeded 80 % of the training rows, scored on the other 20 % (the held-out
  score a stop would read) and on the test rows;
* the fit on all the training rows, scored on the test rows.

The stop takes the ``T`` of the best held-out score (ties to the fewer steps). Its test
score is that of the 80 % model (the stop keeps the model it scored) or, refitted, of
the fit on all rows with ``T`` steps. Both are set against the defaults. A fit of ``T``
steps is the first ``T`` steps of any longer one: the schedule, the batches and the
blocks do not depend on ``max_iter``.

Datasets: scikit-learn's bundled wine (three cultivars, 13 standardised inputs), two
noisy moons (6000 rows, noise 0.35), ``make_classification`` (8000 rows, 20 inputs, 8
informative, 10 % of the labels flipped), all split 75/25 with seed 0, and 10,000 seeded
MNIST training digits with the 10,000 test digits (``--datasets mnist``; needs ``mnist.npz`` in the
data home). None of them is used by the ``defaults`` comparison.

Run ``python pipelines/recipe_steps.py [--datasets NAME ...]``; writes ``recipe_steps.json`` and
``recipe_steps.md`` in ``--out`` (default ``pipelines/results/recipe_steps``).

``--eta0 E [E ...]`` measures the step size instead: each classifier with its defaults but
``eta0``, one fit on all the training rows per value, scored on the test rows (a smaller
step shrinks what each new block adds, as a learning rate shrinks boosting's trees); it
writes ``recipe_eta0.json`` and ``recipe_eta0.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SEED = 0
CLASSIFIERS = ("KernelSVC", "KernelLogisticRegression")
STEPS = (1, 2, 4, 8, 16, 32)
MNIST_STEPS = (1, 2, 4, 8, 16)
DATASETS = ("wine", "moons", "classification", "mnist")


def _split(X, y, test: float = 0.25):
    idx = np.random.default_rng(SEED).permutation(len(X))
    cut = round(len(X) * (1 - test))
    return X[idx[:cut]], y[idx[:cut]], X[idx[cut:]], y[idx[cut:]]


def load(name: str, data_home=None):
    """``(X, y, X_test, y_test)`` as float32 inputs."""
    from sklearn import datasets as skd

    if name == "wine":
        d = skd.load_wine()
        X, y, Xt, yt = _split(d.data, d.target)
        mu, sd = X.mean(axis=0), X.std(axis=0)
        return ((X - mu) / sd).astype(np.float32), y, ((Xt - mu) / sd).astype(np.float32), yt
    if name == "moons":
        X, y = skd.make_moons(6000, noise=0.35, random_state=SEED)
        return _split(X.astype(np.float32), y)
    if name == "classification":
        X, y = skd.make_classification(8000, 20, n_informative=8, flip_y=0.1, class_sep=0.8, random_state=SEED)
        return _split(X.astype(np.float32), y)
    if name == "mnist":
        from dsgd_dask.datasets import load_mnist

        X, y = load_mnist("train", data_home=data_home)
        Xt, yt = load_mnist("test", data_home=data_home)
        keep = np.sort(np.random.default_rng(SEED).choice(len(X), 10_000, replace=False))
        X = X[keep].reshape(10_000, -1).astype(np.float32) / np.float32(255)
        return X, y[keep], Xt.reshape(len(Xt), -1).astype(np.float32) / np.float32(255), yt
    raise ValueError(f"unknown dataset {name!r}")


def study(name: str, estimator: str, X, y, Xt, yt, steps) -> dict:
    """The held-out and test scores of every number of steps, the defaults, and what the stop would choose."""
    import dsgd_dask

    cls = getattr(dsgd_dask, estimator)
    idx = np.random.default_rng(SEED + 1).permutation(len(X))
    cut = int(0.8 * len(X))
    fit, held = np.sort(idx[:cut]), np.sort(idx[cut:])
    curve = []
    for T in steps:
        t0 = time.perf_counter()
        part = cls(random_state=SEED, max_iter=T).fit(X[fit], y[fit])
        whole = cls(random_state=SEED, max_iter=T).fit(X, y)
        curve.append({"steps": T, "held_out": float(part.score(X[held], y[held])),
                      "test_80": float(part.score(Xt, yt)), "test_all": float(whole.score(Xt, yt)),
                      "seconds": time.perf_counter() - t0})
    t0 = time.perf_counter()
    default = cls(random_state=SEED).fit(X, y)
    seconds = time.perf_counter() - t0
    best = max(curve, key=lambda r: (r["held_out"], -r["steps"]))
    return {"dataset": name, "estimator": estimator, "rows": len(X), "curve": curve,
            "default": {"steps": int(default.n_iter_), "test": float(default.score(Xt, yt)), "seconds": seconds},
            "stop": {"steps": best["steps"], "test_kept": best["test_80"], "test_refit": best["test_all"]}}


def eta0_study(name: str, estimator: str, X, y, Xt, yt, values) -> dict:
    """The test score and fit time of the defaults at every ``eta0`` of ``values``."""
    import dsgd_dask

    cls = getattr(dsgd_dask, estimator)
    scores = []
    for eta0 in values:
        t0 = time.perf_counter()
        est = cls(random_state=SEED, eta0=eta0).fit(X, y)
        scores.append({"eta0": eta0, "steps": int(est.n_iter_), "test": float(est.score(Xt, yt)),
                       "seconds": time.perf_counter() - t0})
    return {"dataset": name, "estimator": estimator, "rows": len(X), "scores": scores}


def eta0_table(records: list) -> str:
    values = [s["eta0"] for s in records[0]["scores"]]
    lines = ["| dataset (training rows) | classifier | steps | " + " | ".join(f"eta0={v:g}: test" for v in values)
             + " |", "|---|---|---|" + "---|" * len(values)]
    for r in records:
        lines.append(f"| {r['dataset']} ({r['rows']:,}) | {r['estimator']}() | {r['scores'][0]['steps']} | "
                     + " | ".join(f"{s['test']:.4f}" for s in r["scores"]) + " |")
    return "\n".join(lines) + "\n"


def table(records: list) -> str:
    lines = ["| dataset (training rows) | classifier | defaults: steps, test | stop: steps | stop, model kept: test "
             "| stop, refitted: test | held-out score by steps |", "|---|---|---|---|---|---|---|"]
    for r in records:
        d, s = r["default"], r["stop"]
        held = ", ".join(f"{c['steps']}: {c['held_out']:.4f}" for c in r["curve"])
        lines.append(f"| {r['dataset']} ({r['rows']:,}) | {r['estimator']}() | {d['steps']}, {d['test']:.4f} "
                     f"| {s['steps']} | {s['test_kept']:.4f} ({s['test_kept'] - d['test']:+.4f}) "
                     f"| {s['test_refit']:.4f} ({s['test_refit'] - d['test']:+.4f}) | {held} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=DATASETS[:3],
                        help="default: all but mnist (10,000 MNIST training digits)")
    parser.add_argument("--data-home", default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "recipe_steps")
    parser.add_argument("--eta0", nargs="+", type=float, default=None,
                        help="measure these step sizes with the default steps instead of the stop")
    args = parser.parse_args(argv)
    if args.eta0:
        stem, render = "recipe_eta0", eta0_table

        def measure(name, estimator, data):
            return eta0_study(name, estimator, *data, args.eta0)
    else:
        stem, render = "recipe_steps", table

        def measure(name, estimator, data):
            return study(name, estimator, *data, MNIST_STEPS if name == "mnist" else STEPS)
    records = []
    for name in args.datasets:
        data = load(name, args.data_home)
        for estimator in CLASSIFIERS:
            records.append(measure(name, estimator, data))
            print(render(records[-1:]).splitlines()[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(records, indent=1))
    (args.out / f"{stem}.md").write_text(render(records))
    print(render(records))


if __name__ == "__main__":
    main()
