"""Checkpoints, written atomically, resumable: the step engine's state every N steps, the pass driver's every pass.

A checkpoint is bound to its fit twice over: by the fingerprint of the estimator and its
parameters (:func:`fit_fingerprint`), and by the fingerprint of every input it was fitted
on (:func:`~dsgd_dask.streams.fingerprint.data_fingerprint`: shape, dtype, row chunks
and a digest of sampled rows). A fit that differs in either is refused, with a message
that says which differs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dsgd_dask.engine.steps import StepState
from dsgd_dask.model.store import RemoteLocation, read_store, write_store
from dsgd_dask.streams.fingerprint import fingerprint_difference

_AFRESH = "to start afresh, delete it or choose another checkpoint path"


def fit_fingerprint(estimator_name: str, params: dict, data_shape: tuple | None = None) -> str:
    """What a checkpoint must agree on besides its inputs: estimator and parameters (and ``data_shape`` if given)."""
    parts = [estimator_name, params] if data_shape is None else [estimator_name, params, list(data_shape)]
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def fit_parameters(estimator_name: str, params: dict) -> dict:
    """The estimator and its parameters as saved with a checkpoint (JSON values), to name those that differ."""
    return json.loads(json.dumps({"estimator": estimator_name, "params": params}, sort_keys=True, default=str))


def _parameter_difference(saved: dict | None, current: dict | None) -> str:
    """The parameters that differ between ``saved`` and ``current`` (:func:`fit_parameters`), in words."""
    if not saved or not current:
        return "other parameters"
    if saved.get("estimator") != current.get("estimator"):
        return f"{saved.get('estimator')}, not {current.get('estimator')}"
    old, new = saved.get("params", {}), current.get("params", {})
    names = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if not names:
        return "other parameters"
    shown = ", ".join(f"{k}={old.get(k)!r}, not {new.get(k)!r}" for k in names[:4])
    return f"other parameters ({shown}{', ...' if len(names) > 4 else ''})"


def _check_inputs(path: Path, saved: dict, current: dict) -> None:
    """Refuse the checkpoint at ``path`` when its inputs (``saved``) are not this fit's (``current``)."""
    if sorted(saved) != sorted(current):
        raise ValueError(f"the checkpoint at {path} belongs to a different fit: it was written for inputs "
                         f"{', '.join(sorted(saved))}, not {', '.join(sorted(current))}; {_AFRESH}")
    for name in current:  # in the fit's order: X first
        difference = fingerprint_difference(saved[name], current[name])
        if difference is not None:
            raise ValueError(f"the checkpoint at {path} belongs to a different fit: it was written for a different "
                             f"{name} ({difference}); to resume it, fit on the data it was written for; {_AFRESH}")


def read_checkpoint(path: Path, fingerprint: str, driver: str | None, *, parameters: dict | None = None,
                    inputs: dict | None = None) -> tuple[dict, dict] | None:
    """``(attrs, arrays)`` of the checkpoint at ``path``, or ``None`` if there is none.

    Refused (``ValueError``, naming what differs) when it belongs to another fit: other
    estimator or parameters (``fingerprint``; ``parameters``, :func:`fit_parameters`,
    names those that differ), other data (``inputs``: the input fingerprints by name,
    ``None``: not checked), or not written by ``driver`` (``None``: the step engine;
    ``"passes"``: the pass driver). A checkpoint without input fingerprints is refused
    when ``inputs`` are given.
    """
    if isinstance(path, RemoteLocation):
        if path.state() == "empty":  # nothing, or only versions of saves that did not commit
            return None
    elif not path.exists() and not list(path.parent.glob(f".{path.name}.old-*")):
        return None
    attrs, arrays = read_store(path, "checkpoint")
    saved_parameters = attrs.get("parameters")
    if saved_parameters is not None and attrs.get("fingerprint") != fingerprint:
        raise ValueError(f"the checkpoint at {path} belongs to a different fit: it was written for "
                         f"{_parameter_difference(saved_parameters, parameters)}; {_AFRESH}")
    if attrs.get("driver") != driver:
        written, wanted = (("steps", "the pass driver") if driver else ("the pass driver", "steps"))
        raise ValueError(f"the checkpoint at {path} was written by {written}, not by {wanted}; {_AFRESH}")
    if inputs is not None and attrs.get("inputs") is None:
        raise ValueError(f"the checkpoint at {path} has no fingerprints of the data it was fitted on (it was "
                         f"written before checkpoints kept them), so it cannot be checked against this fit's "
                         f"data; {_AFRESH}")
    if attrs.get("fingerprint") != fingerprint:
        raise ValueError(f"the checkpoint at {path} belongs to a different fit: it was written for other "
                         f"parameters; {_AFRESH}")
    if inputs is not None:
        _check_inputs(path, attrs["inputs"], inputs)
    return attrs, arrays


def _identity(fingerprint: str, parameters: dict | None, inputs: dict | None) -> dict:
    """The attributes that bind a checkpoint to its fit (those given)."""
    attrs = {"fingerprint": fingerprint}
    if parameters is not None:
        attrs["parameters"] = parameters
    if inputs is not None:
        attrs["inputs"] = inputs
    return attrs


