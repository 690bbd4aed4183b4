"""Bad input and impossible parameters fail early with a ValueError or TypeError naming the problem."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr

from dsgd_dask import KernelPCA

SMALL = dict(block_size=64, max_iter=10, random_state=0)  # the automatic budget: one block of the 60 rows


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
        ({"n_components": 300, "n_features": 256, "block_size": 256, "features": "fourier"}, ValueError,
         "n_components=300 must be <= n_features"),
        ({"n_features": 61}, ValueError, "n_features=61 exceeds the 60 rows"),
        ({"n_features": 100, "block_size": 64, "features": "fourier"}, ValueError,
         "n_features=100 is not a multiple of block_size=64"),
        ({"n_components": 70, "n_features": 1024, "block_size": 64, "solver": "dsgd", "features": "fourier"},
         ValueError, "block_size"),
        ({"n_components": 70, "block_size": 64}, ValueError,
         r"n_components=70 must be <= n_features=60 \(Nyström features: at most the 60 rows\)"),
        ({"n_components": 0}, ValueError,
         r"'n_components' parameter of KernelPCA must be an int in the range \[1, inf\)\. Got 0"),
        ({"n_components": 2.5}, TypeError, r"'n_components' parameter of KernelPCA must be an int .* Got 2\.5"),
        ({"bandwidth": 0.0}, ValueError, r"'bandwidth' parameter of KernelPCA must be .*a float in the range \(0\.0"),
        ({"bandwidth": -2.0}, ValueError, r"'bandwidth' parameter of KernelPCA must be .*a float in the range \(0\.0"),
        ({"bandwidth": "mean"}, ValueError, r"'bandwidth' parameter of KernelPCA must be a str among \{'median'\}"),
        ({"bandwidth": [1.0]}, TypeError, "'bandwidth' parameter of KernelPCA must be"),
        ({"kernel": "polynomial"}, ValueError,
         r"'kernel' parameter of KernelPCA must be a str among .*Got 'polynomial'"),
        ({"kernel": "matern", "kernel_params": {"nu": 4}}, ValueError, "nu"),
        ({"kernel": "gaussian", "kernel_params": {"gamma": 1}}, ValueError, "unknown kernel_params"),
        ({"batch_size": 0}, ValueError, r"'batch_size' parameter of KernelPCA must be an int in the range \[1, inf\)"),
        ({"max_iter": -1}, ValueError, r"'max_iter' parameter of KernelPCA must be an int in the range \[1, inf\)"),
        ({"max_iter": "forever"}, TypeError, r"'max_iter' parameter of KernelPCA must be an int .* Got 'forever'"),
        ({"eta0": 0.0}, ValueError, r"'eta0' parameter of KernelPCA must be a float in the range \(0\.0, inf\)"),
        ({"eta_decay": -0.1}, ValueError, r"'eta_decay' parameter of KernelPCA must be a float in the range \[0\.0"),
        ({"init": "zeros"}, ValueError, "'init' parameter of KernelPCA must be a str among"),
        ({"compute_dtype": "float16"}, ValueError, "'compute_dtype' parameter of KernelPCA must be a str among"),
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


# -- the kernel machines: impossible solvers and combinations, refused before any work -----------


def _raising_scheduler(*args, **kwargs):
    raise AssertionError("something was computed")


@pytest.mark.parametrize(
    ("cls", "params", "exc", "match"),
    [
        ("KernelRidge", {"solver": "sgd"}, ValueError,
         r"'solver' parameter of KernelRidge must be a str among .*Got 'sgd'"),
        ("KernelRidge", {"solver": "exact", "features": "fourier"}, ValueError,
         r"KernelRidge\(solver='exact'\) takes features in \['nystroem'\], got features='fourier'"),
        ("KernelRidge", {"solver": "cg", "checkpoint": "ckpt.zarr", "random_state": np.random.RandomState(0)},
         ValueError, "checkpointing needs random_state to be None or an int"),
        ("KernelRidge", {"solver": "cg", "features": "fourier", "preconditioner": "landmarks"}, ValueError,
         "preconditioner='landmarks' needs Nyström features"),
        ("KernelRidge", {"solver": "cg", "tol": -1.0}, ValueError,
         r"'tol' parameter of KernelRidge must be a float in the range \[0\.0, inf\)"),
        ("KernelSVC", {"solver": "cg"}, ValueError, r"'solver' parameter of KernelSVC must be a str among .*Got 'cg'"),
        ("KernelLogisticRegression", {"solver": "exact"}, ValueError,
         r"'solver' parameter of KernelLogisticRegression must be a str among .*Got 'exact'"),
        ("KernelRidge", {"features": "fourier", "n_features": 100, "block_size": 64}, ValueError,
         "n_features=100 is not a multiple of block_size=64"),
        ("KernelRidge", {"alpha": -1.0}, ValueError,
         r"'alpha' parameter of KernelRidge must be a float in the range \[0\.0, inf\)"),
    ],
)
def test_impossible_machine_parameters(X, tmp_path, monkeypatch, cls, params, exc, match):
    import dask

    import dsgd_dask

    monkeypatch.chdir(tmp_path)
    y = np.where(X[:, 0] > 0, 1, -1)
    Xd, yd = da.from_array(X, chunks=(30, -1)), da.from_array(y, chunks=30)
    with dask.config.set(scheduler=_raising_scheduler), pytest.raises(exc, match=match):
        getattr(dsgd_dask, cls)(**params).fit(Xd, yd)
    assert not (tmp_path / "ckpt.zarr").exists()
