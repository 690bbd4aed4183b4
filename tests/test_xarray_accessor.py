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


# -- fields: dim= (samples along time, features on a lat-lon grid with a land mask) --------

NT, NLAT, NLON = 240, 6, 8
FIELD_PCA = dict(n_components=2, n_features=128, random_state=0)


def _grid(rng, land, signal):
    lat, lon = np.linspace(-50, 50, NLAT), np.arange(NLON) * 30.0
    p1 = np.cos(np.deg2rad(lat))[:, None] * np.sin(np.deg2rad(lon))[None, :]
    p2 = np.sin(np.deg2rad(lat))[:, None] * np.ones(NLON)
    F = signal[:, None, None] * p1 + (signal ** 2 - 1 / 3)[:, None, None] * p2
    F = F + 0.05 * rng.normal(size=F.shape)
    F[:, land] = np.nan
    return xr.DataArray(F, dims=("time", "lat", "lon"), name="sst", attrs={"units": "K"},
                        coords={"time": pd.date_range("2000-01-01", periods=NT, freq="D"), "lat": lat, "lon": lon})


@pytest.fixture(scope="module")
def land():
    mask = np.zeros((NLAT, NLON), dtype=bool)
    mask[1:3, 2:5] = True
    mask[5, 7] = True
    return mask


@pytest.fixture(scope="module")
def signal():
    return np.random.default_rng(1).uniform(-1, 1, size=NT)


@pytest.fixture(scope="module")
def field(land, signal):
    """A (time, lat, lon) field driven by t and t**2 (a curve, not a plane), NaN over land at every time."""
    return _grid(np.random.default_rng(0), land, signal)


def _regression(F, z, kind):
    """The regression or correlation map of F (time, lat, lon) on one score series, by numpy."""
    A, b = F - F.mean(axis=0), z - z.mean()
    cov = np.einsum("tij,t->ij", A, b) / len(z)
    return cov / b.var() if kind == "regression" else cov / np.sqrt(A.var(axis=0) * b.var())


def test_field_fit_transform_patterns_lazily_to_zarr(field, land, signal, tmp_path):
    ds = field.to_dataset().chunk({"time": 60})
    model = ds.dsgd.fit(KernelPCA(**FIELD_PCA), "sst", dim="time")  # no stacking by hand
    assert model.feature_dim_ == "feature"
    assert len(model.feature_coords_) == NLAT * NLON - land.sum()  # the mask, dropped
    assert "lat=-50.0, lon=0.0" in model.feature_coords_
    with dask.config.set(scheduler=_refuse):
        out = ds.dsgd.transform(model, "sst", dim="time")
        out = out.merge(ds.dsgd.patterns(model, "sst", dim="time"))
        out = out.merge(ds.dsgd.patterns(model, "sst", dim="time", kind="correlation", name="correlation"))
    assert out["components"].dims == ("time", "component")
    assert out["patterns"].dims == out["correlation"].dims == ("component", "lat", "lon")
    assert isinstance(out["patterns"].data, da.Array)
    out.to_zarr(str(tmp_path / "eofs.zarr"), consolidated=False)

    back = xr.open_zarr(str(tmp_path / "eofs.zarr"), consolidated=False).load()
    np.testing.assert_array_equal(back["time"].values, field["time"].values)
    np.testing.assert_array_equal(back["lat"].values, field["lat"].values)
    np.testing.assert_array_equal(back["lon"].values, field["lon"].values)
    Z = back["components"].values
    np.testing.assert_array_equal(Z, model.transform(field.values.reshape(NT, -1)[:, ~land.ravel()]))
    for kind in ("patterns", "correlation"):
        maps = back[kind].values
        np.testing.assert_array_equal(np.isnan(maps), np.broadcast_to(land, maps.shape))  # NaN exactly at the mask
        for k in range(2):
            ref = _regression(field.values, Z[:, k], "regression" if kind == "patterns" else kind)
            # sums over 240 samples: float64 rounding of the one-pass formula against the centred numpy one
            np.testing.assert_allclose(maps[k], ref, rtol=1e-9, atol=1e-12)
    # the components follow the curve: one t, the other t**2 (a linear EOF would mix them)
    r = np.abs(np.corrcoef(np.c_[Z, signal, signal ** 2].T)[:2, 2:])
    assert max(r[0, 0], r[1, 0]) > 0.9
    assert max(r[0, 1], r[1, 1]) > 0.9


