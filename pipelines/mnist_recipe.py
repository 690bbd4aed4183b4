"""Dai et al.'s MNIST recipe on the 60,000 training digits: test error against wall time.

Unit-norm rows, PCA to 100 dimensions fitted on a sample of the training digits, then
:class:`~dsgd_dask.KernelLogisticRegression` (softmax over the ten digits) on random
Fourier features of the Gaussian kernel (median bandwidth) by block-preconditioned steps:
every step a new block of frequencies, no regulariser, ``eta_t = 1 / (1 + 1e-4 t)``.
The digits go through dask arrays (row chunks of one batch each), so the fit reads them
chunk by chunk and the final prediction is lazy; ``shuffle_chunks`` chunks make one slab
whose rows are permuted before they are cut into batches, so that the batches differ
from epoch to epoch (with one chunk a slab, every epoch would see the same batches). The
test error is measured at several step counts of one fit (the callback's model; its time
is not counted) and the final prediction through the pipeline on the dask test digits.

Usage::

    python pipelines/mnist_recipe.py [--data PATH] [--out FILE] [--steps 5,15,30,60] [--budget SECONDS]
    python pipelines/mnist_recipe.py --store benchmarks/results/stores/mnist8m_8100000_0.zarr \
        --pca-samples 100000 --steps 6,16,30,46 [--rows N] [--features fourier_pairs] [--bandwidth authors]

With ``--store`` the training rows are those of a digit store (its first ``--rows``), the
test digits those of ``--data``.

The test error is measured at the first chunk task that reaches each step count (so at
multiples of ``shuffle_chunks`` steps). The fit stops at the first measurement after
``--budget`` seconds of fitting. On a shared machine the times are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import dask.array as da
import numpy as np
from sklearn.pipeline import make_pipeline

from dsgd_dask import KernelLogisticRegression, SamplePCA, UnitNorm, median_bandwidth

DEFAULT_DATA = "/work/shared/datasets/mnist.npz"


class _Stop(Exception):
    pass


def recipe_pipeline(n_features: int, block_size: int = 4096, batch_size: int = 8192, jitter: float = 1e-3,
                    shuffle_chunks: int = 2, n_components: int = 100, pca_samples: int = 10000, seed: int = 0,
                    features: str = "fourier", bandwidth="median"):
    """Unit-norm rows, PCA to ``n_components`` fitted on ``pca_samples`` rows, and the recipe's classifier.

    ``KernelLogisticRegression`` (softmax), no regulariser, a new block of ``block_size``
    random Fourier ``features`` per step through the block preconditioner, until ``n_features``.
    """
    clf = KernelLogisticRegression(alpha=0.0, solver="dsgd", features=features, preconditioner="block",
                                   preconditioner_jitter=jitter, block_size=block_size, batch_size=batch_size,
                                   max_iter=n_features // block_size, shuffle_chunks=shuffle_chunks,
                                   n_features=n_features, random_state=seed, bandwidth=bandwidth)
    return make_pipeline(UnitNorm(), SamplePCA(n_components=n_components, n_samples=pca_samples, random_state=seed),
                         clf)


def run(data: str, out: str, steps: list[int], budget: float, block_size: int = 4096, batch_size: int = 8192,
        shuffle_chunks: int = 2, n_components: int = 100, pca_samples: int = 10000, seed: int = 0,
        store: str | None = None, rows: int | None = None, features: str = "fourier",
        bandwidth: str = "median") -> dict:
    """The recipe's fit, read at ``steps``; on the digits of ``data`` or the Zarr ``store``.

    With ``store`` (arrays ``X``, ``y`` as written by ``pipelines/mnist8m_store.py``) the
    training rows are the store's first ``rows`` (all by default), read chunk by chunk,
    and the test digits those of ``data``. ``bandwidth``: ``"median"`` (``sigma`` the
    median distance of the inputs) or ``"authors"`` (:func:`authors_bandwidth`).
    """
    with np.load(data) as f:
        if store is None:
            X = f["X_train"].reshape(len(f["X_train"]), -1).astype(np.float32)
            y = f["y_train"].astype(np.int64)
        Xt = f["X_test"].reshape(len(f["X_test"]), -1).astype(np.float32)
        yt = f["y_test"].astype(np.int64)
    if store is None:
        Xd, yd = da.from_array(X[:rows], chunks=(batch_size, -1)), da.from_array(y[:rows], chunks=batch_size)
    else:
        Xd, yd = da.from_zarr(store, component="X")[:rows], da.from_zarr(store, component="y")[:rows]
        Xd, yd = Xd.rechunk((batch_size, -1)), yd.rechunk(batch_size).astype(np.int64)
    n = len(Xd)
    Xtd = da.from_array(Xt, chunks=(batch_size, -1))
    max_iter = max(steps)
    pipe = recipe_pipeline(max_iter * block_size, block_size, batch_size, shuffle_chunks=shuffle_chunks,
                           n_components=n_components, pca_samples=pca_samples, seed=seed, features=features)
    clf = pipe[-1]
    result = {"data": store or data, "n_train": n, "n_test": len(Xt), "block_size": block_size,
              "batch_size": batch_size, "features": features, "bandwidth": bandwidth,
              "shuffle_chunks": shuffle_chunks, "n_components": n_components, "pca_samples": pca_samples,
              "alpha": 0.0, "seed": seed,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
              "note": "wall times on a shared machine: upper bounds", "points": []}
    excluded = 0.0  # seconds spent measuring inside the callback
    start = time.perf_counter()
    set_bandwidth(pipe, Xd, bandwidth, seed=seed + 1)  # counted in the fit time
    Zt = None

    pending = list(steps)

    def callback(n_steps, model):
        # called after every chunk task (shuffle_chunks batches): the first call at or past
        # each requested step count measures
        nonlocal excluded, Zt
        t0 = time.perf_counter()
        if pending and n_steps >= pending[0]:
            while pending and n_steps >= pending[0]:
                pending.pop(0)
            if Zt is None:
                Zt = pipe[:-1].transform(Xt)
            err = float(np.mean(np.argmax(model.evaluate(Zt), axis=1) != yt))
            fit_seconds = t0 - start - excluded
            result["points"].append({"steps": n_steps, "features": n_steps * block_size,
                                     "test_error": err, "seconds": round(fit_seconds, 1)})
            print(f"steps {n_steps:3d}  test error {100 * err:5.2f} %  {fit_seconds:7.1f} s", flush=True)
            with open(out, "w") as fh:
                json.dump(result, fh, indent=1)
            excluded += time.perf_counter() - t0
            if fit_seconds > budget and n_steps < max_iter:
                raise _Stop
        else:
            excluded += time.perf_counter() - t0

    try:
        pipe.fit(Xd, yd, kernellogisticregression__callback=callback)
    except _Stop:
        result["stopped"] = f"after {result['points'][-1]['steps']} steps: over the budget of {budget} s"
    else:
        t0 = time.perf_counter()
        pred = pipe.predict(Xtd)
        assert isinstance(pred, da.Array)
        result["final"] = {"steps": clf.n_iter_, "test_error": float(np.mean(pred.compute() != yt)),
                           "predict_seconds": round(time.perf_counter() - t0, 1),
                           "bandwidth": float(clf.bandwidth_),
                           "pca_explained_variance": float(pipe[1].explained_variance_ratio_.sum())}
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
    return result


def ridge_peer(X, y, Xt, yt, bandwidth: float, n_features: int = 4096, seed: int = 0) -> dict:
    """scikit-learn ``RBFSampler(n_features)`` and ``RidgeClassifier``, ``alpha`` chosen on 10 % of the rows."""
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import RidgeClassifier

    t0 = time.perf_counter()
    rff = RBFSampler(gamma=1.0 / (2.0 * bandwidth ** 2), n_components=n_features, random_state=seed)
    Z = rff.fit_transform(X).astype(np.float32)
    held = np.random.default_rng(seed).permutation(len(X))
    val, fit = held[:len(X) // 10], held[len(X) // 10:]
    scores = {}
    for alpha in (1e-3, 1e-2, 1e-1, 1.0, 10.0):
        scores[alpha] = RidgeClassifier(alpha=alpha, solver="cholesky").fit(Z[fit], y[fit]).score(Z[val], y[val])
    alpha = max(scores, key=scores.get)
    clf = RidgeClassifier(alpha=alpha, solver="cholesky").fit(Z, y)
    seconds = time.perf_counter() - t0
    err = float(np.mean(clf.predict(rff.transform(Xt)) != yt))
    return {"method": f"scikit-learn RBFSampler({n_features}) + RidgeClassifier(alpha={alpha:g})",
            "test_error": err, "seconds": round(seconds, 1), "alpha_scores": {str(a): v for a, v in scores.items()}}


def defaults(data: str, out: str, seed: int = 0, rows: int | None = None, n_components: int = 100,
             pca_samples: int = 10000) -> dict:
    """Every classifier with ``solver="dsgd"`` and its default settings against the ridge peer.

    On the recipe's inputs (unit-norm rows, PCA to ``n_components`` fitted on
    ``pca_samples`` training digits), for the classifiers and the peer alike; the peer
    gets the bandwidth the classifiers' defaults take (the median distance).
    """
    from dsgd_dask import KernelSVC

    with np.load(data) as f:
        X = f["X_train"].reshape(len(f["X_train"]), -1).astype(np.float32)
        y = f["y_train"].astype(np.int64)
        Xt = f["X_test"].reshape(len(f["X_test"]), -1).astype(np.float32)
        yt = f["y_test"].astype(np.int64)
    if rows:
        X, y = X[:rows], y[:rows]
    pre = make_pipeline(UnitNorm(), SamplePCA(n_components=n_components, n_samples=pca_samples, random_state=seed))
    X = pre.fit_transform(X).astype(np.float32)
    Xt = pre.transform(Xt).astype(np.float32)
    Xd, yd = da.from_array(X, chunks=(8192, -1)), da.from_array(y, chunks=8192)
    result = {"data": data, "n_train": len(X), "n_test": len(Xt), "seed": seed,
              "input": f"unit-norm rows, PCA to {n_components} fitted on {pca_samples} training digits",
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
              "note": "wall times on a shared machine: upper bounds", "rows": []}
    bandwidth = None
    for cls in (KernelLogisticRegression, KernelSVC):
        t0 = time.perf_counter()
        est = cls(solver="dsgd", random_state=seed).fit(Xd, yd)
        seconds = time.perf_counter() - t0
        err = float(np.mean(est.predict(da.from_array(Xt, chunks=(8192, -1))).compute() != yt))
        bandwidth = float(est.bandwidth_)
        row = {"method": f"{cls.__name__}(solver='dsgd'), defaults ({est.n_features_} {est._params['features']} "
                         f"features, {est.n_iter_} steps)", "test_error": err, "seconds": round(seconds, 1)}
        result["rows"].append(row)
        print(f"{row['method']}: {100 * err:.2f} % in {seconds:.1f} s", flush=True)
    row = ridge_peer(X, y, Xt, yt, bandwidth, seed=seed)
    result["rows"].append(row)
    print(f"{row['method']}: {100 * row['test_error']:.2f} % in {row['seconds']:.1f} s", flush=True)
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
    return result


def authors_bandwidth(Z, n_draws: int = 4000, seed: int = 1) -> float:
    """Dai et al.'s Gaussian bandwidth: ``exp(-|x - y|^2 / median^2)``, as this package's ``sigma``.

    Their kernel is ``exp(-s |x - y|^2)`` with ``s = 1 / median^2``, the package's Gaussian
    ``exp(-|x - y|^2 / (2 sigma^2))`` at ``sigma = median / sqrt(2)``. The median is
    :func:`~dsgd_dask.median_bandwidth` of the inputs ``Z`` (numpy or dask) at the first
    :data:`~dsgd_dask.features.bandwidth.MEDIAN_SAMPLE` (1000), in row order, of
    ``n_draws`` seeded row indices drawn uniformly (the authors take 4000 rows).
    """
    idx = np.sort(np.random.default_rng(seed).choice(len(Z), size=min(n_draws, len(Z)), replace=False))
    rows = Z[idx]  # median_bandwidth keeps the first MEDIAN_SAMPLE of them
    rows = rows.compute() if isinstance(rows, da.Array) else rows
    return median_bandwidth(np.asarray(rows, dtype=np.float64)) / np.sqrt(2.0)


def set_bandwidth(pipe, X, rule: str, seed: int = 1, what: str = "bandwidth") -> None:
    """Set the bandwidth of :func:`recipe_pipeline`'s classifier by ``rule``, before its fit.

    ``"median"``: leave the classifier's own median trick. ``"authors"``: fit the
    preprocessing on ``X`` and take :func:`authors_bandwidth` of its outputs (the pipeline's
    fit then fits the same seeded preprocessing again). ``what`` names the option in errors.
    """
    if rule not in ("median", "authors"):
        raise ValueError(f"{what} must be 'median' or 'authors', got {rule!r}")
    if rule == "authors":
        pipe[-1].set_params(bandwidth=authors_bandwidth(pipe[:-1].fit(X).transform(X), seed=seed))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--out", default="mnist_recipe.json")
    parser.add_argument("--steps", default="5,15,30,60")
    parser.add_argument("--budget", type=float, default=420.0)
    parser.add_argument("--block-size", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--shuffle-chunks", type=int, default=2)
    parser.add_argument("--pca-samples", type=int, default=10000)
    parser.add_argument("--store", default=None, help="a Zarr store of training digits (X, y) instead of --data's")
    parser.add_argument("--rows", type=int, default=None, help="train on the first ROWS rows only")
    parser.add_argument("--features", default="fourier", choices=("fourier", "fourier_pairs"))
    parser.add_argument("--bandwidth", default="median", choices=("median", "authors"),
                        help="sigma = the median distance, or Dai et al.'s exp(-|x - y|^2 / median^2)")
    parser.add_argument("--defaults", action="store_true",
                        help="every classifier with its default settings against the ridge peer instead")
    args = parser.parse_args(argv)
    if args.defaults:
        defaults(args.data, args.out)
        return
    steps = sorted(int(s) for s in args.steps.split(","))
    run(args.data, args.out, steps, args.budget, block_size=args.block_size, batch_size=args.batch_size,
        shuffle_chunks=args.shuffle_chunks, pca_samples=args.pca_samples, store=args.store, rows=args.rows,
        features=args.features, bandwidth=args.bandwidth)


if __name__ == "__main__":
    main()
