"""Shared fixtures: the real datasets, small synthetic data, schedulers."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """``$DSGD_DATA_DIR``, else ``../shared/datasets`` beside the checkout."""
    path = Path(os.environ.get("DSGD_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    if not (path / "load.py").exists():
        raise FileNotFoundError(f"real datasets not found at {path}; set DSGD_DATA_DIR")
    return path


def load_dataset(name: str) -> dict:
    path = data_dir()
    spec = importlib.util.spec_from_file_location("dsgd_datasets_load", path / "load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load(name, str(path))


@pytest.fixture(scope="session")
def mnist_small():
    """3000 training and 1000 held-out MNIST digits, pixels scaled to [0, 1]."""
    d = load_dataset("mnist")
    X = d["X_train"][:3000].reshape(3000, -1) / 255.0
    Xt = d["X_test"][:1000].reshape(1000, -1) / 255.0
    return X, Xt


@pytest.fixture
def blobs():
    rng = np.random.default_rng(42)
    centers = rng.normal(scale=3.0, size=(4, 5))
    X = np.concatenate([c + rng.normal(size=(150, 5)) for c in centers])
    return X[rng.permutation(len(X))]
