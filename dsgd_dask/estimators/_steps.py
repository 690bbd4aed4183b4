"""What every estimator fitted by doubly stochastic steps shares: checkpoints, the run of steps, persistence.

An estimator supplies its rule (:mod:`dsgd_dask.rules`), its feature sets (one per
input view) and its finalisation; this base runs the steps on the engine, saves and
resumes checkpoints, and writes and reads saved models. Estimator classes register
themselves with :func:`register`, so :func:`dsgd_dask.load` finds any of them by name.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import nullcontext

import numpy as np

from dsgd_dask.engine.checkpoint import Checkpointer, PassCheckpoint, fit_fingerprint, fit_parameters
from dsgd_dask.engine.loop import run_plan
from dsgd_dask.estimators._base import RandomFeatureEstimatorMixin
from dsgd_dask.estimators._solvers import Clock, record
from dsgd_dask.features.blocks import FourierPairs, RandomFeatures
from dsgd_dask.features.kernels import KernelSpec
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.model.store import StoreError, store_location, write_store
from dsgd_dask.progress import step_bar
from dsgd_dask.streams.batches import chunk_tasks, skip_done
from dsgd_dask.streams.fingerprint import data_fingerprint

#: Saved-model classes by name (see :func:`register`).
REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make ``cls`` loadable by :func:`dsgd_dask.load` under its name."""
    REGISTRY[cls.__name__] = cls
    return cls


def model_fingerprint(model: KernelExpansion) -> str:
    """A digest of a fitted expansion: its features' definition, landmarks, whitening and coefficients."""
    f = model.features
    h = hashlib.sha1(repr(sorted(f.to_dict().items())).encode())
    for arr in (model.coef, model.offset, f.center, getattr(f, "landmarks", None), getattr(f, "normalization", None)):
        if arr is not None:
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def features_payload(features, prefix: str = "") -> tuple[dict, dict]:
    """The attributes and arrays that define a feature set (seeds for Fourier, landmarks for Nyström)."""
    arrays = {}
    if features.center is not None:
        arrays[prefix + "center"] = features.center
    if isinstance(features, NystroemFeatures):
        arrays[prefix + "landmarks"] = features.landmarks
        if features.whiten:
            arrays[prefix + "normalization"] = features.normalization
    return features.to_dict(), arrays


def features_from_payload(fd: dict, arrays: dict, prefix: str = "", cache_bytes=None):
    """The feature set saved by :func:`features_payload`."""
    spec = KernelSpec(**fd["kernel"])
    kind = fd.get("kind", "fourier")
    if kind == "nystroem":
        whiten = bool(fd.get("whiten", True))
        if prefix + "landmarks" not in arrays or (whiten and prefix + "normalization" not in arrays):
            raise StoreError("the model store has Nyström features but no landmarks or whitening arrays")
        return NystroemFeatures(spec, arrays[prefix + "landmarks"], fd["block_size"], fd["seed"], fd["dtype"],
                                center=arrays.get(prefix + "center"),
                                normalization=arrays[prefix + "normalization"] if whiten else None, whiten=whiten)
    if kind in ("fourier", "fourier_pairs"):
        cls = FourierPairs if kind == "fourier_pairs" else RandomFeatures
        return cls(spec, fd["n_features_in"], fd["block_size"], fd["seed"], fd["dtype"],
                   center=arrays.get(prefix + "center"), cache_bytes=cache_bytes)
    raise StoreError(f"the model store has features of unknown kind {kind!r}")


