"""Layer 2 - inputs (numpy, dask, Zarr, xarray) and seeded mini-batch plans."""

from dsgd_dask.streams.batches import ChunkTask, chunk_tasks, load_slab, sample_rows
from dsgd_dask.streams.inputs import DataView, as_view, check_finite_block, is_lazy_input

__all__ = [
    "ChunkTask",
    "DataView",
    "as_view",
    "check_finite_block",
    "chunk_tasks",
    "is_lazy_input",
    "load_slab",
    "sample_rows",
]
