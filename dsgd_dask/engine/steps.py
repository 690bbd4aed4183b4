"""One chunk task of update steps: a pure function ``state, slab -> state``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.model.expansion import evaluate_blocks
from dsgd_dask.rules.kpca import apply_update, batch_statistics, shrink_matrix, step_size
from dsgd_dask.streams.batches import ChunkTask
from dsgd_dask.streams.inputs import check_finite_block


class DivergenceError(FloatingPointError):
    """An update produced non-finite or exploding statistics."""


@dataclass(frozen=True)
class KPCAConfig:
    """What stays fixed during a fit."""

    n_blocks: int  # feature budget in blocks
    batch_size: int
    eta_decay: float
    center: bool
    ordered: bool
    guard_limit: float  # largest allowed diagonal of C before the step counts as diverged


@dataclass(frozen=True)
class KPCAState:
    """What changes: coefficients of the active blocks, the step count, the step scale."""

    coef: np.ndarray  # (n_active_blocks * block_size, k), float64
    step: int
    eta_scale: float  # theta_0 / lambda_ref, halved on each divergence

    def copy(self) -> KPCAState:
        return replace(self, coef=self.coef.copy())


def run_with_restarts(run, state: KPCAState, first_step: int, max_restarts: int) -> KPCAState:
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


def check_slab(slab, task: ChunkTask) -> np.ndarray:
    """A task's rows as one array, checked for NaN/infinity (naming the chunk)."""
    if isinstance(slab, list | tuple):
        for c, part in zip(task.chunks, slab, strict=True):
            check_finite_block(part, f"chunk {c}")
        return slab[0] if len(slab) == 1 else np.concatenate(slab)
    check_finite_block(slab, f"chunk {task.chunks[0]}" if len(task.chunks) == 1 else
                       f"chunks {task.chunks}" if task.chunks else f"rows of epoch {task.epoch}")
    return slab


def kpca_step(coef: np.ndarray, X: np.ndarray, t: int, eta_scale: float,
              features: RandomFeatures, cfg: KPCAConfig) -> np.ndarray:
    """Apply step ``t`` on the mini-batch ``X``; returns the new coefficients.

    Raises :class:`DivergenceError` when the updated functions explode on the batch
    (checked exactly and cheaply: ``h_new = h S + eta z g`` with ``S`` the shrink).
    """
    m = features.block_size
    growing, target = target_block(coef.shape[0] // m, cfg.n_blocks, t)
    h, z = evaluate_blocks(features, coef, X, keep_block=target)
    C, g = batch_statistics(h, z, cfg.center)
    eta = step_size(eta_scale, cfg.eta_decay, t)
    shrink = shrink_matrix(C, eta, cfg.ordered)
    h_new = h @ shrink + eta * (z @ g.astype(z.dtype))
    if cfg.center:
        h_new -= h_new.mean(axis=0)
    top = float(np.einsum("ij,ij->j", h_new, h_new).max()) / max(len(h_new), 1)
    if not (np.isfinite(top) and np.isfinite(g).all()) or top > cfg.guard_limit:
        raise DivergenceError(f"update step {t} diverged (largest component variance {top:.3g})")
    if growing:
        return np.concatenate([coef @ shrink, eta * g])
    apply_update(coef, slice(target * m, (target + 1) * m), g, shrink, eta)
    return coef


def run_chunk(state: KPCAState, slab: np.ndarray, task: ChunkTask, features: RandomFeatures,
              cfg: KPCAConfig) -> KPCAState:
    """Run the steps of ``task`` on its rows ``slab``; the input state is not modified."""
    slab = check_slab(slab, task)
    coef = state.coef.copy()
    with one_blas_thread():
        for i, rows in enumerate(task.batches(slab.shape[0], cfg.batch_size)):
            coef = kpca_step(coef, slab[rows], task.first_step + i, state.eta_scale, features, cfg)
    return KPCAState(coef, task.first_step + task.n_steps, state.eta_scale)
