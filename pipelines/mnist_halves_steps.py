"""Kernel CCA's doubly stochastic steps on the MNIST halves at the paper's settings, one configuration.

``KernelCCA(solver="dsgd", features="fourier")`` with 20,480 features per view in blocks
of 2048 and batches of 1024 rows (Xie, Liang & Song 2015) on the left and right 392-pixel
halves of the 60,000 MNIST training digits (shuffled once), for ``--steps`` steps; after
every chunk of steps the top-50 correlation sum of the raw functions, and of the same
functions after a linear CCA on 10,000 training rows (with ``--store``, drawn at random from
all its training rows), on the 10,000 test digits (or, with
``--validation``, on 10,000 training digits held out from the other 50,000). With
``--store PATH`` (an MNIST8M-like store, ``pipelines/mnist8m_store.py``) the steps draw their
batches from the whole store instead, less the 10,000 rows that the ``kcca-mnist8m``
comparison holds out and 10,000 validation rows on which they are scored:
how that comparison's step settings are chosen without touching its held-out rows.
Scoring time is not counted. Prints one line per chunk: ``(steps, raw sum, rotated sum, seconds)``,
then the sum of the fitted model (the functions rotated on the fit's own sample).
``--bandwidth-scale S`` takes ``S`` times each view's median distance (on 2000 seeded training
rows) as the bandwidth. ``--average-from T`` makes the model of the mean of the iterates of
steps ``T`` and later (``KernelCCA(average=...)``; the curve then shows the mean). With
``--store`` and ``--rca M``, instead of the steps, one
``KernelCCA(solver="rca", features=FEATURES, n_features=M)`` on 60,000 seeded training rows of
the store, scored on its validation rows (how the steps' bandwidth is chosen).

Examples::

    python pipelines/mnist_halves_steps.py --preconditioner sample --eta0 0.1
    python pipelines/mnist_halves_steps.py --preconditioner block --eta0 0.5
    python pipelines/mnist_halves_steps.py --preconditioner sample --eta0 0.2 --validation
    python pipelines/mnist_halves_steps.py --eta0 0.05 --eta-decay 0.001 --steps 1000 --validation
    python pipelines/mnist_halves_steps.py --features fourier_pairs --n-features 40960 --block-size 4096 --validation
    python pipelines/mnist_halves_steps.py --features fourier_pairs --n-features 40960 --block-size 4096 \
        --store benchmarks/results/stores/mnist8m_8100000_0.zarr --steps 520 --jitter 0.3
    python pipelines/mnist_halves_steps.py --features fourier --rca 4096 --bandwidth-scale 1.5 \
        --store benchmarks/results/stores/mnist8m_8100000_0.zarr
    python pipelines/mnist_halves_steps.py --features fourier_pairs --n-features 40960 --block-size 4096 \
        --store benchmarks/results/stores/mnist8m_8100000_0.zarr --steps 3000 --jitter 0.6 --eta0 0.2 \
        --eta-decay 0.003 --average-from 1501

The last three run the paper's 20,480 frequencies in blocks of 2048 as ``[cos, sin]`` pairs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

LEFT = np.array([r * 28 + c for r in range(28) for c in range(14)])
RIGHT = LEFT + 14
#: Seeds of the store rows ``kcca-mnist8m`` holds out, and of the validation rows of ``--store``.
HELDOUT_SEED, VALIDATION_SEED = 2, 3
#: Seed of the store's training rows on which the rotated sum's linear CCA is fitted.
ROTATION_SEED = 5


def run(preconditioner: str | None, eta0: float, steps: int = 300, jitter: float = 0.1, reg: float = 1e-7,
        n_features: int = 20480, block_size: int = 2048, batch_size: int = 1024, chunk_steps: int = 100,
        validation: bool = False, data_home=None, k: int = 50, eta_decay: float = 0.01,
        features: str = "fourier", store=None, bandwidth_scale: float = 1.0, average_from: int = 0) -> list[tuple]:
    """The curve ``[(steps, raw sum, rotated sum, seconds), ...]`` of one fit."""
    import dask.array as da

    from dsgd_dask import KernelCCA
    from dsgd_dask.datasets import load_mnist
    from dsgd_dask.metrics import paired_correlations
    from dsgd_dask.rules.solutions import ridge_cca

    if store is not None:
        X, T = store_rows(store)
        XL, XR = X[:, LEFT], X[:, RIGHT]
        first = np.asarray(X[rotation_rows(X.shape[0])])
        every = chunk_steps
    else:
        X, _ = load_mnist("train", data_home=data_home)
        X = X.reshape(len(X), -1).astype(np.float32) / np.float32(255)
        X = X[np.random.default_rng(0).permutation(len(X))]
        if validation:
            X, T = X[:50_000], X[50_000:]
        else:
            T, _ = load_mnist("test", data_home=data_home)
            T = T.reshape(len(T), -1).astype(np.float32) / np.float32(255)
        XL, XR = da.from_array(X[:, LEFT], chunks=(batch_size * chunk_steps, -1)), \
            da.from_array(X[:, RIGHT], chunks=(batch_size * chunk_steps, -1))
        first, every = X[:10_000], 1
    TL, TR = T[:, LEFT], T[:, RIGHT]
    curve, t0, scoring, last = [], time.perf_counter(), [0.0], [0]

    def score(step, models):
        if step - last[0] < every and step < steps:
            return
        last[0] = step
        start = time.perf_counter()
        fx, fy = models
        u_t, v_t = fx.evaluate(TL), fy.evaluate(TR)
        raw = float(paired_correlations(u_t, v_t)[:k].sum())
        u, v = fx.evaluate(first[:, LEFT]), fy.evaluate(first[:, RIGHT])
        mu, mv = u.mean(axis=0), v.mean(axis=0)
        u, v = u - mu, v - mv
        n = len(u)
        cxx = u.T @ u / n
        _, A, B = ridge_cca(cxx, v.T @ v / n, u.T @ v / n, 1e-10 * np.trace(cxx), k)
        rotated = float(paired_correlations((u_t - mu) @ A, (v_t - mv) @ B).sum())
        scoring[0] += time.perf_counter() - start
        curve.append((step, round(raw, 2), round(rotated, 2), round(time.perf_counter() - t0 - scoring[0], 1)))
        print(curve[-1], flush=True)

    est = KernelCCA(k, solver="dsgd", features=features, n_features=n_features, block_size=block_size,
                    batch_size=batch_size, max_iter=steps, reg=reg, preconditioner=preconditioner,
                    preconditioner_jitter=jitter, eta0=eta0, eta_decay=eta_decay, random_state=0,
                    average=(average_from - 1) * batch_size + 1 if average_from > 0 else False,
                    **scaled_bandwidths(XL, XR, bandwidth_scale))
    est.fit(XL, XR, callback=score)
    fx, fy = est.models_
    print("fitted model:", round(float(paired_correlations(fx.evaluate(TL), fy.evaluate(TR))[:k].sum()), 2), flush=True)
    return curve


def scaled_bandwidths(XL, XR, scale: float) -> dict:
    """``bandwidth_x``, ``bandwidth_y``: ``scale`` times each view's median distance on 2000 seeded rows ({} at 1)."""
    if scale == 1.0:
        return {}
    from dsgd_dask import median_bandwidth

    rows = seeded_rows(XL.shape[0], 2000, 4)
    return {f"bandwidth_{v}": scale * median_bandwidth(np.asarray(A[rows], dtype=np.float64))
            for v, A in (("x", XL), ("y", XR))}