class Checkpointer:
    """Writes the loop state to ``path`` every ``every`` steps (at chunk-task boundaries).

    Parameters
    ----------
    path : str, Path or RemoteLocation
        Zarr group of the checkpoint (replaced atomically at each write), local or on an
        object store (:func:`~dsgd_dask.model.store.store_location`).
    every : int
        Steps between writes.
    fingerprint : str
        Identifies the fit (:func:`fit_fingerprint`); a checkpoint of another fit is refused.
    parameters : dict, optional
        The estimator and parameters behind ``fingerprint`` (:func:`fit_parameters`),
        saved to name those that differ when a checkpoint is refused.
    inputs : dict, optional
        The fingerprints of the fit's inputs by name (``{"X": ..., "y": ...}``,
        :func:`~dsgd_dask.streams.fingerprint.data_fingerprint`); a checkpoint of other
        data, or without input fingerprints, is refused. ``None``: not checked.

    Attributes
    ----------
    seed : int
        Root seed of the fit, stored so that a fit with ``random_state=None`` resumes with
        the same seed.
    """

    def __init__(self, path, every: int, fingerprint: str, *, parameters: dict | None = None,
                 inputs: dict | None = None):
        self.path = path if isinstance(path, RemoteLocation) else Path(path)
        self.every = int(every)
        self.fingerprint = fingerprint
        self.parameters = parameters
        self.inputs = inputs
        self.seed: int | None = None
        self.extra: dict = {}
        self._last = None

    def existing(self) -> tuple[int, StepState] | None:
        """``(seed, state)`` of an existing checkpoint of this fit, or ``None``."""
        found = read_checkpoint(self.path, self.fingerprint, None, parameters=self.parameters, inputs=self.inputs)
        if found is None:
            return None
        attrs, arrays = found
        n_sets = int(attrs.get("n_sets", 1))
        if n_sets == 1 and "coef" in arrays:
            coef = (arrays.pop("coef"),)
        else:
            coef = tuple(arrays.pop(f"coef_{i}") for i in range(n_sets))
        mean = tuple(arrays.pop(f"mean_{i}") for i in range(n_sets)) if "mean_0" in arrays else ()
        state = StepState(coef, int(attrs["step"]), float(attrs["eta_scale"]), mean, int(attrs.get("n_mean", 0)))
        self.extra = arrays
        self._last = state.step
        return int(attrs["seed"]), state

    def save(self, state: StepState, extra: dict | None = None) -> None:
        """Write ``state`` (and ``extra`` arrays, returned in :attr:`extra` on resume)."""
        attrs = {**_identity(self.fingerprint, self.parameters, self.inputs), "seed": self.seed, "step": state.step,
                 "eta_scale": state.eta_scale, "n_sets": len(state.coef), "n_mean": state.n_mean}
        coef = ({"coef": state.coef[0]} if len(state.coef) == 1 else
                {f"coef_{i}": c for i, c in enumerate(state.coef)})
        mean = {f"mean_{i}": m for i, m in enumerate(state.mean)}
        write_store(self.path, "checkpoint", attrs, {**(extra or {}), **coef, **mean}, overwrite=True)
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
    solver, on other data (``inputs``), or written by the step engine is refused.

    Parameters
    ----------
    path : str, Path or RemoteLocation
        Zarr group of the checkpoint (replaced at each write), local or on an object store.
    fingerprint : str
        Identifies the fit (:func:`fit_fingerprint`).
    parameters : dict, optional
        The estimator and parameters behind ``fingerprint`` (:func:`fit_parameters`).
    inputs : dict, optional
        The fingerprints of the fit's inputs by name (as for :class:`Checkpointer`).

    Attributes
    ----------
    seed : int or None
        Root seed of the fit, saved with the state so that a fit with
        ``random_state=None`` resumes with the same seed: set it before the first save;
        :meth:`load` sets it to the saved one.
    """

    DRIVER = "passes"

    def __init__(self, path, fingerprint: str, *, parameters: dict | None = None, inputs: dict | None = None):
        self.path = path if isinstance(path, RemoteLocation) else Path(path)
        self.fingerprint = fingerprint
        self.parameters = parameters
        self.inputs = inputs
        self.seed: int | None = None
        self._saved: SavedPasses | None = None
        self._read = False

    def load(self) -> SavedPasses | None:
        """The saved state of this fit, or ``None`` when there is no checkpoint (read once, then cached)."""
        if self._read:
            return self._saved
        found = read_checkpoint(self.path, self.fingerprint, self.DRIVER, parameters=self.parameters,
                                inputs=self.inputs)
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
        attrs = {**_identity(self.fingerprint, self.parameters, self.inputs), "seed": self.seed, "driver": self.DRIVER,
                 "solver": solver, "n_passes": int(n_passes), "n_iter": int(n_iter), "records": list(records),
                 "shapes": {k: list(a.shape) for k, a in arrays.items()}}
        write_store(self.path, "checkpoint", attrs, arrays, overwrite=True)
        self._saved = SavedPasses(solver, {k: a.copy() for k, a in arrays.items()}, int(n_passes), int(n_iter),
                                  list(records), self.seed)
        self._read = True
