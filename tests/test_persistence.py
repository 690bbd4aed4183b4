"""Saved models: Zarr stores read back identically anywhere; damaged or foreign stores are refused."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import dsgd_dask
from dsgd_dask import DSGDKernelPCA


@pytest.fixture
def model(blobs):
    return DSGDKernelPCA(3, kernel="matern", kernel_params={"nu": 2.5}, n_features=512, block_size=64,
                         max_iter=40, random_state=0).fit(blobs)


def test_save_load_in_fresh_process(model, blobs, tmp_path):
    path = tmp_path / "model.zarr"
    model.save(path)
    np.save(tmp_path / "X.npy", blobs)
    code = (
        "import sys, numpy as np, dsgd_dask\n"
        f"m = dsgd_dask.load({str(path)!r})\n"
        f"np.save({str(tmp_path / 'Z.npy')!r}, m.transform(np.load({str(tmp_path / 'X.npy')!r})))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "Z.npy"), model.transform(blobs))


def test_loaded_model_keeps_everything(model, blobs, tmp_path):
    model.save(tmp_path / "m.zarr")
    back = dsgd_dask.load(tmp_path / "m.zarr")
    assert back.get_params() == model.get_params()
    np.testing.assert_array_equal(back.eigenvalues_, model.eigenvalues_)
    assert back.bandwidth_ == model.bandwidth_
    assert back.kernel_ == model.kernel_
    assert back.n_features_in_ == 5
    # continuing to learn from a loaded model equals continuing the original
    a = pickle.loads(pickle.dumps(model)).partial_fit(blobs)
    b = back.partial_fit(blobs)
    np.testing.assert_array_equal(a.transform(blobs), b.transform(blobs))


def test_readable_attributes(model, tmp_path):
    model.save(tmp_path / "m.zarr")
    attrs = dict(zarr.open_group(str(tmp_path / "m.zarr"), mode="r").attrs)
    assert attrs["estimator"] == "DSGDKernelPCA"
    assert attrs["features"]["kernel"] == {"name": "matern", "bandwidth": model.bandwidth_, "nu": 2.5, "order": None}
    assert attrs["features"]["seed"] == 0
    assert attrs["dsgd_dask"]["format_version"] == 2
    json.dumps(attrs)


def test_xarray_labels_survive(blobs, tmp_path):
    arr = xr.DataArray(blobs, dims=("sample", "band"), coords={"band": [400, 500, 600, 700, 800]})
    m = DSGDKernelPCA(2, n_features=256, block_size=64, max_iter=10, random_state=0).fit(arr)
    m.save(tmp_path / "m.zarr")
    back = dsgd_dask.load(tmp_path / "m.zarr")
    assert back.feature_dim_ == "band"
    np.testing.assert_array_equal(back.feature_coords_, [400, 500, 600, 700, 800])
    with pytest.raises(ValueError, match="coordinates of dimension 'band'"):
        back.transform(arr.assign_coords(band=[1, 2, 3, 4, 5]))


def test_no_silent_overwrite(model, tmp_path):
    model.save(tmp_path / "m.zarr")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        model.save(tmp_path / "m.zarr")
    model.save(tmp_path / "m.zarr", overwrite=True)
    assert dsgd_dask.load(tmp_path / "m.zarr").n_iter_ == model.n_iter_
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left


def _chunk_files(path: Path, array: str):
    return sorted(p for p in (path / array).rglob("*") if p.is_file() and p.name != "zarr.json")


def test_truncated_chunk_detected(model, tmp_path):
    path = model.save(tmp_path / "m.zarr")
    victim = _chunk_files(path, "coef")[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        dsgd_dask.load(path)


def test_missing_chunk_detected(model, tmp_path):
    path = model.save(tmp_path / "m.zarr")
    _chunk_files(path, "state_coef")[0].unlink()  # zarr would silently read the fill value
    with pytest.raises(ValueError, match="array 'state_coef' does not match its checksum"):
        dsgd_dask.load(path)


def test_data_store_refused(tmp_path, blobs):
    zarr.create_array(store=str(tmp_path / "data.zarr"), data=blobs)
    with pytest.raises(ValueError, match="not a dsgd_dask model store"):
        dsgd_dask.load(tmp_path / "data.zarr")
    xr.Dataset({"X": (("s", "f"), blobs)}).to_zarr(str(tmp_path / "ds.zarr"), consolidated=False)
    with pytest.raises(ValueError, match="no 'dsgd_dask' metadata"):
        dsgd_dask.load(tmp_path / "ds.zarr")
    with pytest.raises(FileNotFoundError):
        dsgd_dask.load(tmp_path / "nothing.zarr")


def test_newer_format_refused(model, tmp_path):
    path = model.save(tmp_path / "m.zarr")
    group = zarr.open_group(str(path), mode="r+")
    meta = dict(group.attrs["dsgd_dask"])
    meta["format_version"] = 99
    group.attrs["dsgd_dask"] = meta
    with pytest.raises(ValueError, match="format version 99.*upgrade dsgd_dask"):
        dsgd_dask.load(path)


def test_older_format_refused(model, tmp_path):
    # format 1 drew its frequencies with another sampler: its seeds would give other features
    path = model.save(tmp_path / "m.zarr")
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["dsgd_dask"] = {**group.attrs["dsgd_dask"], "format_version": 1}
    with pytest.raises(ValueError, match="format version 1, whose seeds generate other random features"):
        dsgd_dask.load(path)
