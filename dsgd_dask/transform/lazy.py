"""Row-wise application of a fitted model: eager on numpy, lazy on dask, labelled on xarray."""

from __future__ import annotations

from collections.abc import Callable

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dsgd_dask._threads import scratch
from dsgd_dask.streams.inputs import DataView, check_finite_block

#: Rows of every evaluation of a row-wise function (see :func:`in_row_slices`). BLAS kernels
#: round a row of a product differently by the product's shape and by the row's place in it
#: (OpenBLAS's Haswell sgemm does, by place; SkylakeX's by shape), so a row is always
#: evaluated at the same place of a slice of this many rows. Small enough that padding the
#: partial slices at a chunk's ends costs little (5% more rows with 10,000-row chunks),
#: large enough that a product per slice runs at full speed.
ROW_SLICE = 512


def in_row_slices(fn: Callable[[np.ndarray], np.ndarray], X, n_out: int, row0: int = 0) -> np.ndarray:
    """``fn`` on the rows of ``X``, each row's result independent of the rows around it.

    Row ``i`` of ``X`` is row ``row0 + i`` of the whole input. Every call of ``fn`` gets
    exactly :data:`ROW_SLICE` C-contiguous rows, each row at its place in the whole input
    modulo :data:`ROW_SLICE`: a slice of ``X`` where ``X`` covers the whole slice, else a
    copy in a scratch buffer whose places outside ``X`` repeat its first or last row
    (valid input, results discarded). A row then goes through the same arithmetic with
    the same shapes whichever rows share its chunk, so a dask transform equals the numpy
    one bit for bit whatever the chunking (OpenBLAS's kernels round by shapes and places,
    not by the operands' addresses). ``fn`` maps ``(rows, d)`` to ``(rows, n_out)`` and
    must not keep its input. Returns ``(len(X), n_out)`` float64.
    """
    X = np.asarray(X)
    n = X.shape[0]
    out = np.empty((n, n_out), dtype=np.float64)
    S = ROW_SLICE
    for s in range(row0 - row0 % S, row0 + n, S):
        lo, hi = max(s, row0) - row0, min(s + S, row0 + n) - row0  # rows of X in this slice
        part = X[lo:hi]
        if hi - lo == S and part.flags.c_contiguous:
            rows = part
        else:
            rows = scratch("row-slice", (S, *X.shape[1:]), X.dtype)
            a = lo + row0 - s  # place of X's row lo in the slice
            rows[a:a + hi - lo] = part
            rows[:a] = part[0]
            rows[a + hi - lo:] = part[-1]
        res = fn(rows)
        out[lo:hi] = res[lo + row0 - s:hi + row0 - s]
    return out


def _apply_block(block: np.ndarray, fn: Callable, n_out: int, block_info=None) -> np.ndarray:
    info = block_info[0] if block_info else None
    loc = info["chunk-location"][0] if info else "?"
    check_finite_block(block, f"row chunk {loc}")
    return in_row_slices(fn, block, n_out, info["array-location"][0][0] if info else 0)


def apply_rows(view: DataView, fn: Callable[[np.ndarray], np.ndarray], n_out: int, token: str,
               name: str, out_dim: str = "component"):
    """Apply ``fn`` (rows of ``view.data`` -> ``(rows, n_out)`` float64) to every row.

    * numpy input: computed now;
    * dask input: a lazy dask array with one task per row chunk, and ``fn`` one key of
      the graph (nothing is computed; NaN or infinity in a chunk raises a
      ``ValueError`` naming it when computed);
    * xarray DataArray: a DataArray with dims ``(sample_dim, out_dim)`` keeping the
      sample coordinates, lazy when the input is dask-backed.

    ``fn`` is called on slices of :data:`ROW_SLICE` rows at fixed places
    (:func:`in_row_slices`): a row's result is the same, bit for bit, on numpy, dask or
    xarray input and whatever the row chunks.

    ``token`` identifies the model, so equal models on equal inputs share task names.
    """
    X = view.data
    if isinstance(X, da.Array):
        # the model enters the graph once, as a key every chunk task depends on (a Nyström
        # model carries its landmarks: embedding it in each task would copy them per chunk)
        model = dask.delayed(fn, name=f"{name}-model-{token}", traverse=False)
        out = X.map_blocks(
            _apply_block, model, n_out,
            dtype=np.float64,
            chunks=(X.chunks[0], (n_out,)),
            meta=np.empty((0, n_out), dtype=np.float64),
            name=f"{name}-{tokenize(X.name, token)}",
        )
    else:
        out = in_row_slices(fn, X, n_out)
    if view.dims is None:
        return out
    import xarray as xr

    src = view.source
    sdim = view.dims[0]
    coords = {k: v for k, v in src.coords.items() if set(v.dims) <= {sdim}}
    coords[out_dim] = np.arange(n_out)
    return xr.DataArray(out, dims=(sdim, out_dim), coords=coords, name=name)  # input attrs describe the input
