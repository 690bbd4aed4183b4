"""Kernel machines on MNIST, 10 classes: DSGD against Nyström and random Fourier features, and exact SVC.

The standard split: 60,000 training digits, 10,000 test digits, pixels / 255. Every
method gets the Gaussian kernel with one bandwidth and one regulariser ``nu``, chosen
once by kernel ridge regression on one-hot codes with 4096 Nyström features, fitted on a
seeded 90 % of the training digits and scored on the other 10 % (a grid of multiples of
the median distance and of ``nu``): test digits play no part in any choice.

Methods, one after the other in this process (rows labelled with the class and its solver;
the scikit-learn peers' labels start with "scikit-learn"):

* ``KernelRidge(solver="cg")`` on the ``{-1, +1}`` one-hot codes of the classes,
  predicting the class of the largest output (the squared loss of EigenPro and FALKON),
  ``M`` Nyström features in blocks of 1024 whitened per block, penalised by the RKHS norm
  (Nyström kernel ridge on all ``M`` landmarks), on the 60,000 digits; and,
  with ``--augment R``, on an out-of-core Zarr store of ``R x 60,000`` rows: the digits and
  ``R - 1`` randomly deformed copies of each (shifts, small rotations, elastic fields:
  :func:`dsgd_dask.datasets.digit_stream`), the setting where a method whose memory does
  not grow with the rows can use more of them. ``--max-passes`` full passes at most (the
  first, which gathers the right-hand side, included). Test error after every pass of
  conjugate gradients, against the fit's wall time (the test evaluations not counted).
* ``KernelSVC(solver="dsgd")``: doubly stochastic steps (``--svc-steps``).
* scikit-learn ``Nystroem(m)`` and ``RBFSampler(m)``, each followed by ``RidgeClassifier``
  with the same ``nu`` (``alpha = nu n``: the same objective) and, for ``m = 1024``, by
  ``LinearSVC`` (primal, squared hinge, ``C = 1 / (nu n)``; its solver takes minutes per
  class at larger ``m``); ``m`` up to 16,384, whose 60,000 x m feature matrix (3.9 GB in
  float32) is the largest this 24 GiB machine holds with the solver's copies.
* scikit-learn ``SVC`` (exact Gaussian kernel, ``C = 10``) on as many training digits
  as ``--svc-rows``.

Outputs in ``--out`` (default ``pipelines/results/mnist_machines``):
``mnist_machines.json``, ``mnist_machines.md`` and ``mnist_machines.png`` (test error
against wall time). Needs ``mnist.npz`` in the data home; about 90 minutes on two cores with
``--augment 4`` (half an hour of it scikit-learn's ``Nystroem(16384)``).
``run(..., sample=True)`` with small budgets is ``python -m benchmarks run mnist-machines --quick``
(the subsets shipped with the package).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SEED = 0
SCALES = (0.35, 0.5, 0.7, 1.0)
NUS = (1e-9, 1e-8, 1e-7, 1e-6)


def one_hot(y: np.ndarray, classes: int = 10) -> np.ndarray:
    Y = -np.ones((len(y), classes), dtype=np.float32)
    Y[np.arange(len(y)), y] = 1.0
    return Y


def choose(X: np.ndarray, y: np.ndarray, m: int = 4096):
    """Bandwidth and ``nu``: kernel ridge on ``m`` Nyström features of 90 % of the training digits, scored on 10 %."""
    from scipy.linalg import cho_factor, cho_solve
    from sklearn.kernel_approximation import Nystroem

    from dsgd_dask.features.bandwidth import median_bandwidth

    perm = np.random.default_rng(SEED).permutation(len(X))
    cut = int(0.9 * len(X))
    fit, valid = perm[:cut], perm[cut:]
    median = median_bandwidth(X[perm[:2000]])
    Y = one_hot(y[fit]).astype(np.float64)
    trials = []
    for scale in SCALES:
        s = scale * median
        mapper = Nystroem(gamma=1.0 / (2 * s * s), n_components=m, random_state=SEED).fit(X[fit])
        Z = mapper.transform(X[fit]).astype(np.float32)
        G, b = (Z.T @ Z).astype(np.float64), Z.T.astype(np.float64) @ Y
        Zv = mapper.transform(X[valid])
        for nu in NUS:
            coef = cho_solve(cho_factor(G + nu * len(fit) * np.eye(m)), b)
            err = float(((Zv @ coef).argmax(axis=1) != y[valid]).mean())
            trials.append({"scale": scale, "nu": nu, "valid_error": err})
    best = min(trials, key=lambda t: (t["valid_error"], -t["nu"]))
    return best["scale"] * median, best["nu"], median, trials


def augmented_store(images: np.ndarray, labels: np.ndarray, copies: int, path: Path) -> Path:
    """``copies x 60,000`` rows (the digits, then deformed copies) in a uint8 Zarr group (made once)."""
    try:  # run as a script (pipelines/ on the path) or imported as pipelines.mnist_machines
        from mnist8m_store import reuse_or_write
    except ImportError:
        from pipelines.mnist8m_store import reuse_or_write

    return reuse_or_write(path, copies * len(images), SEED, lambda: (images, labels))


def run(out: Path, data_home=None, n_features: int = 16384, max_passes: int = 21, augment: int = 0,
        svc_steps: int = 2000, svc_rows: int = 20000, peer_sizes=(1024, 4096, 16384), verbose: bool = True,
        sample: bool = False, choose_features: int = 4096, linear_svc_features: int = 1024,
        plain: bool = True, peer_kinds=("Nystroem", "RBFSampler"), augment_features: int | None = None) -> dict:
    """Choose the bandwidth and ``nu``, fit every method, score it on the test digits; the summary record.

    The defaults are the full run. ``sample=True`` reads the subsets shipped with the
    package (the first 5000 training and 2000 test digits) instead of ``mnist.npz``;
    ``max_passes`` bounds the full passes of the ridge fits (``max_iter``: the first
    included, so 21 is the first pass and 20 of conjugate gradients);
    ``choose_features`` is the number of Nyström features of the choice (:func:`choose`);
    the peers with at most ``linear_svc_features`` features are also fitted by ``LinearSVC``.
    ``plain=False`` skips the DSGD fit on the 60,000 digits alone (``augment`` fits only);
    ``svc_rows=0`` skips the exact SVC; ``peer_kinds`` names the scikit-learn feature maps run;
    ``augment_features`` is the feature budget of the ``augment`` fit (default ``n_features``).
    """
    import dask.array as da
    from sklearn.kernel_approximation import Nystroem, RBFSampler
    from sklearn.linear_model import RidgeClassifier
    from sklearn.svm import SVC, LinearSVC

    from dsgd_dask import KernelRidge, KernelSVC
    from dsgd_dask.datasets import load_mnist

    out.mkdir(parents=True, exist_ok=True)
    images, y = load_mnist("train", data_home=data_home, sample=sample)
    Xt_raw, yt = load_mnist("test", data_home=data_home, sample=sample)
    X = images.astype(np.float32) / 255
    Xt = Xt_raw.astype(np.float32) / 255
    n = len(X)

    def say(msg):
        if verbose:
            print(msg, flush=True)

    bandwidth, nu, median, trials = choose(X, y, choose_features)
    gamma = 1.0 / (2 * bandwidth**2)
    say(f"bandwidth {bandwidth:.3f} ({bandwidth / median:.2f} x median {median:.3f}), nu {nu:g}")
    records, curves = [], []
    head = {"date": time.strftime("%Y-%m-%d"), "sample": sample, "bandwidth": bandwidth, "median": median, "nu": nu,
            "validation": trials}

    def record(method, rows, features, error, fit, note=""):
        records.append({"method": method, "rows": rows, "features": features, "test_error": float(error),
                        "fit_seconds": float(fit), "note": note})
        say(f"{method:>48}: rows {rows:>7}, features {features:>6}, test error {error:.4f}, fit {fit:7.1f} s")
        write(out, {**head, "results": records, "curves": curves})  # kept as it comes: a stopped run loses nothing

    def dsgd_ridge(name, Xfit, Yfit, rows, n_features=n_features):
        curve = {"method": name, "seconds": [], "test_error": [], "passes": []}
        clock = {"start": time.perf_counter(), "paused": 0.0}

        def callback(passes, model):
            if passes == 1:  # the first pass gathers the right-hand side: no step yet, the zero function
                return
            t = time.perf_counter()
            curve["seconds"].append(t - clock["start"] - clock["paused"])
            curve["test_error"].append(float((model.evaluate(Xt).argmax(axis=1) != yt).mean()))
            curve["passes"].append(passes)
            clock["paused"] += time.perf_counter() - t
            say(f"  {name}: pass {passes}, {curve['seconds'][-1]:.0f} s, test error {curve['test_error'][-1]:.4f}")

        est = KernelRidge(alpha=nu, solver="cg", n_features=n_features, max_iter=max_passes, tol=1e-8,
                          bandwidth=bandwidth, random_state=SEED)
        est.fit(Xfit, Yfit, callback=callback)
        fit = time.perf_counter() - clock["start"] - clock["paused"]
        curves.append(curve)
        error = float((np.asarray(est.predict(Xt)).argmax(axis=1) != yt).mean())
        record(name, rows, est.n_features_, error, fit, f"{est.n_iter_} passes")
        return est

    if plain:
        dsgd_ridge('KernelRidge(solver="cg"), one-hot', X, one_hot(y), n)
    if augment > 1:
        import zarr

        store = augmented_store(images.reshape(-1, 28, 28), y, augment,
                                out / "stores" / f"mnist_deformed_{augment}.zarr")
        group = zarr.open_group(str(store), mode="r")
        Xa = da.from_zarr(group["X"]).astype(np.float32) / 255
        codes = da.from_zarr(group["y"])
        ya = codes.map_blocks(one_hot, new_axis=1, chunks=(codes.chunks[0], (10,)), dtype=np.float32)
        dsgd_ridge(f'KernelRidge(solver="cg"), one-hot, {augment}x deformed', Xa, ya, augment * n,
                   n_features=augment_features or n_features)

    if svc_steps:
        t0 = time.perf_counter()
        svc = KernelSVC(alpha=nu, solver="dsgd", preconditioner=None, n_features=n_features, max_iter=svc_steps,
                        bandwidth=bandwidth, random_state=SEED).fit(X, y)
        fit = time.perf_counter() - t0
        record('KernelSVC(solver="dsgd")', n, svc.n_features_, 1 - svc.score(Xt, yt), fit, f"{svc_steps} steps")

    for m in peer_sizes:
        for name, make in (("Nystroem", lambda m=m: Nystroem(gamma=gamma, n_components=m, random_state=SEED)),
                           ("RBFSampler", lambda m=m: RBFSampler(gamma=gamma, n_components=m, random_state=SEED))):
            if name not in peer_kinds:
                continue
            t0 = time.perf_counter()
            mapper = make().fit(X)
            Z = mapper.transform(X).astype(np.float32)
            t_map = time.perf_counter() - t0
            Zt = mapper.transform(Xt).astype(np.float32)
            t0 = time.perf_counter()
            clf = RidgeClassifier(alpha=nu * n).fit(Z, y)
            record(f"scikit-learn {name}({m}) + RidgeClassifier", n, m, 1 - clf.score(Zt, yt),
                   t_map + time.perf_counter() - t0)
            if m <= linear_svc_features:
                t0 = time.perf_counter()
                clf = LinearSVC(C=1.0 / (nu * n), dual=False, random_state=SEED).fit(Z, y)
                record(f"scikit-learn {name}({m}) + LinearSVC", n, m, 1 - clf.score(Zt, yt),
                       t_map + time.perf_counter() - t0)
            del Z, Zt, mapper, clf

    if svc_rows:
        rows = np.random.default_rng(SEED).permutation(n)[:svc_rows]
        t0 = time.perf_counter()
        svc = SVC(C=10.0, gamma=gamma).fit(X[rows], y[rows])
        record("scikit-learn SVC (exact), C=10", len(rows), 0, 1 - svc.score(Xt, yt), time.perf_counter() - t0,
               f"{len(svc.support_)} support vectors")

    summary = {**head, "results": records, "curves": curves}
    write(out, summary)
    plot(summary, out / "mnist_machines.png")
    return summary


def write(out: Path, summary: dict) -> None:
    (out / "mnist_machines.json").write_text(json.dumps(summary, indent=2))
    lines = ["| method | training rows | features | test error | fit (s) | note |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['rows']:,} | {r['features'] or '-'} | {100 * r['test_error']:.2f}% | "
              f"{r['fit_seconds']:.0f} | {r['note']} |" for r in summary["results"]]
    (out / "mnist_machines.md").write_text("\n".join(lines) + "\n")


def plot(summary: dict, path: Path, ylim=(0.8, 5)) -> None:
    """Test error (%) against fit wall time: a curve per DSGD ridge fit, a cross per other method.

    ``ylim``: the range of test errors shown (``None``: all of them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for curve in summary["curves"]:
        ax.plot(curve["seconds"], 100 * np.array(curve["test_error"]), marker=".", label=curve["method"])
    for r in summary["results"]:
        if not r["method"].startswith("KernelRidge"):
            ax.scatter(r["fit_seconds"], 100 * r["test_error"], label=r["method"], marker="x")
    ax.set_xscale("log")
    ax.set_xlabel("fit wall time (s)")
    ax.set_ylabel("test error (%)")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "mnist_machines")
    parser.add_argument("--data-home", default=None, help="directory holding mnist.npz (default: the data home)")
    parser.add_argument("--n-features", type=int, default=16384)
    parser.add_argument("--max-passes", type=int, default=21,
                        help="full passes of each ridge fit (max_iter), the first (the right-hand side) included")
    parser.add_argument("--augment", type=int, default=0, help="R: also fit on R x 60,000 rows (digits + deformed)")
    parser.add_argument("--svc-steps", type=int, default=2000, help="KernelSVC steps (0: skip)")
    parser.add_argument("--svc-rows", type=int, default=20000, help="training rows of the exact SVC (0: skip)")
    parser.add_argument("--peer-sizes", type=int, nargs="*", default=[1024, 4096, 16384],
                        help="feature counts of the scikit-learn peers (none: skip them)")
    parser.add_argument("--peer-kinds", nargs="+", default=["Nystroem", "RBFSampler"],
                        choices=["Nystroem", "RBFSampler"], help="the scikit-learn feature maps of the peers")
    parser.add_argument("--augment-features", type=int, default=None,
                        help="features of the --augment fit (default: --n-features)")
    parser.add_argument("--no-plain", action="store_true",
                        help="skip the DSGD fit on the 60,000 digits alone (the --augment fit only)")
    args = parser.parse_args(argv)
    run(args.out, data_home=args.data_home, n_features=args.n_features, max_passes=args.max_passes,
        augment=args.augment, svc_steps=args.svc_steps, svc_rows=args.svc_rows, peer_sizes=tuple(args.peer_sizes),
        plain=not args.no_plain, peer_kinds=tuple(args.peer_kinds), augment_features=args.augment_features)


if __name__ == "__main__":
    main()