def rca_validation(store, features: str, n_features: int, bandwidth_scale: float = 1.0, rows: int = 60_000,
                   reg: float = 1e-7, k: int = 50) -> float:
    """Top-``k`` sum on the store's validation rows of ``KernelCCA(solver="rca")`` on ``rows`` seeded training rows."""
    from dsgd_dask import KernelCCA

    X, V = store_rows(store)
    S = np.asarray(X[seeded_rows(X.shape[0], rows, 7)])
    SL, SR = S[:, LEFT], S[:, RIGHT]
    est = KernelCCA(k, solver="rca", features=features, n_features=n_features, reg=reg, random_state=0,
                    **scaled_bandwidths(SL, SR, bandwidth_scale))
    est.fit(SL, SR)
    return est.score(V[:, LEFT], V[:, RIGHT])


def seeded_rows(n_rows: int, n: int, seed: int) -> np.ndarray:
    """Sorted indices of ``n`` distinct rows of ``n_rows``, drawn with ``seed``."""
    return np.sort(np.random.default_rng(seed).choice(n_rows, n, replace=False))


def heldout_rows(n_rows: int, n: int) -> np.ndarray:
    """The ``n`` rows (sorted) of an ``n_rows``-row store that ``kcca-mnist8m`` scores on and never trains on."""
    return seeded_rows(n_rows, n, HELDOUT_SEED)


