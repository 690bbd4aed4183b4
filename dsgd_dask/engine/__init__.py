"""Layer 4 - the update loop: chunk tasks of steps, prefetch, divergence guard."""

from dsgd_dask.engine.loop import Progress, run_plan
from dsgd_dask.engine.steps import DivergenceError, KPCAConfig, KPCAState, kpca_step, run_chunk

__all__ = ["DivergenceError", "KPCAConfig", "KPCAState", "Progress", "kpca_step", "run_chunk", "run_plan"]
