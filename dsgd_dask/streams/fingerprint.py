"""A cheap fingerprint of an input: shape, dtype, row chunks and a digest of a fixed sample of its rows.

A checkpoint keeps the fingerprint of every input of its fit, so that a fit run again on
other data of the same shape is refused instead of resumed. Only a few windows of
consecutive rows are read (for a dask or Zarr input: one small compute touching a few
chunks), so the fingerprint costs little on data of any size. It is a guard, not a
proof: inputs that agree on every sampled row are taken as the same input.
"""

from __future__ import annotations

import hashlib

import dask.array as da
import numpy as np

from dsgd_dask.streams.inputs import DataView

#: Windows of consecutive rows sampled, and rows in each: consecutive rows mostly share a
#: chunk, so a lazy input has at most two chunks read per window.
N_WINDOWS = 8
WINDOW_ROWS = 8

# the sampled rows depend on the shape alone (not on the chunks, dtype or values)
_SEED_TAG = 0x66696E67


def sampled_rows(n_samples: int, n_features: int) -> list[tuple[int, int]]:
    """The row ranges ``[start, stop)`` the digest reads: every row of a small input, else seeded windows."""
    if n_samples <= N_WINDOWS * WINDOW_ROWS:
        return [(0, n_samples)]
    rng = np.random.default_rng([_SEED_TAG, n_samples, n_features])
    starts = np.sort(rng.choice(n_samples - WINDOW_ROWS + 1, size=N_WINDOWS, replace=False))
    ranges: list[tuple[int, int]] = []
    for start in starts.tolist():
        stop = start + WINDOW_ROWS
        if ranges and start <= ranges[-1][1]:  # overlapping windows: read their rows once
            ranges[-1] = (ranges[-1][0], stop)
        else:
            ranges.append((start, stop))
    return ranges


def row_chunks(view: DataView) -> list[list[int]] | None:
    """The row chunks of a dask view, run-length encoded as ``[[size, count], ...]``; ``None`` in memory."""
    if not view.is_dask:
        return None
    runs: list[list[int]] = []
    for size in view.data.chunks[0]:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([int(size), 1])
    return runs


def data_fingerprint(view: DataView) -> dict:
    """The fingerprint of ``view``: ``shape``, ``dtype``, ``row_chunks`` and ``digest`` (JSON-ready).

    ``digest`` is the SHA-256 of the shape, the dtype and the sampled rows
    (:func:`sampled_rows`), in native byte order; it does not depend on the row chunks,
    so the same values read from memory or from any chunking of a store agree on it.
    """
    data = view.data
    dtype = np.dtype(data.dtype).newbyteorder("=")
    ranges = sampled_rows(view.n_samples, view.n_features)
    if view.is_dask:
        rows = da.concatenate([data[start:stop] for start, stop in ranges], axis=0).compute()
    else:
        rows = np.concatenate([data[start:stop] for start, stop in ranges], axis=0)
    rows = np.ascontiguousarray(rows, dtype=dtype)
    shape = [view.n_samples, view.n_features]
    digest = hashlib.sha256(repr((shape, dtype.str)).encode())
    digest.update(rows.tobytes())
    return {"shape": shape, "dtype": dtype.name, "row_chunks": row_chunks(view), "digest": digest.hexdigest()}


def describe_chunks(runs: list | None) -> str:
    """``runs`` (:func:`row_chunks`) in words."""
    if runs is None:
        return "in memory"
    n_chunks = sum(count for _, count in runs)
    largest = max(size for size, _ in runs)
    return f"{n_chunks} row chunk{'s' if n_chunks != 1 else ''} of at most {largest} rows"


def fingerprint_difference(saved: dict, current: dict) -> str | None:
    """How the input fingerprinted ``current`` differs from the one fingerprinted ``saved``, or ``None``."""
    shape, other = tuple(current["shape"]), tuple(saved["shape"])
    if shape != other:
        return f"shape {other}, not {shape}"
    if saved["dtype"] != current["dtype"]:
        return f"same shape {shape}, dtype {saved['dtype']}, not {current['dtype']}"
    if saved["digest"] != current["digest"]:
        return f"same shape {shape}, other values"
    if saved["row_chunks"] != current["row_chunks"]:
        was, now = describe_chunks(saved["row_chunks"]), describe_chunks(current["row_chunks"])
        return f"same values, other row chunks ({was}, not {now})" if was != now else "same values, other row chunks"
    return None
