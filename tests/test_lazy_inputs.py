"""Dask, Zarr and xarray inputs: lazy transforms, labelled outputs, same model on any local scheduler."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from dsgd_dask import KernelPCA


def _refuse(*args, **kwargs):
    raise AssertionError("something was computed")


@pytest.fixture
def fitted(blobs):
    return KernelPCA(n_components=3, n_features=512, block_size=64, max_iter=40, random_state=0).fit(blobs)


@pytest.fixture
def zarr_store(tmp_path, blobs):
    path = tmp_path / "blobs.zarr"
    arr = zarr.create_array(store=str(path), shape=blobs.shape, chunks=(128, blobs.shape[1]), dtype="float32")
    arr[:] = blobs.astype("float32")
    return path


def test_dask_transform_is_lazy_and_equals_numpy(fitted, blobs):
    X = da.from_array(blobs, chunks=(100, 5))
    with dask.config.set(scheduler=_refuse):
        Z = fitted.transform(X)  # building the graph must not compute anything
    assert isinstance(Z, da.Array)
    assert Z.shape == (blobs.shape[0], 3)
    assert Z.chunks[0] == X.chunks[0]
    assert Z.dtype == np.float64
    # one task per row chunk on top of the input's own tasks
    assert len(Z.dask.layers[Z.name]) == X.numblocks[0]
    np.testing.assert_allclose(Z.compute(scheduler="sync"), fitted.transform(blobs), rtol=1e-6, atol=1e-9)


def test_dask_input_split_along_features_is_rechunked(fitted, blobs):
    X = da.from_array(blobs, chunks=(200, 2))
    np.testing.assert_allclose(fitted.transform(X).compute(), fitted.transform(blobs), rtol=1e-6, atol=1e-9)


def test_zarr_array_input(fitted, zarr_store, blobs):
    arr = zarr.open_array(str(zarr_store), mode="r")
    Z = fitted.transform(arr)
    assert isinstance(Z, da.Array)
    expected = fitted.transform(blobs.astype("float32"))
    np.testing.assert_allclose(Z.compute(), expected, rtol=1e-6, atol=1e-9)


def test_transform_written_to_zarr_chunk_by_chunk(fitted, zarr_store, tmp_path, blobs):
    X = da.from_zarr(str(zarr_store))
    out = tmp_path / "components.zarr"
    fitted.transform(X).to_zarr(str(out))
    stored = zarr.open_array(str(out), mode="r")
    assert stored.chunks == (128, 3)
    np.testing.assert_allclose(stored[:], fitted.transform(blobs.astype("float32")), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("backend", ["numpy", "dask"])
def test_xarray_keeps_dims_and_coords(blobs, backend):
    data = blobs if backend == "numpy" else da.from_array(blobs, chunks=(150, 5))
    time = np.arange(blobs.shape[0]) * 10
    arr = xr.DataArray(data, dims=("time", "channel"),
                       coords={"time": time, "station": ("time", np.arange(blobs.shape[0]) % 3),
                               "channel": list("abcde")},
                       attrs={"units": "m"})
    model = KernelPCA(n_components=3, n_features=512, block_size=64, max_iter=40, random_state=0).fit(arr)
    assert model.feature_dim_ == "channel"
    with dask.config.set(scheduler=_refuse):
        Z = model.transform(arr)
    assert isinstance(Z, xr.DataArray)
    assert Z.dims == ("time", "component")
    assert Z.attrs == {}  # the input's units do not describe its components
    np.testing.assert_array_equal(Z["time"].values, time)
    np.testing.assert_array_equal(Z["station"].values, arr["station"].values)
    np.testing.assert_array_equal(Z["component"].values, np.arange(3))
    assert isinstance(Z.data, da.Array) == (backend == "dask")
    np.testing.assert_allclose(np.asarray(Z.values), model.transform(blobs), rtol=1e-6, atol=1e-9)


def test_xarray_result_written_to_zarr(fitted, blobs, tmp_path):
    arr = xr.DataArray(da.from_array(blobs, chunks=(150, 5)), dims=("sample", "feature"))
    Z = fitted.transform(arr)
    Z.to_dataset(name="components").to_zarr(str(tmp_path / "out.zarr"), consolidated=False)
    back = xr.open_zarr(str(tmp_path / "out.zarr"), consolidated=False)["components"]
    np.testing.assert_allclose(back.values, fitted.transform(blobs), rtol=1e-6, atol=1e-9)


def test_xarray_feature_dim_and_coords_checked(blobs):
    arr = xr.DataArray(blobs, dims=("sample", "feature"), coords={"feature": list("abcde")})
    model = KernelPCA(n_components=2, n_features=256, block_size=64, max_iter=10, random_state=0).fit(arr)
    with pytest.raises(ValueError, match="feature dimension 'sample'"):
        model.transform(arr.T.rename({"sample": "feature", "feature": "sample"}).T)
    with pytest.raises(ValueError, match="coordinates of dimension 'feature'"):
        model.transform(arr.assign_coords(feature=list("edcba")))


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_same_model_on_local_schedulers(zarr_store, scheduler):
    X = da.from_zarr(str(zarr_store))
    params = dict(n_components=3, n_features=512, block_size=64, max_iter=30, batch_size=64, random_state=5)
    with dask.config.set(scheduler="sync"):
        ref = KernelPCA(**params).fit(X)
    with dask.config.set(scheduler=scheduler):
        other = KernelPCA(**params).fit(X)
    np.testing.assert_allclose(other.model_.coef, ref.model_.coef, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(other.eigenvalues_, ref.eigenvalues_, rtol=1e-12)


def test_fit_on_dask_is_close_to_fit_on_numpy(blobs):
    """Different mini-batch orders, same problem: the subspaces agree."""
    from dsgd_dask.metrics import principal_angle_sin2

    params = dict(n_components=2, n_features=512, block_size=128, max_iter=200, random_state=0)
    a = KernelPCA(**params).fit(blobs)
    b = KernelPCA(**params).fit(da.from_array(blobs, chunks=(128, 5)))
    assert principal_angle_sin2(a.transform(blobs), b.transform(blobs)) < 0.05


def test_dask_nan_chunk_named_at_compute(fitted, blobs):
    bad = blobs.copy()
    bad[310, 2] = np.nan
    Z = fitted.transform(da.from_array(bad, chunks=(100, 5)))  # lazy: no error yet
    with pytest.raises(ValueError, match="row chunk 3"):
        Z.compute()
    with pytest.raises(ValueError, match="chunk 3"):
        KernelPCA(n_components=2, n_features=256, block_size=64, max_iter=50, random_state=0).fit(
            da.from_array(bad, chunks=(100, 5))
        )


def test_lazy_graph_of_a_large_model_carries_it_once():
    """500 row chunks and a 50 MB model: the graph pickles to about the model's size, not 500 times it."""
    import pickle

    from dsgd_dask.features import KernelSpec, RandomFeatures
    from dsgd_dask.model import KernelExpansion
    from dsgd_dask.streams.inputs import as_view
    from dsgd_dask.transform.lazy import apply_rows

    features = RandomFeatures(KernelSpec("gaussian", 1.0), 3, 1024, seed=0)
    coef = np.random.default_rng(0).normal(size=(128 * 1024, 48))  # 50 MB of coefficients
    model = KernelExpansion(features, coef)
    X = da.from_array(np.random.default_rng(1).normal(size=(1000, 3)), chunks=(2, 3))
    out = apply_rows(as_view(X), model.evaluate, model.n_outputs, "big", "big")
    assert out.numblocks[0] == 500
    model_bytes = len(pickle.dumps(model.evaluate))
    assert model_bytes > 50e6
    graph_bytes = len(pickle.dumps(dict(out.__dask_graph__())))
    assert graph_bytes < 1.1 * model_bytes  # one copy and 500 small tasks (25 GB if embedded in every task)