class StepEstimatorMixin(RandomFeatureEstimatorMixin):
    """Checkpoints, runs of steps and saved models for the estimators fitted on the step engine.

    Expects, besides the parameters of :class:`RandomFeatureEstimatorMixin`,
    ``checkpoint``, ``checkpoint_every``, ``verbose`` and ``random_state``, and after
    initialisation the attributes ``_features`` (feature sets, one per input view),
    ``_rule``, ``_config``, ``_params``, ``seed_`` and ``state_``.
    """

    def _checkpoint_identity(self, inputs: dict) -> dict:
        """What a checkpoint of this fit must agree on, as keyword arguments of a checkpointer.

        ``fingerprint`` and ``parameters``: the class and its parameters (not ``verbose``
        nor ``checkpoint_every``); ``inputs``: the fingerprint of each input view
        (``{"X": view, ...}``: shape, dtype, row chunks and a digest of sampled rows).
        """
        params = {k: v for k, v in self.get_params().items() if k not in ("verbose", "checkpoint_every")}
        if not (params["random_state"] is None or isinstance(params["random_state"], int | np.integer)):
            raise ValueError("checkpointing needs random_state to be None or an int, so a resumed fit "
                             "regenerates the same features")
        name = type(self).__name__
        return {"fingerprint": fit_fingerprint(name, params), "parameters": fit_parameters(name, params),
                "inputs": {what: data_fingerprint(view) for what, view in inputs.items()}}

    def _checkpointer(self, inputs: dict) -> tuple[Checkpointer | None, tuple | None]:
        """The checkpointer of this fit on ``inputs`` (``{"X": view, ...}``) and ``(seed, state)`` of its checkpoint."""
        if self.checkpoint is None:
            return None, None
        every = int(self.checkpoint_every)
        location = store_location(self.checkpoint, what="checkpoint")
        ckpt = Checkpointer(location, every, **self._checkpoint_identity(inputs))
        return ckpt, ckpt.existing()

    def _average_from(self, batch_size: int) -> int | None:
        """The first step whose iterate enters the mean of ``average`` (``None``: no mean).

        ``True`` (or 1): the first step; an integer ``r``: the first step at whose end the
        rows seen, ``steps * batch_size``, reach ``r``; ``False`` (or 0): none.
        """
        rows = int(self.average)
        return None if rows <= 0 else max(1, -(-rows // int(batch_size)))

    def _pass_checkpoint(self, inputs: dict) -> PassCheckpoint | None:
        """The pass driver's checkpoint of this fit on ``inputs`` (``{"X": view, ...}``), ``None`` without one.

        Use: ``ckpt = self._pass_checkpoint({"X": view})``; ``saved = ckpt.load()`` before
        initialising (``saved.seed`` is the seed of the fit being resumed, ``None`` when
        there is no checkpoint); then set ``ckpt.seed = self.seed_`` and hand ``ckpt`` to
        :func:`~dsgd_dask.engine.driver.run_passes`. The fingerprint is that of the step
        engine's checkpoints (:meth:`_checkpointer`); which of the two wrote a checkpoint is
        saved with it, and the other refuses it.
        """
        if self.checkpoint is None:
            return None
        return PassCheckpoint(store_location(self.checkpoint, what="checkpoint"), **self._checkpoint_identity(inputs))

    def _run_steps(self, view, n_steps: int, epoch_offset: int, callback=None, checkpointer=None) -> None:
        """Run steps ``[step0, step0 + n_steps)`` of the plan that starts at ``self.state_.step``.

        With a checkpointer, the plan starts at step 0 and the steps the (resumed) state
        has already taken are skipped. ``callback(step, models)`` gets the raw expansions
        of the function sets (one expansion when there is one set): of the mean of the
        iterates once ``average`` has begun it, else of the last iterate.
        """
        p = self._params
        state = self.state_
        step0 = 0 if checkpointer is not None else state.step
        tasks = chunk_tasks(view, p["batch_size"], self.seed_, step0, n_steps, epoch_offset=epoch_offset,
                            shuffle_chunks=p["shuffle_chunks"], partitions=p["n_partitions"])
        if state.step > step0:
            tasks = skip_done(tasks, state.step)
        features = self._feature_sets()

        def on_state(st):
            if checkpointer is not None:
                checkpointer.maybe_save(st)
            if callback is not None:
                models = [KernelExpansion(features[v], c, self._set_offset(i))
                          for i, (v, c) in enumerate(zip(self._rule.set_views, st.model_coef, strict=True))]
                callback(st.step, models[0] if len(models) == 1 else tuple(models))

        def due(step):
            return callback is not None or (checkpointer is not None and checkpointer.due(step))

        bar = step_bar(n_steps, p["batch_size"], done=state.step - step0) if self.verbose else nullcontext()
        clock = Clock()
        if not hasattr(self, "convergence_"):
            self.convergence_ = []
        taken = [state.step]

        def progress_and_record(steps: int) -> None:
            # one record per chunk task of steps, at its last step
            taken[0] += steps
            self.convergence_.append(record(taken[0], taken[0] * p["batch_size"], clock(), None))
            if progress is not None:
                progress(steps)

        with bar as progress:
            self.state_ = run_plan(state, view, tasks, features, self._rule, self._config, progress_and_record,
                                   on_state, due)
        if checkpointer is not None:
            checkpointer.save(self.state_)
        self.n_iter_ = self.state_.step
        self._n_calls = getattr(self, "_n_calls", 0) + 1  # runs of steps: the epoch offset of the next one

    def _set_offset(self, i: int) -> np.ndarray | None:
        """The offset of function set ``i`` in the callback's raw expansions (``None``: none)."""
        return None

    def _feature_sets(self) -> tuple:
        f = self._features
        return f if isinstance(f, tuple) else (f,)

    # -- persistence -------------------------------------------------------------------
    def save(self, path, overwrite: bool = False, *, storage_options=None):
        """Save the fitted model as a Zarr group (feature definitions, coefficient blocks, parameters).

        The store is written atomically, and its attributes and arrays are verified by
        checksums when read back with :func:`dsgd_dask.load`, in any process or on any worker
        that can reach ``path``; a process loading it while it is replaced gets the old
        model or the new one.

        Parameters
        ----------
        path : str, os.PathLike or URL
            Directory of the new Zarr group. On a local (or network-mounted) filesystem
            (a path or a ``file://`` URL) a temporary directory is renamed into place. Any
            other fsspec URL (``s3://``, ``gs://``, ``memory://``...) is written on its
            object store: the arrays under a fresh prefix, then a commit record that names
            them, last; the previous model stays loadable until it lands.
        overwrite : bool, default=False
            Replace an existing store at ``path``.
        storage_options : dict, optional
            Options of the fsspec filesystem of a URL (``endpoint_url``, ``key``,
            ``secret``... for ``s3://``); ``None``: the filesystem's defaults (for
            ``s3://``, credentials from the environment). Not stored.

        Returns
        -------
        path : Path or RemoteLocation
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, ["state_", "n_iter_"])
        attrs, arrays = self._fitted_payload()
        return write_store(path, "model", attrs, arrays, overwrite=overwrite, storage_options=storage_options)

    def _params_payload(self) -> dict:
        params = self.get_params()
        if not (params["random_state"] is None or isinstance(params["random_state"], int | np.integer)):
            params["random_state"] = None  # a generator object: the model is defined by seed_
        if isinstance(params.get("checkpoint"), os.PathLike):
            params["checkpoint"] = os.fspath(params["checkpoint"])
        return params

    def _input_payload(self) -> dict:
        coords = None
        if getattr(self, "feature_coords_", None) is not None:
            fc = np.asarray(self.feature_coords_)
            coords = {"values": fc.astype(str).tolist(), "dtype": fc.dtype.str}
        return {"n_features_in_": self.n_features_in_,
                "feature_names_in_": list(getattr(self, "feature_names_in_", [])) or None,
                "feature_dim_": getattr(self, "feature_dim_", None), "feature_coords_": coords}

    def _restore_input(self, fitted: dict) -> None:
        self.n_features_in_ = fitted["n_features_in_"]
        self.feature_dim_ = fitted["feature_dim_"]
        if fitted["feature_names_in_"]:
            self.feature_names_in_ = np.asarray(fitted["feature_names_in_"], dtype=object)
        coords = fitted["feature_coords_"]
        self.feature_coords_ = None if coords is None else np.asarray(coords["values"]).astype(coords["dtype"])
