"""Mini-batch streams: seeded plans that visit every row, Zarr paths and xarray Datasets, dtypes, two views."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from dsgd_dask import KernelPCA
from dsgd_dask.streams import as_view, chunk_tasks, load_slab
from dsgd_dask.streams.batches import load_pair
from dsgd_dask.streams.inputs import paired_views

SMALL = dict(n_components=2, n_features=512, block_size=64, max_iter=30, batch_size=32, random_state=0)


def _rows_seen(view, batch_size, n_steps, shuffle_chunks=1):
    """Global row indices of every step's mini-batch, in step order."""
    starts = np.cumsum((0, *view.data.chunks[0])) if view.is_dask else None
    out = []
    for task in chunk_tasks(view, batch_size, 11, 0, n_steps, shuffle_chunks=shuffle_chunks):
        if view.is_dask:
            index = np.concatenate([np.arange(starts[c], starts[c + 1]) for c in task.chunks])
        else:
            index = task.rows
        out.extend(index[b] for b in task.batches(task.n_rows, batch_size))
    return out


@pytest.mark.parametrize("kind", ["numpy", "dask", "dask-buffer"])
def test_every_row_once_per_epoch(kind):
    n = 1003  # a short last chunk
    data = np.arange(n * 2, dtype=float).reshape(n, 2)
    view = as_view(da.from_array(data, chunks=(100, 2))) if kind != "numpy" else as_view(data)
    buffer = 3 if kind == "dask-buffer" else 1
    per_epoch = sum(t.n_steps for t in chunk_tasks(view, 32, 11, 0, 10_000, shuffle_chunks=buffer) if t.epoch == 0)
    batches = _rows_seen(view, 32, 2 * per_epoch, buffer)
    first, second = np.concatenate(batches[:per_epoch]), np.concatenate(batches[per_epoch:])
    np.testing.assert_array_equal(np.sort(first), np.arange(n))
    np.testing.assert_array_equal(np.sort(second), np.arange(n))
    assert not np.array_equal(first, second)  # a new order each epoch
    assert max(len(b) for b in batches) <= 32
    if kind == "dask-buffer":
        # rows of three chunks are mixed within one mini-batch
        assert any(len(np.unique(b // 100)) > 1 for b in batches)


def test_plan_is_a_function_of_the_seed():
    view = as_view(da.zeros((500, 3), chunks=(64, 3)))
    a = [(t.chunks, t.seed) for t in chunk_tasks(view, 16, 5, 0, 200)]
    b = [(t.chunks, t.seed) for t in chunk_tasks(view, 16, 5, 0, 200)]
    c = [(t.chunks, t.seed) for t in chunk_tasks(view, 16, 6, 0, 200)]
    assert a == b
    assert a != c


@pytest.fixture
def blobs_store(tmp_path, blobs):
    path = tmp_path / "blobs.zarr"
    zarr.create_array(store=str(path), data=blobs.astype("float32"), chunks=(100, 5))
    return path


def test_fit_from_zarr_path_and_array(blobs_store):
    by_path = KernelPCA(**SMALL).fit(str(blobs_store))
    by_array = KernelPCA(**SMALL).fit(zarr.open_array(str(blobs_store), mode="r"))
    by_dask = KernelPCA(**SMALL).fit(da.from_zarr(str(blobs_store)))
    np.testing.assert_array_equal(by_path.model_.coef, by_dask.model_.coef)
    np.testing.assert_array_equal(by_array.model_.coef, by_dask.model_.coef)
    assert isinstance(by_path.transform(str(blobs_store)), da.Array)


def test_zarr_group_path_explains_itself(tmp_path, blobs):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("X", data=blobs)
    with pytest.raises(ValueError, match="is a Zarr group, not an array.*g.zarr/X"):
        KernelPCA(**SMALL).fit(str(tmp_path / "g.zarr"))
    model = KernelPCA(**SMALL).fit(str(tmp_path / "g.zarr" / "X"))
    assert model.n_features_in_ == 5


def test_empty_store(tmp_path):
    zarr.create_array(store=str(tmp_path / "e.zarr"), shape=(0, 4), dtype="float32", chunks=(10, 4))
    with pytest.raises(ValueError, match="0 samples"):
        KernelPCA(**SMALL).fit(str(tmp_path / "e.zarr"))


def test_xarray_open_zarr_dataset(tmp_path, blobs):
    ds = xr.Dataset({"X": (("sample", "feature"), blobs)}, coords={"sample": np.arange(len(blobs))})
    ds.chunk({"sample": 128}).to_zarr(str(tmp_path / "ds.zarr"), consolidated=False)
    opened = xr.open_zarr(str(tmp_path / "ds.zarr"), consolidated=False)
    model = KernelPCA(**SMALL).fit(opened)
    assert model.feature_dim_ == "feature"
    Z = model.transform(opened["X"])
    assert Z.dims == ("sample", "component")
    assert isinstance(Z.data, da.Array)
    both = opened.assign(Y=opened["X"] * 2)
    with pytest.raises(ValueError, match="2 2-D data variables"):
        KernelPCA(**SMALL).fit(both)


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float64"])
def test_store_dtypes_converted_per_chunk(tmp_path, dtype):
    rng = np.random.default_rng(0)
    values = rng.integers(0, 255, size=(400, 6)).astype(dtype)
    zarr.create_array(store=str(tmp_path / "a.zarr"), data=values, chunks=(64, 6))
    zarr.create_array(store=str(tmp_path / "b.zarr"), data=values.astype("float32"), chunks=(64, 6))
    a = KernelPCA(**{**SMALL, "n_features": 384}).fit(str(tmp_path / "a.zarr"))  # landmarks: at most the rows
    b = KernelPCA(**{**SMALL, "n_features": 384}).fit(str(tmp_path / "b.zarr"))
    # integers up to 255 are exact in every one of these dtypes: the same features, the same model
    np.testing.assert_allclose(a.model_.coef, b.model_.coef, rtol=1e-10, atol=1e-12)


def test_chunks_split_along_features_fit(blobs):
    X = da.from_array(blobs, chunks=(100, 2))
    Y = da.from_array(blobs, chunks=(100, 5))
    a = KernelPCA(**SMALL).fit(X)
    b = KernelPCA(**SMALL).fit(Y)
    np.testing.assert_array_equal(a.model_.coef, b.model_.coef)


def test_paired_views_align_rows(blobs):
    X = da.from_array(blobs, chunks=(100, 5))
    Y = blobs[:, :2] * 10
    vx, vy = paired_views(X, Y)
    assert vx.data.chunks[0] == vy.data.chunks[0]
    for task in chunk_tasks(vx, 32, 3, 0, 20):
        x, y = load_pair((vx, vy), task)
        np.testing.assert_array_equal(x[:, :2] * 10, y)
    vx, vy = paired_views(blobs, da.from_array(Y, chunks=(70, 2)))
    assert vx.data.chunks[0] == vy.data.chunks[0] == da.from_array(Y, chunks=(70, 2)).chunks[0]


def test_misaligned_two_view_stores_fail_before_work(tmp_path, blobs):
    zarr.create_array(store=str(tmp_path / "x.zarr"), data=blobs, chunks=(100, 5))
    zarr.create_array(store=str(tmp_path / "y.zarr"), data=blobs[:-1, :2], chunks=(100, 2))
    with pytest.raises(ValueError, match="X has 600 rows, Y has 599"):
        paired_views(str(tmp_path / "x.zarr"), str(tmp_path / "y.zarr"))


def test_load_slab_names_bad_chunk():
    data = np.ones((300, 2))
    data[250, 0] = np.inf
    view = as_view(da.from_array(data, chunks=(100, 2)))
    task = next(t for t in chunk_tasks(view, 32, 0, 0, 100, shuffle_chunks=3))
    with pytest.raises(ValueError, match="chunk 2"):
        load_slab(view, task)