def store_rows(path, n: int = 10_000):
    """An MNIST8M-like store's rows as float32 in [0, 1]: training rows (lazy) and ``n`` validation rows.

    Neither holds the ``n`` rows the ``kcca-mnist8m`` comparison holds out
    (:func:`heldout_rows`); the validation rows are drawn with ``VALIDATION_SEED`` from the others.
    """
    import dask.array as da
    import zarr

    X = da.from_zarr(zarr.open_group(str(path), mode="r")["X"])
    held = heldout_rows(X.shape[0], n)
    drawn = np.random.default_rng(VALIDATION_SEED).choice(X.shape[0], n + n // 5, replace=False)
    val = np.sort(np.setdiff1d(drawn, held)[:n])
    keep = np.ones(X.shape[0], dtype=bool)
    keep[np.union1d(held, val)] = False
    X = X.astype(np.float32) / np.float32(255)
    return X[keep], np.asarray(X[val])


def rotation_rows(n: int, size: int = 10_000) -> np.ndarray:
    """Sorted indices of ``size`` training rows drawn at random (seeded) for the rotated sum's linear CCA.

    Drawn from all of a store's training rows: its first rows are the undeformed digits,
    and a rotation fitted on them leaves variates correlated with each other on the
    deformed validation rows (up to 0.32 after 520 steps, against 0.04 for rows drawn from
    all), so that their paired correlations overstate the sum.
    """
    return seeded_rows(n, min(size, n), ROTATION_SEED)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preconditioner", choices=("none", "block", "sample"), default="sample")
    parser.add_argument("--eta0", type=float, default=0.1)
    parser.add_argument("--eta-decay", type=float, default=0.01)
    parser.add_argument("--features", choices=("fourier", "fourier_pairs"), default="fourier")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--n-features", type=int, default=20480, help="features per view")
    parser.add_argument("--block-size", type=int, default=2048, help="features per block")
    parser.add_argument("--jitter", type=float, default=0.1)
    parser.add_argument("--reg", type=float, default=1e-7)
    parser.add_argument("--validation", action="store_true", help="score on 10,000 held-out training digits")
    parser.add_argument("--store", default=None, help="train on this MNIST8M-like store, score on its validation rows")
    parser.add_argument("--data-home", default=None)
    parser.add_argument("--bandwidth-scale", type=float, default=1.0, help="times each view's median distance")
    parser.add_argument("--rca", type=int, default=0, help="with --store: one solver='rca' fit of this many features")
    parser.add_argument("--average-from", type=int, default=0,
                        help="the model is the mean of the iterates of this step and later (0: the last iterate)")
    args = parser.parse_args(argv)
    if args.rca:
        if args.store is None:
            parser.error("--rca needs --store")
        print(round(rca_validation(args.store, args.features, args.rca, args.bandwidth_scale), 2))
        return
    run(None if args.preconditioner == "none" else args.preconditioner, args.eta0, args.steps, args.jitter, args.reg,
        n_features=args.n_features, block_size=args.block_size, validation=args.validation, data_home=args.data_home,
        eta_decay=args.eta_decay, features=args.features, store=args.store, bandwidth_scale=args.bandwidth_scale,
        average_from=args.average_from)


if __name__ == "__main__":
    main()
