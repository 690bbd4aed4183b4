"""Checkpoints of the update loop: the state every N steps, written atomically, resumable."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from dsgd_dask.engine.steps import StepState
from dsgd_dask.model.store import read_store, write_store


def fit_fingerprint(estimator_name: str, params: dict, data_shape: tuple) -> str:
    """What a checkpoint must agree on to be resumed: estimator, parameters, data shape."""
    blob = json.dumps([estimator_name, params, list(data_shape)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class Checkpointer:
    """Writes the loop state to ``path`` every ``every`` steps (at chunk-task boundaries).

    Parameters
    ----------
    path : str or Path
        Zarr group of the checkpoint (replaced atomically at each write).
    every : int
        Steps between writes.
    fingerprint : str
        Identifies the fit; a checkpoint of another fit is refused.
    seed : int
        Root seed of the fit, stored so that a fit with ``random_state=None`` resumes with
        the same seed.
    """

    def __init__(self, path, every: int, fingerprint: str):
        self.path = Path(path)
        self.every = int(every)
        self.fingerprint = fingerprint
        self.seed: int | None = None
        self.extra: dict = {}
        self._last = None

    def existing(self) -> tuple[int, StepState] | None:
        """``(seed, state)`` of an existing checkpoint of this fit, or ``None``."""
        if not self.path.exists() and not list(self.path.parent.glob(f".{self.path.name}.old-*")):
            return None
        attrs, arrays = read_store(self.path, "checkpoint")
        if attrs.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"the checkpoint at {self.path} belongs to a different fit (other parameters or data); "
                "delete it or choose another checkpoint path"
            )
        n_sets = int(attrs.get("n_sets", 1))
        if n_sets == 1 and "coef" in arrays:
            coef = (arrays.pop("coef"),)
        else:
            coef = tuple(arrays.pop(f"coef_{i}") for i in range(n_sets))
        state = StepState(coef, int(attrs["step"]), float(attrs["eta_scale"]))
        self.extra = arrays
        self._last = state.step
        return int(attrs["seed"]), state

    def save(self, state: StepState, extra: dict | None = None) -> None:
        """Write ``state`` (and ``extra`` arrays, returned in :attr:`extra` on resume)."""
        attrs = {"fingerprint": self.fingerprint, "seed": self.seed, "step": state.step,
                 "eta_scale": state.eta_scale, "n_sets": len(state.coef)}
        coef = ({"coef": state.coef[0]} if len(state.coef) == 1 else
                {f"coef_{i}": c for i, c in enumerate(state.coef)})
        write_store(self.path, "checkpoint", attrs, {**(extra or {}), **coef}, overwrite=True)
        self._last = state.step

    def due(self, step: int) -> bool:
        """Whether a state after step ``step`` is to be saved."""
        return self._last is None or step - self._last >= self.every

    def maybe_save(self, state: StepState) -> None:
        if self.due(state.step):
            self.save(state)
