"""The deformed-digit stores of the MNIST8M comparisons, their test digits, and a wall-time budget for fits."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

#: The MNIST8M setting: rows of the full store.
MNIST8M_ROWS = 8_100_000
SEED = 0
#: Rows of the store made from the packaged MNIST subset for ``--quick`` (two chunks of 8192).
QUICK_ROWS = 16_384


def digit_store(ctx) -> Path:
    """The Zarr group (``X`` uint8 rows of 784 pixels, ``y`` labels) of deformed training digits.

    Full runs: the 8.1M-row MNIST8M store, written once by ``pipelines/mnist8m_store.py``
    (about half an hour; reused afterwards). ``--quick``: 16,384 rows deformed from the
    packaged subset of 5,000 training digits.
    """
    from dsgd_dask.datasets import load_mnist
    from pipelines.mnist8m_store import reuse_or_write

    rows = QUICK_ROWS if ctx.quick else MNIST8M_ROWS
    path = ctx.store_dir / (f"digits_quick_{rows}_{SEED}.zarr" if ctx.quick else f"mnist8m_{rows}_{SEED}.zarr")

    def digits():
        ctx.log(f"writing {rows:,} deformed digits to {path} (once)")
        return load_mnist("train", sample=True) if ctx.quick else load_mnist("train", data_home=ctx.data_home)

    return reuse_or_write(path, rows, SEED, digits)


def store_arrays(path: Path, rows: int | None = None):
    """Lazy ``(X, y)`` of a digit store: float32 pixels in [0, 1] per chunk, and the labels; the first ``rows``."""
    import dask.array as da
    import zarr

    group = zarr.open_group(str(path), mode="r")
    X = da.from_zarr(group["X"])
    y = da.from_zarr(group["y"])
    if rows is not None:
        X, y = X[:rows], y[:rows]
    return X.astype(np.float32) / np.float32(255.0), y


def test_digits(ctx) -> tuple[np.ndarray, np.ndarray]:
    """The MNIST test digits (the packaged 2,000 for ``--quick``) as float32 in [0, 1], and their labels."""
    from benchmarks.comparisons._data import load

    X, y = load("mnist", "test", ctx)
    return X.reshape(len(X), -1).astype(np.float32) / np.float32(255.0), np.asarray(y)


def check_parts(run, parts: tuple) -> None:
    """Refuse a ``run`` option naming a part that the comparison does not have."""
    unknown = sorted(set(run) - set(parts))
    if unknown:
        raise ValueError(f"run: unknown part(s) {unknown}; the parts are {parts}")


def subsample(X, y, n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of a lazy store, drawn uniformly without replacement (seeded), in memory."""
    idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], n, replace=False))
    return np.asarray(X[idx]), np.asarray(y[idx])


class OutOfBudget(Exception):
    """Raised by :class:`Budget` in a fit's callback once its wall time is spent."""


class Budget:
    """A fit's wall-time budget, checked in its ``callback``: records a curve, stops the fit when spent.

    ``evaluate(model) -> dict`` is called at every ``every``-th callback and at the one that
    ends the budget (its time is not counted); the last model and the curve survive the stop::

        budget = Budget(600, evaluate)
        try:
            est.fit(X, y, callback=budget)
        except OutOfBudget:
            pass
        budget.curve, budget.model, budget.seconds
    """

    def __init__(self, seconds: float, evaluate, every: int = 1):
        self.limit = seconds
        self.evaluate = evaluate
        self.every = every
        self.curve: list[dict] = []
        self.model = None
        self.stopped = False
        self._calls = 0
        self._paused = 0.0
        self._t0 = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._t0 - self._paused

    def __call__(self, n, model) -> None:
        spent = self.seconds
        self._calls += 1
        self.model = model
        if spent > self.limit or self._calls % self.every == 0:
            t = time.perf_counter()
            self.curve.append({"n": int(n), "seconds": spent, **self.evaluate(model)})
            self._paused += time.perf_counter() - t
        if spent > self.limit:
            self.stopped = True
            raise OutOfBudget
