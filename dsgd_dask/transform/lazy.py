"""Row-wise application of a fitted model: eager on numpy, lazy on dask, labelled on xarray."""

from __future__ import annotations

from collections.abc import Callable

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dsgd_dask.streams.inputs import DataView, check_finite_block


def _apply_block(block: np.ndarray, fn: Callable, block_info=None) -> np.ndarray:
    loc = block_info[0]["chunk-location"][0] if block_info else "?"
    check_finite_block(block, f"row chunk {loc}")
    return fn(block)


def apply_rows(view: DataView, fn: Callable[[np.ndarray], np.ndarray], n_out: int, token: str,
               name: str, out_dim: str = "component"):
    """Apply ``fn`` (rows of ``view.data`` -> ``(rows, n_out)`` float64) to every row.

    * numpy input: computed now;
    * dask input: a lazy dask array with one task per row chunk, and ``fn`` one key of
      the graph (nothing is computed; NaN or infinity in a chunk raises a
      ``ValueError`` naming it when computed);
    * xarray DataArray: a DataArray with dims ``(sample_dim, out_dim)`` keeping the
      sample coordinates, lazy when the input is dask-backed.

    ``token`` identifies the model, so equal models on equal inputs share task names.
    """
    X = view.data
    if isinstance(X, da.Array):
        # the model enters the graph once, as a key every chunk task depends on (a Nyström
        # model carries its landmarks: embedding it in each task would copy them per chunk)
        model = dask.delayed(fn, name=f"{name}-model-{token}", traverse=False)
        out = X.map_blocks(
            _apply_block, model,
            dtype=np.float64,
            chunks=(X.chunks[0], (n_out,)),
            meta=np.empty((0, n_out), dtype=np.float64),
            name=f"{name}-{tokenize(X.name, token)}",
        )
    else:
        out = fn(X)
    if view.dims is None:
        return out
    import xarray as xr

    src = view.source
    sdim = view.dims[0]
    coords = {k: v for k, v in src.coords.items() if set(v.dims) <= {sdim}}
    coords[out_dim] = np.arange(n_out)
    return xr.DataArray(out, dims=(sdim, out_dim), coords=coords, name=name)  # input attrs describe the input
