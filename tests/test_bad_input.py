"""Bad input and impossible parameters fail early with a ValueError or TypeError naming the problem."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr

from dsgd_dask import KernelPCA

SMALL = dict(n_features=256, block_size=64, max_iter=10, random_state=0)


def _kinds(X):
    """The same array as numpy, dask and an xarray DataArray."""
    yield "numpy", X
    yield "dask", da.from_array(X, chunks=(max(1, X.shape[0] // 2), *X.shape[1:]))
    if X.ndim == 2:
        yield "xarray", xr.DataArray(X, dims=("sample", "feature"))


@pytest.fixture
def X():
    return np.random.default_rng(0).normal(size=(60, 4))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_values(X, value):
    X = X.copy()
    X[7, 1] = value
    for kind, data in _kinds(X):
        with pytest.raises(ValueError, match="NaN|infinity"):
            KernelPCA(2, **SMALL).fit(data)
        if kind == "numpy":
            fitted = KernelPCA(2, **SMALL).fit(np.nan_to_num(X, posinf=0, neginf=0))
            with pytest.raises(ValueError, match="NaN|infinity"):
                fitted.transform(data)


@pytest.mark.parametrize("shape", [(60,), (10, 3, 2)])
def test_wrong_dimensionality(shape):
    data = np.random.default_rng(0).normal(size=shape)
    for _, Xk in _kinds(data):
        with pytest.raises(ValueError, match="2D|2-D"):
            KernelPCA(2, **SMALL).fit(Xk)


def test_wrong_number_of_features_at_transform(X):
    fitted = KernelPCA(2, **SMALL).fit(X)
    for _, data in _kinds(X[:, :3]):
        with pytest.raises(ValueError, match="X has 3 features, but KernelPCA is expecting 4 features"):
            fitted.transform(data)


def test_non_numeric_dtype(X):
    text = np.full(X.shape, "abc")
    with pytest.raises(ValueError, match="could not convert string to float"):
        KernelPCA(2, **SMALL).fit(text.astype(object))
    for _, data in _kinds(text):
        with pytest.raises(TypeError, match="X has dtype <U3; a real numeric dtype"):
            KernelPCA(2, **SMALL).fit(data)
    for _, data in _kinds(X.astype(complex)):
        with pytest.raises(ValueError, match="Complex data not supported"):
            KernelPCA(2, **SMALL).fit(data)


def test_empty_input():
    for _, data in _kinds(np.empty((0, 4))):
        with pytest.raises(ValueError, match="0 sample"):
            KernelPCA(2, **SMALL).fit(data)


@pytest.mark.parametrize(
    ("params", "exc", "match"),
    [
        ({"n_components": 300, "n_features": 256, "block_size": 256}, ValueError,
         "n_components=300 must be <= n_features"),
        ({"n_components": 70, "n_features": 1024, "block_size": 64, "solver": "oja", "features": "fourier"},
         ValueError, "block_size"),
        ({"n_components": 70, "n_features": 1024, "block_size": 64}, ValueError,
         r"n_components=70 must be <= n_features=60 \(Nyström features: at most the 60 rows\)"),
        ({"n_components": 0}, ValueError, "n_components must be >= 1"),
        ({"n_components": 2.5}, TypeError, "n_components must be an integer"),
        ({"bandwidth": 0.0}, ValueError, "bandwidth must be a positive"),
        ({"bandwidth": -2.0}, ValueError, "bandwidth must be a positive"),
        ({"bandwidth": "mean"}, ValueError, "bandwidth must be one of"),
        ({"bandwidth": [1.0]}, TypeError, "bandwidth must be"),
        ({"kernel": "polynomial"}, ValueError, "unknown kernel 'polynomial'"),
        ({"kernel": "matern", "kernel_params": {"nu": 4}}, ValueError, "nu"),
        ({"kernel": "gaussian", "kernel_params": {"gamma": 1}}, ValueError, "unknown kernel_params"),
        ({"batch_size": 0}, ValueError, "batch_size must be >= 1"),
        ({"max_iter": -1}, ValueError, "max_iter must be >= 1"),
        ({"max_iter": "forever"}, TypeError, "max_iter must be an integer"),
        ({"eta0": 0.0}, ValueError, "eta0 must be a finite number > 0"),
        ({"eta_decay": -0.1}, ValueError, "eta_decay must be a finite number >= 0"),
        ({"init": "zeros"}, ValueError, "init must be one of"),
        ({"compute_dtype": "float16"}, ValueError, "compute_dtype must be one of"),
        ({"random_state": "seed"}, TypeError, "random_state"),
    ],
)
def test_impossible_parameters(X, params, exc, match):
    full = {**SMALL, "n_components": 2, **params}
    with pytest.raises(exc, match=match):
        KernelPCA(**full).fit(X)


def test_transform_before_fit(X):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        KernelPCA(2).transform(X)


def test_constant_data_needs_a_bandwidth():
    X = np.ones((30, 3))
    with pytest.raises(ValueError, match="pass a numeric bandwidth"):
        KernelPCA(2, **SMALL).fit(X)


def test_unknown_dask_chunk_sizes(X):
    data = da.from_array(X, chunks=20)
    data = data[data[:, 0] > -10]  # unknown row counts
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        KernelPCA(2, **SMALL).fit(data)
