"""Data shared by the comparisons: full datasets from the data home, or the packaged subsets for ``--quick``."""

from __future__ import annotations

import numpy as np


def load(name: str, subset: str, ctx):
    """``(X, y)`` of a dataset: the packaged real subset when ``ctx.quick``, else the full file."""
    from dsgd_dask import datasets

    loader = getattr(datasets, f"load_{name}")
    if ctx.quick:
        return loader(subset, sample=True)
    try:
        return loader(subset, data_home=ctx.data_home)
    except FileNotFoundError as err:
        raise SystemExit(f"{err}\n(`--quick` runs on the subsets shipped with the package)") from err


def centred(F: np.ndarray) -> np.ndarray:
    return F - F.mean(axis=0)


def orthonormal_columns(F: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the column span of ``F`` (thin QR)."""
    return np.linalg.qr(np.asarray(F, dtype=np.float64))[0]
