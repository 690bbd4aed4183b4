"""Layer 4 - the update loop: chunk tasks of steps for any rule, prefetch, divergence guard."""

from dsgd_dask.engine.loop import run_plan
from dsgd_dask.engine.steps import DivergenceError, StepConfig, StepState, rule_step, run_chunk

__all__ = ["DivergenceError", "StepConfig", "StepState", "rule_step", "run_chunk", "run_plan"]
