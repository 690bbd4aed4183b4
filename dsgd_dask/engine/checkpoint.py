"""Checkpoints, written atomically, resumable: the step engine's state every N steps, the pass driver's every pass."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dsgd_dask.engine.steps import StepState
from dsgd_dask.model.store import read_store, write_store


def fit_fingerprint(estimator_name: str, params: dict, data_shape: tuple) -> str:
    """What a checkpoint must agree on to be resumed: estimator, parameters, data shape."""
    blob = json.dumps([estimator_name, params, list(data_shape)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def read_checkpoint(path: Path, fingerprint: str, driver: str | None) -> tuple[dict, dict] | None:
    """``(attrs, arrays)`` of the checkpoint at ``path``, or ``None`` if there is none.

    Refused (``ValueError``) when it belongs to another fit (``fingerprint``), or was not
    written by ``driver`` (``None``: the step engine; ``"passes"``: the pass driver).
    """
    if not path.exists() and not list(path.parent.glob(f".{path.name}.old-*")):
        return None
    attrs, arrays = read_store(path, "checkpoint")
    if attrs.get("fingerprint") != fingerprint:
        raise ValueError(f"the checkpoint at {path} belongs to a different fit (other parameters or data); "
                         "delete it or choose another checkpoint path")
    if attrs.get("driver") != driver:
        written, wanted = (("steps", "the pass driver") if driver else ("the pass driver", "steps"))
        raise ValueError(f"the checkpoint at {path} was written by {written}, not by {wanted}; delete it or choose "
                         "another checkpoint path")
    return attrs, arrays


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
        found = read_checkpoint(self.path, self.fingerprint, None)
        if found is None:
            return None
        attrs, arrays = found
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


@dataclass
class SavedPasses:
    """What :class:`PassCheckpoint` keeps: the solver's state after a pass and the driver's counters."""

    solver: str
    state: dict
    n_passes: int
    n_iter: int
    records: list = field(default_factory=list)
    seed: int | None = None


class PassCheckpoint:
    """The pass driver's checkpoint: a solver's state after a pass, its counters and records (one Zarr group).

    Written atomically after every pass (a crash never leaves a checkpoint that loads
    wrong); the state's arrays come back bit for bit, so a resumed fit ends where an
    uninterrupted one does. A checkpoint of another fit (another fingerprint), of another
    solver, or written by the step engine is refused.

    Parameters
    ----------
    path : str or Path
        Zarr group of the checkpoint (replaced at each write).
    fingerprint : str
        Identifies the fit (:func:`fit_fingerprint`).

    Attributes
    ----------
    seed : int or None
        Root seed of the fit, saved with the state so that a fit with
        ``random_state=None`` resumes with the same seed: set it before the first save;
        :meth:`load` sets it to the saved one.
    """

    DRIVER = "passes"

    def __init__(self, path, fingerprint: str):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.seed: int | None = None
        self._saved: SavedPasses | None = None
        self._read = False

    def load(self) -> SavedPasses | None:
        """The saved state of this fit, or ``None`` when there is no checkpoint (read once, then cached)."""
        if self._read:
            return self._saved
        found = read_checkpoint(self.path, self.fingerprint, self.DRIVER)
        self._read = True
        if found is None:
            return None
        attrs, arrays = found
        shapes = attrs["shapes"]
        state = {name: arrays[name].reshape(shapes[name]) for name in shapes}
        seed = attrs.get("seed")
        self._saved = SavedPasses(attrs["solver"], state, int(attrs["n_passes"]), int(attrs["n_iter"]),
                                  list(attrs.get("records", [])), None if seed is None else int(seed))
        self.seed = self._saved.seed
        self._read = True
        return self._saved

    def save(self, solver: str, state: dict, n_passes: int, n_iter: int, records: list) -> None:
        """Write the state after ``n_passes`` passes (``n_iter`` of them iterations) and the records so far."""
        arrays = {str(k): np.asarray(v) for k, v in state.items()}
        attrs = {"fingerprint": self.fingerprint, "seed": self.seed, "driver": self.DRIVER, "solver": solver,
                 "n_passes": int(n_passes), "n_iter": int(n_iter), "records": list(records),
                 "shapes": {k: list(a.shape) for k, a in arrays.items()}}
        write_store(self.path, "checkpoint", attrs, arrays, overwrite=True)
        self._saved = SavedPasses(solver, {k: a.copy() for k, a in arrays.items()}, int(n_passes), int(n_iter),
                                  list(records), self.seed)
        self._read = True
