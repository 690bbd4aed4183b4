"""Data-parallel steps: a mini-batch split over parts, partial sums reduced, one update.

Each part evaluates the current functions and the updated block's features on its
sub-batch where its rows live, and returns :class:`~dsgd_dask.rules.StepSums`
(``O(m^2 + m k + k^2)`` numbers); the sums are added in part order and one update is
applied. The parts of a step run sequentially here, or as tasks on the workers that
hold their chunks (:mod:`dsgd_dask.engine.distributed`): the same arithmetic either way.
"""

from __future__ import annotations

import numpy as np

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.engine.steps import DivergenceError, KPCAConfig, KPCAState, check_slab, target_block
from dsgd_dask.model.expansion import evaluate_blocks
from dsgd_dask.rules.kpca import apply_update, shrink_matrix, step_size
from dsgd_dask.rules.statistics import StepSums, moments, updated_variances
from dsgd_dask.streams.batches import PartitionedTask


def part_sums(coef: np.ndarray, slab: np.ndarray, rows: np.ndarray, target: int, features) -> StepSums:
    """The sums of one part of step's mini-batch: rows ``rows`` of ``slab``."""
    if len(rows) == 0:
        return StepSums.empty(features.block_size, coef.shape[1])
    with one_blas_thread():
        h, z = evaluate_blocks(features, coef, slab[rows], keep_block=target)
        return StepSums.of(h, z)


def apply_sums(coef: np.ndarray, total: StepSums, t: int, eta_scale: float, features,
               cfg: KPCAConfig) -> np.ndarray:
    """One update from the reduced sums of step ``t``; returns the new coefficients."""
    m = features.block_size
    growing, target = target_block(coef.shape[0] // m, cfg.n_blocks, t)
    C, g, Czz = moments(total, cfg.center)
    eta = step_size(eta_scale, cfg.eta_decay, t)
    shrink = shrink_matrix(C, eta, cfg.ordered)
    top = float(updated_variances(C, g, Czz, shrink, eta).max())
    if not (np.isfinite(top) and np.isfinite(g).all()) or top > cfg.guard_limit:
        raise DivergenceError(f"update step {t} diverged (largest component variance {top:.3g})")
    if growing:
        return np.concatenate([coef @ shrink, eta * g])
    coef = coef.copy()
    apply_update(coef, slice(target * m, (target + 1) * m), g, shrink, eta)
    return coef


def run_partitioned(state: KPCAState, slabs: list, task: PartitionedTask, features, cfg: KPCAConfig) -> KPCAState:
    """Run a partitioned task with all parts in this process (same results as on a cluster)."""
    slabs = [check_slab(s, part) for s, part in zip(slabs, task.parts, strict=True)]
    batches = task.part_batches([len(s) for s in slabs], cfg.batch_size)
    coef = state.coef
    m = features.block_size
    with one_blas_thread():
        for i in range(task.n_steps):
            t = task.first_step + i
            _, target = target_block(coef.shape[0] // m, cfg.n_blocks, t)
            total = StepSums.empty(m, coef.shape[1])
            for slab, rows in zip(slabs, batches, strict=True):
                total = total + part_sums(coef, slab, rows[i], target, features)
            coef = apply_sums(coef, total, t, state.eta_scale, features, cfg)
    return KPCAState(coef, task.first_step + task.n_steps, state.eta_scale)
