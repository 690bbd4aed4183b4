"""The .dsgd accessor: Zarr -> fit -> lazy transform -> Zarr, labels kept, dimensions chosen explicitly."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dsgd_dask
from dsgd_dask import KernelCCA, KernelLogisticRegression, KernelPCA, KernelSVC
from dsgd_dask.datasets import load_usps

N = 1200
PCA = dict(n_components=3, n_features=256, random_state=0)
MACHINE = dict(n_features=256, block_size=128, batch_size=64, max_iter=80, random_state=0)


def _refuse(*args, **kwargs):
    raise AssertionError("something was computed")


@pytest.fixture(scope="module")
def usps():
    """USPS digits (shipped subset) as a Dataset: a time coordinate on the samples, attributes."""
    ds = load_usps("train", sample=True, as_dataset=True).isel(sample=slice(0, N))
    ds = ds.rename(sample="time", feature="pixel")
    ds = ds.assign_coords(time=pd.date_range("2020-01-01", periods=N, freq="h"),
                          station=("time", np.arange(N) % 7))
    ds["X"].attrs = {"units": "grey level", "long_name": "pixel intensity"}
    return ds


@pytest.fixture(scope="module")
def store(usps, tmp_path_factory):
    path = tmp_path_factory.mktemp("zarr") / "usps.zarr"
    usps.drop_vars("y").chunk({"time": 300}).to_zarr(str(path), consolidated=False)
    return path


@pytest.fixture(scope="module")
def pca(store):
    ds = xr.open_zarr(str(store), consolidated=False).chunk({"time": 600})
    return ds.dsgd.fit(KernelPCA(**PCA), "X")


def test_zarr_to_zarr_lazily(store, usps, pca, tmp_path):
    ds = xr.open_zarr(str(store), consolidated=False).chunk({"time": 600})
    assert isinstance(ds["X"].data, da.Array)
    assert pca.feature_dim_ == "pixel"
    with dask.config.set(scheduler=_refuse):
        out = ds.dsgd.transform(pca, "X", name="components")
    comp = out["components"]
    assert isinstance(comp.data, da.Array)
    assert comp.dims == ("time", "component")
    assert comp.data.chunks[0] == ds["X"].data.chunks[0]  # one task per row chunk
    assert comp.attrs == {}
    assert out.attrs == {}
    out.to_zarr(str(tmp_path / "components.zarr"), consolidated=False)  # computed now, chunk by chunk

    back = xr.open_zarr(str(tmp_path / "components.zarr"), consolidated=False)
    np.testing.assert_array_equal(back["time"].values, usps["time"].values)
    np.testing.assert_array_equal(back["station"].values, usps["station"].values)
    np.testing.assert_array_equal(back["component"].values, np.arange(3))
    assert back["components"].dims == ("time", "component")
    assert back["components"].attrs == {}
    assert back.attrs == {}
    assert ds["X"].attrs == {"units": "grey level", "long_name": "pixel intensity"}  # the input is untouched
    np.testing.assert_allclose(back["components"].values, pca.transform(usps["X"].values), rtol=1e-6, atol=1e-7)
    # the accessor is the estimator's own DataArray path
    xr.testing.assert_identical(ds["X"].dsgd.transform(pca).compute(),
                                pca.transform(ds["X"]).rename("components").compute().drop_attrs())


def test_fit_through_the_accessor_equals_fit_on_the_dask_array(usps, pca):
    ref = KernelPCA(**PCA).fit(da.from_array(usps["X"].values, chunks=(600, -1)))
    np.testing.assert_array_equal(pca.model_.coef, ref.model_.coef)
    np.testing.assert_array_equal(pca.eigenvalues_, ref.eigenvalues_)


def test_classifier_predict(usps):
    ds = usps.chunk({"time": 300})
    clf = ds.dsgd.fit(KernelLogisticRegression(1e-4, **MACHINE), "X", y="y")
    X = usps["X"].values
    with dask.config.set(scheduler=_refuse):
        pred = ds.dsgd.predict(clf, "X")
        proba = ds.dsgd.predict_proba(clf, "X")
        single = ds["X"].dsgd.predict(clf, name="digit")
    assert pred["prediction"].dims == ("time",)
    assert proba["probability"].dims == ("time", "class")
    assert single.name == "digit"
    assert single.attrs == {}
    assert isinstance(pred["prediction"].data, da.Array)
    np.testing.assert_array_equal(pred["prediction"].values, clf.predict(X))
    np.testing.assert_array_equal(single.values, clf.predict(X))
    np.testing.assert_allclose(proba["probability"].values, clf.predict_proba(X), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(pred["time"].values, usps["time"].values)
    assert (pred["prediction"].values == usps["y"].values).mean() > 0.5  # it learnt the digits (chance: 0.1)
    # string labels, a target given as a DataArray
    labels = xr.DataArray(np.array(list("abcdefghij"))[usps["y"].values], dims="time", coords={"time": usps["time"]})
    svc = usps["X"].dsgd.fit(KernelSVC(1e-4, **MACHINE), labels)
    np.testing.assert_array_equal(usps["X"].dsgd.predict(svc).values, svc.predict(X))
    assert set(svc.classes_) == set("abcdefghij")


def test_two_view_cca(usps):
    X = usps["X"].values.reshape(N, 16, 16)
    ds = xr.Dataset({"top": (("time", "a"), X[:, :8].reshape(N, -1)),
                     "bottom": (("time", "b"), X[:, 8:].reshape(N, -1))},
                    coords={"time": usps["time"]}).chunk({"time": 600})
    cca = ds.dsgd.fit(KernelCCA(2, reg=1e-3, **MACHINE), "top", Y="bottom")
    with dask.config.set(scheduler=_refuse):
        out = ds.dsgd.transform(cca, "top", Y="bottom")
        U, V = ds["top"].dsgd.transform(cca, other=ds["bottom"], name=("u", "v"))
    assert sorted(out.data_vars) == ["components_x", "components_y"]
    assert out["components_x"].dims == out["components_y"].dims == ("time", "component")
    assert (U.name, V.name) == ("u", "v")
    Uref, Vref = cca.transform(ds["top"].values, ds["bottom"].values)
    # every row is evaluated at its own place of a fixed-size slice, whatever the chunks: the
    # same bits on numpy and dask input with any BLAS kernel (apply_rows)
    np.testing.assert_array_equal(out["components_x"].values, Uref)
    np.testing.assert_array_equal(out["components_y"].values, Vref)
    np.testing.assert_array_equal(U.values, Uref)
    np.testing.assert_array_equal(V.values, Vref)
    # the two halves of a digit are correlated
    assert np.corrcoef(out["components_x"][:, 0], out["components_y"][:, 0])[0, 1] > 0.5


@pytest.fixture
def small():
    rng = np.random.default_rng(0)
    return xr.DataArray(rng.normal(size=(4, 300)), dims=("band", "pixel"),
                        coords={"band": [450, 550, 650, 750], "pixel": np.arange(300) * 2}, attrs={"units": "W"})


def test_feature_sample_order_and_extra_dims(small):
    model = small.dsgd.fit(KernelPCA(2, n_features=128, random_state=0), sample_dim="pixel")
    ref = KernelPCA(2, n_features=128, random_state=0).fit(small.values.T)
    assert model.feature_dim_ == "band"
    Z = small.dsgd.transform(model)  # (band, pixel): the fitted feature dimension orients it
    assert Z.dims == ("pixel", "component")
    assert Z.attrs == {}
    np.testing.assert_array_equal(Z["pixel"].values, small["pixel"].values)
    np.testing.assert_array_equal(Z.values, ref.transform(small.values.T))
    np.testing.assert_array_equal(small.T.dsgd.transform(model).values, Z.values)
    # more dimensions: both named, the others of length 1 dropped
    cube = small.expand_dims(scene=["a"]).transpose("band", "scene", "pixel")
    Z3 = cube.dsgd.transform(model, sample_dim="pixel", feature_dim="band")
    assert Z3.dims == ("pixel", "component")
    np.testing.assert_array_equal(Z3.values, Z.values)
    lazy = cube.chunk({"pixel": 100})
    with dask.config.set(scheduler=_refuse):
        Zl = lazy.dsgd.transform(model, sample_dim="pixel", feature_dim="band")
    np.testing.assert_allclose(Zl.values, Z.values, rtol=1e-6, atol=1e-9)


def test_dimension_errors(small):
    model = small.dsgd.fit(KernelPCA(2, n_features=128, random_state=0), sample_dim="pixel")
    with pytest.raises(ValueError, match=r"sample_dim='time' is not a dimension.*\('band', 'pixel'\)"):
        small.dsgd.transform(model, sample_dim="time")
    with pytest.raises(ValueError, match="feature_dim='wavelength' is not a dimension"):
        small.dsgd.fit(KernelPCA(2), feature_dim="wavelength")
    with pytest.raises(ValueError, match="both 'band'"):
        small.dsgd.fit(KernelPCA(2), sample_dim="band", feature_dim="band")
    cube = small.expand_dims(scene=3)
    with pytest.raises(ValueError, match=r"3 dimensions \('scene', 'band', 'pixel'\): pass sample_dim and feature_dim"):
        cube.dsgd.fit(KernelPCA(2))
    with pytest.raises(ValueError, match=r"pass sample_dim to say"):
        cube.dsgd.transform(model)  # the model gives the feature dimension, not the samples
    with pytest.raises(ValueError, match=r"\{'scene': 3\}.*select one position"):
        cube.dsgd.transform(model, sample_dim="pixel")
    with pytest.raises(ValueError, match=r"dimensions \('pixel',\): \(samples, features\) are needed"):
        small.isel(band=0).dsgd.fit(KernelPCA(2))
    # a target or second view must share the sample dimension and its coordinates
    y = xr.DataArray(np.arange(300.0), dims="t")
    with pytest.raises(ValueError, match=r"y has dimensions \('t',\), without the sample dimension 'pixel'"):
        small.dsgd.fit(dsgd_dask.KernelRidge(), y, sample_dim="pixel")
    shifted = xr.DataArray(np.arange(300.0), dims="pixel", coords={"pixel": np.arange(300) * 2 + 1})
    with pytest.raises(ValueError, match="different coordinates along 'pixel'"):
        small.dsgd.fit(dsgd_dask.KernelRidge(), shifted, sample_dim="pixel")
    ds = small.to_dataset(name="X")
    with pytest.raises(ValueError, match=r"X='Z' is not a variable of the Dataset; its variables are \['X'\]"):
        ds.dsgd.fit(KernelPCA(2), "Z")
    with pytest.raises(ValueError, match="not both"):
        ds.dsgd.fit(KernelCCA(2), "X", y="X", Y="X")
    with pytest.raises(TypeError, match="KernelPCA has no predict"):
        ds.dsgd.predict(model, "X")


def test_dataset_transform_of_a_feature_first_variable(small):
    ds = small.to_dataset(name="X")
    model = ds.dsgd.fit(KernelPCA(2, n_features=128, random_state=0), "X", sample_dim="pixel")
    out = ds.dsgd.transform(model, "X")
    assert list(out.data_vars) == ["components"]
    assert out["components"].dims == ("pixel", "component")
    np.testing.assert_array_equal(out["components"].values, model.transform(small.values.T))
