"""Data-parallel steps: a mini-batch split over parts, partial sums reduced, one update.

Each part evaluates the current functions and the updated block's features on its
sub-batch where its rows live, and returns the rule's :class:`~dsgd_dask.rules.base.Sums`
(``O(m^2 + m k + k^2)`` numbers per function set); the sums are added in part order and
one update is applied. The parts of a step run sequentially here, or as tasks on the
workers that hold their chunks (:mod:`dsgd_dask.engine.distributed`): the same
arithmetic either way.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.engine.steps import (
    StepConfig,
    StepState,
    after_step,
    apply_updates,
    check_slab,
    evaluate_sets,
    step_target,
)
from dsgd_dask.rules.base import StepRule, Sums
from dsgd_dask.rules.kpca import step_size
from dsgd_dask.streams.batches import PartitionedTask


def part_sums(coef: tuple, slab: np.ndarray, rows: np.ndarray, target: int, features: tuple,
              rule: StepRule) -> Sums | None:
    """The sums of one part of a step's mini-batch: rows ``rows`` of ``slab`` (``None`` when empty)."""
    if len(rows) == 0:
        return None
    with one_blas_thread():
        X = slab[rows]
        h, z = evaluate_sets(features, coef, X, rule, target)
        return rule.sums(h, z, rule.extra(X), for_parts=True)


def reduce_parts(parts) -> Sums:
    """The parts' sums added in part order (the same sum on any cluster)."""
    total = None
    for sums in parts:
        if sums is not None:
            total = sums if total is None else total + sums
    if total is None:
        raise ValueError("a data-parallel step has no rows in any part")
    return total


def apply_sums(coef: tuple, total: Sums, t: int, eta_scale: float, features: tuple, rule: StepRule,
               cfg: StepConfig) -> tuple:
    """One update from the reduced sums of step ``t``; returns the new coefficients."""
    growing, target = step_target(coef, features, rule, cfg, t)
    updates = rule.updates(total, step_size(eta_scale, cfg.eta_decay, t), block=target)
    rule.check(updates, t, total)
    return apply_updates(coef, updates, features, rule, growing, target)


def run_partitioned(state: StepState, slabs: list, task: PartitionedTask, features: tuple, rule: StepRule,
                    cfg: StepConfig) -> StepState:
    """Run a partitioned task with all parts in this process (same results as on a cluster)."""
    slabs = [check_slab(s, part) for s, part in zip(slabs, task.parts, strict=True)]
    batches = task.part_batches([len(s) for s in slabs], cfg.batch_size)
    with one_blas_thread():
        for i in range(task.n_steps):
            t = task.first_step + i
            _, target = step_target(state.coef, features, rule, cfg, t)
            total = reduce_parts(part_sums(state.coef, slab, rows[i], target, features, rule)
                                 for slab, rows in zip(slabs, batches, strict=True))
            coef = apply_sums(state.coef, total, t, state.eta_scale, features, rule, cfg)
            state = after_step(state, coef, t, cfg)
    return replace(state, step=task.first_step + task.n_steps)
