"""One chunk task of update steps: a pure function ``state, slab -> state`` for any rule."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.model.expansion import evaluate_blocks
from dsgd_dask.rules.base import DivergenceError, StepRule, apply_update
from dsgd_dask.rules.kpca import step_size
from dsgd_dask.streams.batches import ChunkTask
from dsgd_dask.streams.inputs import check_finite_block

__all__ = ["DivergenceError", "StepConfig", "StepState", "after_step", "rule_step", "run_chunk"]


@dataclass(frozen=True)
class StepConfig:
    """What stays fixed during a fit of steps."""

    n_blocks: int  # feature budget in blocks (of every function set)
    batch_size: int
    eta_decay: float
    average_from: int | None = None  # the first step whose iterate enters the mean (None: no mean)


@dataclass(frozen=True)
class StepState:
    """What changes: the coefficients of every function set, the step count, the step scale, the mean."""

    coef: tuple  # one (n_active_blocks * block_size, k) float64 array per function set
    step: int
    eta_scale: float  # theta_0 / lambda_ref, halved on each divergence
    mean: tuple = ()  # the mean of the iterates since StepConfig.average_from, per set; () before it
    n_mean: int = 0  # the iterates in it

    def __post_init__(self):
        for name in ("coef", "mean"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, np.ndarray) else tuple(value))

    def copy(self) -> StepState:
        return replace(self, coef=tuple(c.copy() for c in self.coef), mean=tuple(m.copy() for m in self.mean))

    @property
    def model_coef(self) -> tuple:
        """The coefficients a model is made of: the mean of the iterates once it has begun, else the last iterate."""
        return self.mean if self.mean else self.coef


def after_step(state: StepState, coef: tuple, t: int, cfg: StepConfig) -> StepState:
    """The state after step ``t`` (counted from 0), whose update gave the iterate ``coef``.

    The iterates of steps ``cfg.average_from`` and later (counted from 1; none when it is
    ``None``) enter the mean, each with weight ``1 / n_mean``, in step order on any
    scheduler, so the mean is the same bit for bit wherever the steps run. A block added
    after the mean began counts as zero in the iterates before it.
    """
    step = t + 1
    if cfg.average_from is None or step < cfg.average_from:
        return StepState(coef, step, state.eta_scale, state.mean, state.n_mean)
    n = state.n_mean + 1
    if n == 1:
        return StepState(coef, step, state.eta_scale, tuple(c.copy() for c in coef), 1)
    mean = []
    for m, c in zip(state.mean, coef, strict=True):
        if m.shape[0] < c.shape[0]:
            m = np.concatenate([m, np.zeros((c.shape[0] - m.shape[0], m.shape[1]))])
        mean.append(m + (c - m) / n)
    return StepState(coef, step, state.eta_scale, mean, n)


def run_with_restarts(run, state: StepState, first_step: int, max_restarts: int) -> StepState:
    """``run(state)``, re-run from ``state`` with half the step size while it diverges (with a warning)."""
    for _ in range(max_restarts):
        try:
            return run(state)
        except DivergenceError as err:
            state = replace(state, eta_scale=state.eta_scale / 2)
            warnings.warn(f"{err}; retrying from step {first_step} with half the step size",
                          RuntimeWarning, stacklevel=3)
    raise RuntimeError(f"the updates kept diverging after {max_restarts} step-size halvings; "
                       "check the data scale and lower eta0")


def target_block(n_active: int, n_blocks: int, t: int) -> tuple[bool, int]:
    """Whether step ``t`` adds a block (features still growing), and which block it updates."""
    if n_active < n_blocks:
        return True, n_active
    return False, t % n_active


def step_target(coef: tuple, features: tuple, rule: StepRule, cfg: StepConfig, t: int) -> tuple[bool, int]:
    """:func:`target_block` for the function sets of ``rule`` (all have the same number of blocks)."""
    m = features[rule.set_views[0]].block_size
    return target_block(coef[0].shape[0] // m, cfg.n_blocks, t)


def check_slab(slab, task: ChunkTask) -> np.ndarray:
    """A task's rows as one array, checked for NaN/infinity (naming the chunk)."""
    if isinstance(slab, list | tuple):
        for c, part in zip(task.chunks, slab, strict=True):
            check_finite_block(part, f"chunk {c}")
        return slab[0] if len(slab) == 1 else np.concatenate(slab)
    check_finite_block(slab, f"chunk {task.chunks[0]}" if len(task.chunks) == 1 else
                       f"chunks {task.chunks}" if task.chunks else f"rows of epoch {task.epoch}")
    return slab


def evaluate_sets(features: tuple, coef: tuple, slab: np.ndarray, rule: StepRule, target: int):
    """Per function set, its functions ``h`` on the rows and the features ``z`` of block ``target``."""
    hs, zs = [], []
    for i, view in enumerate(rule.set_views):
        h, z = evaluate_blocks(features[view], coef[i], rule.rows(slab, i), keep_block=target)
        hs.append(h)
        zs.append(z)
    return tuple(hs), tuple(zs)


def apply_updates(coef: tuple, updates, features: tuple, rule: StepRule, growing: bool, target: int) -> tuple:
    return tuple(apply_update(c, up, target, growing, features[view].block_size)
                 for c, up, view in zip(coef, updates, rule.set_views, strict=True))


def rule_step(coef: tuple, X: np.ndarray, t: int, eta_scale: float, features: tuple, rule: StepRule,
              cfg: StepConfig) -> tuple:
    """Apply step ``t`` of ``rule`` on the mini-batch ``X``; returns the new coefficients.

    Raises :class:`DivergenceError` when the updated functions explode on the batch
    (checked exactly on its rows).
    """
    growing, target = step_target(coef, features, rule, cfg, t)
    h, z = evaluate_sets(features, coef, X, rule, target)
    total = rule.sums(h, z, rule.extra(X), for_parts=False)
    updates = rule.updates(total, step_size(eta_scale, cfg.eta_decay, t), block=target)
    rule.check(updates, t, total, local=(h, z))
    return apply_updates(coef, updates, features, rule, growing, target)


def run_chunk(state: StepState, slab: np.ndarray, task: ChunkTask, features: tuple, rule: StepRule,
              cfg: StepConfig) -> StepState:
    """Run the steps of ``task`` on its rows ``slab``; the input state is not modified."""
    slab = check_slab(slab, task)
    with one_blas_thread():
        for i, rows in enumerate(task.batches(slab.shape[0], cfg.batch_size)):
            t = task.first_step + i
            coef = rule_step(state.coef, slab[rows], t, state.eta_scale, features, rule, cfg)
            state = after_step(state, coef, t, cfg)
    return replace(state, step=task.first_step + task.n_steps)
