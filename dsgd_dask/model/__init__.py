"""Layer 5 - the fitted model: seeds, coefficient blocks, evaluation (save/load later)."""

from dsgd_dask.model.expansion import KernelExpansion, evaluate_blocks

__all__ = ["KernelExpansion", "evaluate_blocks"]
