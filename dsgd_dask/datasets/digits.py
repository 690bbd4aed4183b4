"""Deformed handwritten digits: random shifts, rotations and elastic deformations, as a lazy stream.

Loosli, Canu and Bottou (2007) grew MNIST's 60,000 training digits into 8.1 million
("MNIST8M") by deforming each digit many times; Dai et al. (2014) fit their doubly
stochastic kernel machines on it. :func:`deform_digits` draws such deformations — an
integer shift, a small rotation and a smooth elastic displacement field (Simard, Steinkraus
and Platt 2003), applied in one bilinear resampling — and :func:`digit_stream` makes a
dask array of any length from them: row ``r`` is a deformation of digit ``r mod n``, each
chunk generated from its own seed when it is computed, so a stream of 8.1 million rows
is never held in memory and is the same, byte for byte, however its chunks are
scheduled. ``digit_stream(...).to_zarr(path)`` writes it chunk by chunk.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np
from scipy import ndimage

from dsgd_dask._validation import check_float, check_int

#: Spawn-key tag of the deformations (so they never share draws with feature seeds).
STREAM_TAG = 0x4447


def _images(images) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim == 2:
        side = math.isqrt(images.shape[1])
        if side * side != images.shape[1]:
            raise ValueError(f"rows of {images.shape[1]} pixels are not flattened square images")
        images = images.reshape(len(images), side, side)
    if images.ndim != 3 or images.shape[1] != images.shape[2]:
        raise ValueError(f"expected images of shape (n, side, side) or (n, side**2), got {images.shape}")
    if images.dtype != np.uint8:
        raise TypeError(f"digit images must be uint8 pixels (0-255), got dtype {images.dtype}")
    if len(images) == 0:
        raise ValueError("no images given")
    return images


def deform_digits(images, random_state=None, *, max_shift: int = 2, max_rotation: float = 10.0,
                  elastic_alpha: float = 8.0, elastic_sigma: float = 3.0) -> np.ndarray:
    """One random deformation of each image.

    Each image is moved by an integer shift drawn uniformly from
    ``[-max_shift, max_shift]`` in each direction, rotated about its centre by an angle
    drawn uniformly from ``[-max_rotation, max_rotation]`` degrees, and displaced by an
    elastic field: uniform noise in ``[-1, 1]`` per pixel and direction, smoothed by a
    Gaussian of width ``elastic_sigma`` pixels and scaled by ``elastic_alpha`` pixels.
    The three are composed into one map of source coordinates and the image is
    resampled once, bilinearly, with zeros outside. A pure shift is an exact copy.

    Parameters
    ----------
    images : array-like of uint8, shape (n, side, side) or (n, side**2)
    random_state : int, Generator or None
    max_shift : int, default=2
    max_rotation : float, default=10.0
        Degrees.
    elastic_alpha, elastic_sigma : float, default=8.0, 3.0
        ``elastic_alpha=0`` turns the elastic field off.

    Returns
    -------
    ndarray of uint8, the shape of ``images``

    Examples
    --------
    >>> import numpy as np
    >>> img = np.zeros((1, 5, 5), np.uint8); img[0, 2, 2] = 255
    >>> out = deform_digits(img, 0, max_shift=1, max_rotation=0, elastic_alpha=0)
    >>> int(out.sum()), out.shape
    (255, (1, 5, 5))
    """
    shape = np.shape(images)
    imgs = _images(images)
    max_shift = check_int(max_shift, "max_shift", 0)
    max_rotation = check_float(max_rotation, "max_rotation", strict=False)
    elastic_alpha = check_float(elastic_alpha, "elastic_alpha", strict=False)
    elastic_sigma = check_float(elastic_sigma, "elastic_sigma")
    rng = np.random.default_rng(random_state)
    n, side = imgs.shape[0], imgs.shape[1]
    shifts = rng.integers(-max_shift, max_shift + 1, size=(n, 2)).astype(np.float64)
    angles = np.deg2rad(rng.uniform(-max_rotation, max_rotation, size=n))
    centre = (side - 1) / 2.0
    grid = np.arange(side, dtype=np.float64) - centre
    rows, cols = grid[None, :, None], grid[None, None, :]
    cos, sin = np.cos(angles)[:, None, None], np.sin(angles)[:, None, None]
    # the output pixel (r, c) reads the source at the inverse rotation of (r, c) minus the shift
    src_r = cos * rows - sin * cols + centre - shifts[:, 0, None, None]
    src_c = sin * rows + cos * cols + centre - shifts[:, 1, None, None]
    if elastic_alpha > 0:  # drawn last: the shifts and angles are the same with the field on or off
        field = rng.uniform(-1.0, 1.0, size=(2, n, side, side))
        smooth = ndimage.gaussian_filter(field, sigma=(0, 0, elastic_sigma, elastic_sigma), mode="constant")
        src_r = src_r + elastic_alpha * smooth[0]
        src_c = src_c + elastic_alpha * smooth[1]
    index = np.broadcast_to(np.arange(n, dtype=np.float64)[:, None, None], src_r.shape)
    out = ndimage.map_coordinates(imgs.astype(np.float32), [index, src_r, src_c], order=1, mode="constant",
                                  cval=0.0)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(shape)


def _chunk_rows(i, rows, n, n_rows):
    start = i * rows
    return np.arange(start, min(start + rows, n_rows)) % n


def _stream_chunk(i, images, seed, rows, n_rows, originals, params):
    pick = _chunk_rows(i, rows, n_rows=n_rows, n=len(images))
    out = deform_digits(images[pick], np.random.default_rng([seed, STREAM_TAG, i]), **params)
    if originals:
        first = np.arange(i * rows, i * rows + len(pick)) < len(images)
        out[first] = images[pick[first]]
    return out.reshape(len(pick), -1)


def _label_chunk(i, labels, rows, n_rows):
    return labels[_chunk_rows(i, rows, n_rows=n_rows, n=len(labels))]


def digit_stream(images, labels=None, *, n_rows: int, chunk_rows: int = 8192, random_state: int = 0,
                 originals: bool = True, max_shift: int = 2, max_rotation: float = 10.0,
                 elastic_alpha: float = 8.0, elastic_sigma: float = 3.0):
    """A lazy stream of deformed digits: row ``r`` deforms image ``r mod n``.

    Parameters
    ----------
    images : array-like of uint8, shape (n, side, side) or (n, side**2)
        The digits (MNIST's training images, say).
    labels : array-like of shape (n,), optional
        Their labels, repeated with their rows.
    n_rows : int
        Rows of the stream (8,100,000 for the MNIST8M setting).
    chunk_rows : int, default=8192
        Rows per chunk; chunk ``i`` is generated from the seed ``(random_state, i)``.
    random_state : int, default=0
    originals : bool, default=True
        The first ``n`` rows are the images themselves, undeformed.
    max_shift, max_rotation, elastic_alpha, elastic_sigma
        As for :func:`deform_digits`.

    Returns
    -------
    X : dask.array.Array of uint8, shape (n_rows, side**2)
    y : dask.array.Array of shape (n_rows,)
        Only when ``labels`` is given.

    Examples
    --------
    >>> import numpy as np
    >>> imgs = np.random.default_rng(0).integers(0, 256, (10, 8, 8), dtype=np.uint8)
    >>> X, y = digit_stream(imgs, np.arange(10), n_rows=25, chunk_rows=10)
    >>> X.shape, X.chunks[0], y[20:23].compute().tolist()
    ((25, 64), (10, 10, 5), [0, 1, 2])
    >>> bool((X[:10].compute() == imgs.reshape(10, -1)).all())
    True
    """
    imgs = _images(images)
    n = len(imgs)
    n_rows = check_int(n_rows, "n_rows", 1)
    rows = check_int(chunk_rows, "chunk_rows", 1)
    seed = check_int(random_state, "random_state", 0)
    params = {"max_shift": max_shift, "max_rotation": max_rotation, "elastic_alpha": elastic_alpha,
              "elastic_sigma": elastic_sigma}
    deform_digits(imgs[:1], 0, **params)  # the parameters checked before any task runs
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (n,):
            raise ValueError(f"labels must have shape ({n},) for {n} images, got {labels.shape}")
    n_chunks = -(-n_rows // rows)
    sizes = [min(rows, n_rows - i * rows) for i in range(n_chunks)]
    token = da.core.tokenize(imgs, labels, seed, rows, n_rows, originals, params)
    data = dask.delayed(imgs, name=f"digit-images-{token}", traverse=False)  # in the graph once
    chunk = dask.delayed(_stream_chunk, pure=True)
    X = da.concatenate([
        da.from_delayed(chunk(i, data, seed, rows, n_rows, bool(originals), params,
                              dask_key_name=f"digit-stream-{token}-{i}"),
                        shape=(sizes[i], imgs.shape[1] * imgs.shape[2]), dtype=np.uint8)
        for i in range(n_chunks)
    ])
    if labels is None:
        return X
    lab = dask.delayed(labels, name=f"digit-labels-{token}", traverse=False)
    label_chunk = dask.delayed(_label_chunk, pure=True)
    y = da.concatenate([
        da.from_delayed(label_chunk(i, lab, rows, n_rows, dask_key_name=f"digit-stream-labels-{token}-{i}"),
                        shape=(sizes[i],), dtype=labels.dtype)
        for i in range(n_chunks)
    ])
    return X, y