def test_field_nan_outside_the_mask_is_named(field, land):
    model = field.dsgd.fit(KernelPCA(**FIELD_PCA), dim="time")
    bad = field.copy(data=field.values.copy())
    bad[100, 0, 1] = np.nan
    with dask.config.set(scheduler=_refuse):
        lazy = bad.chunk({"time": 60}).dsgd.transform(model, dim="time")
    with pytest.raises(ValueError, match=r"NaN at time=2000-04-10 00:00:00, lat=-50.0, lon=30.0, a point that is not"):
        lazy.compute()
    with pytest.raises(ValueError, match=r"NaN at time=2000-04-10 00:00:00, lat=-50.0, lon=30.0"):
        bad.dsgd.transform(model, dim="time")  # numpy-backed: checked now
    with pytest.raises(ValueError, match=r"NaN at time=2000-04-10 00:00:00, lat=-50.0, lon=30.0"):
        bad.chunk({"time": 60}).dsgd.fit(KernelPCA(**FIELD_PCA), dim="time")
    # the model's grid is checked: a point it was fitted on is missing
    with pytest.raises(ValueError, match=r"lacks 5 feature points .* \(first: 'lat=-50.0, lon=210.0'"):
        field.isel(lon=slice(0, 7)).dsgd.transform(model, dim="time")
    with pytest.raises(ValueError, match="pass dim= .* or sample_dim/feature_dim, not both"):
        field.dsgd.fit(KernelPCA(2), dim="time", sample_dim="time")
    with pytest.raises(ValueError, match=r"dim='day': \['day'\] is not a dimension .* \('time', 'lat', 'lon'\)"):
        field.dsgd.fit(KernelPCA(2), dim="day")
    with pytest.raises(ValueError, match="no dimension is left for the features"):
        field.dsgd.fit(KernelPCA(2), dim=("time", "lat", "lon"))
    with pytest.raises(ValueError, match="weights need dim="):
        field.isel(lat=0, lon=0).expand_dims("f", axis=1).dsgd.fit(KernelPCA(2), weights=field["lat"])
    with pytest.raises(ValueError, match=r"weights has dimensions \['time'\]"):
        field.dsgd.fit(KernelPCA(2), dim="time", weights=field["time"].astype(float))
    with pytest.raises(ValueError, match="kind='eof'"):
        field.dsgd.patterns(model, dim="time", kind="eof")


