"""Layer 6 - lazy transforms: map_blocks over row chunks, xarray labels kept."""

from dsgd_dask.transform.lazy import apply_rows

__all__ = ["apply_rows"]
