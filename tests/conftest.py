"""Shared fixtures: real data (the subsets shipped with dsgd_dask), small synthetic data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dsgd_dask.datasets import load_mnist
from dsgd_dask.features import KernelSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def mnist_small():
    """The first 3000 training and 1000 test MNIST digits, pixels scaled to [0, 1].

    Read from the MNIST subset shipped with the package (no data home needed).
    """
    X, _ = load_mnist("train", sample=True)
    Xt, _ = load_mnist("test", sample=True)
    return X[:3000] / 255.0, Xt[:1000] / 255.0


@pytest.fixture
def blobs():
    rng = np.random.default_rng(42)
    centers = rng.normal(scale=3.0, size=(4, 5))
    X = np.concatenate([c + rng.normal(size=(150, 5)) for c in centers])
    return X[rng.permutation(len(X))]


#: Every kernel family with each shape parameter, for tests that run over all of them.
KERNEL_CASES = [
    KernelSpec("gaussian", 1.3),
    KernelSpec("laplacian", 2.0),
    KernelSpec("cauchy", 1.5),
    KernelSpec("matern", 1.7, nu=0.5),
    KernelSpec("matern", 1.7, nu=1.5),
    KernelSpec("matern", 1.7, nu=2.5),
    KernelSpec("arccos", 1.0, order=0),
    KernelSpec("arccos", 1.0, order=1),
    KernelSpec("arccos", 1.0, order=2),
]


def kernel_id(spec: KernelSpec) -> str:
    extra = f"nu{spec.nu}" if spec.nu is not None else f"order{spec.order}" if spec.order is not None else ""
    return f"{spec.name}{extra}"