def test_field_several_sample_dims_round_trip(field, land):
    years = xr.Coordinates.from_pandas_multiindex(
        pd.MultiIndex.from_product([np.arange(2000, 2020), np.arange(1, 13)], names=("year", "month")), "time")
    cube = field.assign_coords(years).unstack("time").transpose("year", "month", "lat", "lon")
    cube = cube.assign_coords(season=("month", (np.arange(12) // 3) % 4)).chunk({"year": 5})
    model = cube.dsgd.fit(KernelPCA(**FIELD_PCA), dim=("year", "month"))
    with dask.config.set(scheduler=_refuse):
        Z = cube.dsgd.transform(model, dim=("year", "month"))
        P = cube.dsgd.patterns(model, dim=("year", "month"))
    assert Z.dims == ("year", "month", "component")
    np.testing.assert_array_equal(Z["year"].values, np.arange(2000, 2020))
    np.testing.assert_array_equal(Z["month"].values, np.arange(1, 13))
    np.testing.assert_array_equal(Z["season"].values, cube["season"].values)
    flat = field.dsgd.transform(model, dim="time")  # the same model on the same samples in one dimension
    np.testing.assert_array_equal(Z.values.reshape(NT, -1), flat.values)
    assert P.dims == ("component", "lat", "lon")
    np.testing.assert_array_equal(np.isnan(P.values), np.broadcast_to(land, P.shape))
    np.testing.assert_allclose(P.values, field.dsgd.patterns(model, dim="time").values, rtol=1e-9, atol=1e-12)


def test_field_weights_are_the_pre_weighted_field(field):
    weights = np.sqrt(np.cos(np.deg2rad(field["lat"])))
    lazy = field.chunk({"time": 60})
    model = lazy.dsgd.fit(KernelPCA(**FIELD_PCA), dim="time", weights=weights)
    ref = (lazy * weights).dsgd.fit(KernelPCA(**FIELD_PCA), dim="time")
    np.testing.assert_array_equal(model.eigenvalues_, ref.eigenvalues_)
    np.testing.assert_array_equal(model.model_.coef, ref.model_.coef)
    Z = lazy.dsgd.transform(model, dim="time", weights=weights)
    np.testing.assert_array_equal(Z.values, (lazy * weights).dsgd.transform(ref, dim="time").values)
    unweighted = lazy.dsgd.fit(KernelPCA(**FIELD_PCA), dim="time")
    assert not np.array_equal(unweighted.eigenvalues_, model.eigenvalues_)  # the weights did enter
    with pytest.raises(ValueError, match="different lengths or coordinates along 'lat'"):
        lazy.dsgd.fit(KernelPCA(2), dim="time", weights=weights.assign_coords(lat=weights["lat"] + 1))


def test_field_kernel_cca_patterns_per_view(field, land, signal):
    rng = np.random.default_rng(2)
    coast = np.zeros(5, dtype=bool)
    coast[3] = True
    rain = np.c_[signal ** 2, np.abs(signal), rng.normal(size=NT), np.sin(3 * signal), np.zeros(NT)]
    rain[:, coast] = np.nan
    ds = xr.Dataset({"sst": field, "rain": (("time", "station"), rain + 0.05 * rng.normal(size=rain.shape))},
                    coords={"station": list("abcde")}).chunk({"time": 60})
    cca = ds.dsgd.fit(KernelCCA(2, reg=1e-3, **{**MACHINE, "n_features": 128}), "sst", Y="rain", dim="time")
    with dask.config.set(scheduler=_refuse):
        out = ds.dsgd.patterns(cca, "sst", Y="rain", dim="time")
        U, V = ds["sst"].dsgd.transform(cca, other=ds["rain"], dim="time")
    assert out["patterns_x"].dims == ("component", "lat", "lon")
    assert out["patterns_y"].dims == ("component", "station")
    np.testing.assert_array_equal(np.isnan(out["patterns_x"].values), np.broadcast_to(land, (2, NLAT, NLON)))
    np.testing.assert_array_equal(np.isnan(out["patterns_y"].values), np.broadcast_to(coast, (2, 5)))
    U, V = U.values, V.values
    Yv = ds["rain"].values
    for k in range(2):
        np.testing.assert_allclose(out["patterns_x"].values[k], _regression(field.values, U[:, k], "regression"),
                                   rtol=1e-9, atol=1e-12)
        ref = _regression(Yv[:, :, None], V[:, k], "regression")[:, 0]
        np.testing.assert_allclose(out["patterns_y"].values[k], ref, rtol=1e-9, atol=1e-12)
    assert np.corrcoef(U[:, 0], V[:, 0])[0, 1] > 0.5  # the two fields share the signal
    with pytest.raises(ValueError, match="has two views: give the second view's field as Y="):
        ds.dsgd.patterns(cca, "sst", dim="time")


@pytest.mark.filterwarnings("ignore:Deleting a single level of a MultiIndex:FutureWarning")  # inside xeofs
def test_sst_kernel_eofs_against_xeofs(tmp_path):
    """Winter Pacific SST anomalies shipped with eofs: kernel PCA's leading scores are the leading EOFs'."""
    import os

    import eofs
    import xeofs
    path = os.path.join(os.path.dirname(eofs.__file__), "examples", "example_data", "sst_ndjfm_anom.nc")
    sst = xr.open_dataset(path, engine="scipy")["sst"].load()
    land = sst.isnull().all("time").values
    assert land.sum() == 90
    ref = xeofs.single.EOF(n_modes=3).fit(sst, dim="time").scores().transpose("time", "mode").values
    lazy = sst.chunk({"time": 10})
    model = lazy.dsgd.fit(KernelPCA(n_components=3, kernel="gaussian", bandwidth="median", random_state=0),
                          dim="time")
    Z = lazy.dsgd.transform(model, dim="time").values
    r = [abs(np.corrcoef(Z[:, k], ref[:, k])[0, 1]) for k in range(2)]
    # measured 0.981 and 0.978 (median bandwidth 14.7 K, several times the anomalies' spread)
    assert min(r) >= 0.9, r
    maps = lazy.dsgd.patterns(model, dim="time").values
    np.testing.assert_array_equal(np.isnan(maps), np.broadcast_to(land, maps.shape))
    # scores and maps of the fitted model built without a compute, then written by to_zarr
    with dask.config.set(scheduler=_refuse):
        out = xr.Dataset({"scores": lazy.dsgd.transform(model, dim="time"),
                          "patterns": lazy.dsgd.patterns(model, dim="time")})
        assert out["patterns"].dims == ("component", "latitude", "longitude")
        out.to_zarr(tmp_path / "kernel_eofs.zarr", compute=False)
    out.to_zarr(tmp_path / "kernel_eofs.zarr", mode="w")
    back = xr.open_zarr(tmp_path / "kernel_eofs.zarr")
    np.testing.assert_array_equal(back["scores"].values, Z)
    np.testing.assert_array_equal(back["patterns"].values, maps)
    np.testing.assert_array_equal(back["time"].values, sst["time"].values)
