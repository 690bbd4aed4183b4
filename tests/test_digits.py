"""Deformed digits (the MNIST8M setting): deformations, the lazy stream, its Zarr store on 1 and 2 workers."""

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client

from dsgd_dask.datasets import deform_digits, digit_stream, load_mnist


@pytest.fixture(scope="module")
def digits():
    X, y = load_mnist("train", sample=True)
    return X[:300].reshape(-1, 28, 28), y[:300]


def _shifted(img, dy, dx):
    out = np.zeros_like(img)
    out[max(dy, 0):28 + min(dy, 0), max(dx, 0):28 + min(dx, 0)] = img[max(-dy, 0):28 + min(-dy, 0),
                                                                       max(-dx, 0):28 + min(-dx, 0)]
    return out


def test_a_pure_shift_is_an_exact_copy(digits):
    images, _ = digits
    out = deform_digits(images, 0, max_shift=2, max_rotation=0, elastic_alpha=0)
    assert out.dtype == np.uint8
    assert out.shape == images.shape
    for img, moved in zip(images[:50], out[:50], strict=True):
        # some shift in [-2, 2]^2, with zeros moved in, reproduces the digit exactly
        matches = [np.array_equal(_shifted(img, dy, dx), moved) for dy in range(-2, 3) for dx in range(-2, 3)]
        assert any(matches)
    np.testing.assert_array_equal(deform_digits(images, 0, max_shift=0, max_rotation=0, elastic_alpha=0), images)


def test_deformations_keep_the_ink_and_are_seeded(digits):
    images, _ = digits
    a = deform_digits(images, 1)
    np.testing.assert_array_equal(a, deform_digits(images, 1))
    assert not np.array_equal(a, deform_digits(images, 2))
    assert not np.array_equal(a, images)
    # a small rotation and a smooth field move ink, they do not create or destroy much of it
    ink = images.reshape(len(images), -1).sum(axis=1).astype(float)
    moved = a.reshape(len(a), -1).sum(axis=1)
    assert np.median(np.abs(moved - ink) / ink) < 0.1
    # flattened rows in, flattened rows out
    assert deform_digits(images.reshape(len(images), -1), 1).shape == (len(images), 784)


def test_stream_rows_labels_and_originals(digits):
    images, labels = digits
    X, y = digit_stream(images, labels, n_rows=1000, chunk_rows=128, random_state=5)
    assert X.shape == (1000, 784)
    assert X.dtype == np.uint8
    assert X.chunks[0] == (128,) * 7 + (104,)
    Xc, yc = dask.compute(X, y, scheduler="sync")
    np.testing.assert_array_equal(yc, labels[np.arange(1000) % 300])
    np.testing.assert_array_equal(Xc[:300], images.reshape(300, -1))  # the originals first
    # later rows deform their own digit: nearer to it than to the other digits, on the whole
    rows = Xc[300:600].astype(float)
    own = np.linalg.norm(rows - images.reshape(300, -1), axis=1)
    other = np.linalg.norm(rows - np.roll(images.reshape(300, -1), 1, axis=0), axis=1)
    assert (own < other).mean() > 0.9
    # the images enter the graph once, not once per chunk
    graph = dict(X.__dask_graph__())
    assert sum(isinstance(v, np.ndarray) and v.size == images.size for v in graph.values()) <= 1
    without, = [digit_stream(images, n_rows=1000, chunk_rows=128, random_state=5, originals=False)]
    assert not np.array_equal(without[:300].compute(), Xc[:300])
    np.testing.assert_array_equal(without[300:].compute(), Xc[300:])


def test_store_bytes_are_the_same_on_one_and_two_workers(digits, tmp_path, local_clusters):
    images, _labels = digits
    X = digit_stream(images, n_rows=1200, chunk_rows=200, random_state=7)
    with dask.config.set(scheduler="sync"):
        da.to_zarr(X, str(tmp_path / "sync.zarr"))
    for workers in (1, 2):
        with Client(local_clusters(workers)):
            da.to_zarr(digit_stream(images, n_rows=1200, chunk_rows=200, random_state=7),
                       str(tmp_path / f"w{workers}.zarr"))
    ref = zarr.open_array(str(tmp_path / "sync.zarr"), mode="r")[:]
    assert ref.shape == (1200, 784)
    for workers in (1, 2):
        np.testing.assert_array_equal(zarr.open_array(str(tmp_path / f"w{workers}.zarr"), mode="r")[:], ref)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"max_shift": -1}, ValueError, "max_shift"),
    ({"max_rotation": -5.0}, ValueError, "max_rotation"),
    ({"elastic_sigma": 0.0}, ValueError, "elastic_sigma"),
    ({"elastic_alpha": float("nan")}, ValueError, "elastic_alpha"),
    ({"max_shift": 1.5}, TypeError, "max_shift"),
])
def test_bad_parameters(digits, kwargs, error, match):
    images, _ = digits
    with pytest.raises(error, match=match):
        deform_digits(images, 0, **kwargs)
    with pytest.raises(error, match=match):
        digit_stream(images, n_rows=10, **kwargs)


def test_bad_images_and_labels(digits):
    images, labels = digits
    with pytest.raises(TypeError, match="uint8"):
        deform_digits(images.astype(np.float32), 0)
    with pytest.raises(ValueError, match="square"):
        deform_digits(np.zeros((3, 10), np.uint8), 0)
    with pytest.raises(ValueError, match="no images"):
        digit_stream(np.zeros((0, 28, 28), np.uint8), n_rows=10)
    with pytest.raises(ValueError, match="labels must have shape"):
        digit_stream(images, labels[:10], n_rows=10)
    with pytest.raises(ValueError, match="n_rows"):
        digit_stream(images, n_rows=0)
