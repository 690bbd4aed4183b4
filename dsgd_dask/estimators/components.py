"""The shared machinery of the estimators fitted by steps on one or two views (SVD, CCA, SIR, the machines).

Each view has its own kernel, bandwidth and feature blocks; the views are stacked
column-wise into one row-aligned input (:func:`~dsgd_dask.streams.inputs.stacked_view`)
so the engine's chunk tasks, samples and data-parallel parts read matching rows of all.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.engine.ridge import JointNystroemBlocks
from dsgd_dask.engine.steps import StepConfig, StepState
from dsgd_dask.estimators._base import kernel_spec
from dsgd_dask.estimators._solvers import renamed
from dsgd_dask.estimators._steps import (
    StepEstimatorMixin,
    features_from_payload,
    features_payload,
    model_fingerprint,
)
from dsgd_dask.features.blocks import FourierPairs, RandomFeatures
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.model.store import StoreError, write_store
from dsgd_dask.streams.batches import landmark_rows, sample_rows, view_seed
from dsgd_dask.streams.inputs import DataView, check_finite_block, stacked_view
from dsgd_dask.transform.lazy import apply_rows

#: Rows of the seeded sample (from every chunk) for bandwidths, the initial solve and the
#: final rotation and statistics.
N_SAMPLE = 10_000
#: Rows of that sample in the initial solve on the first block of each view.
N_INIT = 2_000
#: A step whose largest function variance exceeds this many times ``max(1, lambda_1)``
#: counts as diverged (at the fixed points the variances are at most ``max(1, lambda_1)``).
GUARD_FACTOR = 10.0
#: Default block sizes: Nyström blocks of landmark rows, Fourier blocks of the paper.
NYSTROEM_BLOCK = 1024
FOURIER_BLOCK = 256
#: Largest Nyström budget the steps take in several blocks: they whiten the landmarks
#: together (:class:`~dsgd_dask.engine.ridge.JointNystroemBlocks`) so that they minimise the
#: objective of the other solvers, by one eigendecomposition of ``M x M`` (about a minute on
#: two cores, ``3 M^2`` float64 of memory while it runs, 1.5 GiB at the limit).
JOINT_STEPS_MAX_FEATURES = 8192


def equal_blocks(budget: int, default: int) -> tuple[int, int] | None:
    """``(block_size, n_blocks)``: ``budget`` in the fewest equal blocks of ``default / 2`` to ``default``.

    One block when ``budget <= default``; ``None`` when no such split exists.
    """
    if budget <= default:
        return budget, 1
    for n_blocks in range(-(-budget // default), 2 * budget // default + 1):
        if budget % n_blocks == 0:
            return budget // n_blocks, n_blocks
    return None


def feature_blocks(n_samples: int, kind: str, n_features, block_size) -> tuple[int, int]:
    """``(block_size, n_blocks)`` of a feature budget: exactly ``n_features`` when it is an integer.

    ``n_features="auto"``: ``min(4096, max(1024, 2 n))`` in whole blocks of ``block_size``
    (Nyström: at most the ``n`` rows). An integer budget is met exactly or refused with a
    ``ValueError`` naming valid budgets: it must be a multiple of an integer
    ``block_size``, or split into the fewest equal blocks of half the default size to the
    default size when ``block_size="auto"`` (512 to 1024 Nyström landmarks, 128 to 256
    Fourier features; one block up to the default), and hold at most ``n`` Nyström
    landmarks (distinct rows).
    """
    block = block_size if isinstance(block_size, str) else int(block_size)  # validated: an integer or "auto"
    budget = n_features if isinstance(n_features, str) else int(n_features)
    default = NYSTROEM_BLOCK if kind == "nystroem" else FOURIER_BLOCK
    if budget == "auto":
        budget = min(4096, max(1024, 2 * n_samples))
        block = default if block == "auto" else block
        if kind == "nystroem":
            block = min(block, n_samples)  # landmarks are distinct rows
            return block, max(1, min(-(-budget // block), n_samples // block))
        return block, -(-budget // block)
    if kind == "nystroem" and budget > n_samples:
        raise ValueError(f"n_features={budget} asks for more Nyström landmarks than the n_samples={n_samples} "
                         f"rows: use n_features <= {n_samples}")
    if block == "auto":
        split = equal_blocks(budget, default)
        if split is None:
            lo = next(v for v in range(budget - 1, 0, -1) if equal_blocks(v, default))
            hi = next(v for v in range(budget + 1, 2 * budget) if equal_blocks(v, default))
            valid = [v for v in (lo, hi) if kind != "nystroem" or v <= n_samples]
            raise ValueError(f"n_features={budget} does not split into equal blocks of {default // 2} to {default} "
                             "features (block_size='auto'): use n_features=" + " or ".join(str(v) for v in valid)
                             + ", or give block_size")
        return split
    if budget % block:
        lo, hi = block * (budget // block), block * (budget // block + 1)
        valid = [v for v in (lo, hi) if v > 0 and (kind != "nystroem" or v <= n_samples)]
        raise ValueError(f"n_features={budget} is not a multiple of block_size={block}: use n_features="
                         + " or ".join(str(v) for v in valid) + ", or another block_size")
    return block, budget // block


def sections(features, coef: np.ndarray, budget: int) -> tuple:
    """``(features, coef)`` of a fitted function of ``budget`` features.

    Blocks the steps have not reached yet get zero coefficients, so the model has exactly
    the budget; jointly whitened blocks become kernel sections and their coefficients
    (the model then holds landmarks and coefficients only, not the ``M x M`` root).
    """
    if coef.shape[0] < budget:
        coef = np.concatenate([coef, np.zeros((budget - coef.shape[0], coef.shape[1]))])
    if isinstance(features, JointNystroemBlocks):
        return features.sections(), features.fold(coef)
    return features, coef


class ComponentStepEstimator(StepEstimatorMixin, BaseEstimator):
    """Base of the step-fitted estimators on one view (with a target) or two views.

    Subclasses define ``_views`` (the view names, ``("X",)`` or ``("X", "Y")``), the
    rule (:meth:`_make_rule`), the initial solve (:meth:`_initial`) and the final
    rotation (:meth:`_final`, or their own :meth:`_finish`); the hooks below set the step
    scale, its decay and the divergence guard.
    """

    _views: tuple[str, ...] = ("X", "Y")
    _y_is_target = False
    #: Whether the rule works on centred statistics (the step scale is then set by the
    #: centred covariance of the first block).
    _centred = True
    #: Whether the steps whiten several Nyström blocks together (:class:`JointNystroemBlocks`),
    #: so that they penalise the kernel's own RKHS norm on the landmarks' span, as the
    #: estimator's other solvers do.
    _joint_steps = True

    def _curvature(self, lam: float) -> float:
        """The scale the step is normalised by, from the top eigenvalue ``lam`` of the first block."""
        return lam

    def _eta_decay(self, lam: float) -> float:
        """``theta_1`` of the step schedule."""
        return self._params["eta_decay"]

    def _guard_limit(self, lam: float, sample: np.ndarray) -> float:
        """Largest variance of an updated function on a batch before the step counts as diverged."""
        return GUARD_FACTOR * max(1.0, lam)

    # -- parameters ------------------------------------------------------------------------
    def _view_param(self, name: str, v: int):
        return getattr(self, f"{name}_{'xy'[v]}") if len(self._views) == 2 else getattr(self, name)

    def _check_common(self, n_samples: int, k: int | None = None, whole_budget: bool = False) -> dict:
        """The resolved common parameters; ``k`` functions per set (default: ``n_components``).

        ``whole_budget``: ``k`` is bounded by the whole feature budget, not by one block
        (a solver that takes all the features at once, such as ``"rca"``).
        """
        k = int(self.n_components) if k is None else k
        settings = self._step_settings(n_samples)
        kind = settings["features"]
        block, n_blocks = feature_blocks(n_samples, kind, settings["n_features"], settings["block_size"])
        if k > (block * n_blocks if whole_budget else block):
            bound = f"n_features={block * n_blocks}" if whole_budget else f"block_size={block} (the initial block)"
            raise ValueError(f"n_components={k} must be <= {bound}"
                             + (f"; Nyström blocks hold at most the {n_samples} rows" if kind == "nystroem" else ""))
        batch = int(settings["batch_size"])
        max_iter = settings["max_iter"]
        max_iter = max(500, min(10 * -(-n_samples // batch), 5000)) if max_iter == "auto" else int(max_iter)
        return {
            "n_components": k, "features": kind, "block_size": block, "n_blocks": n_blocks, "batch_size": batch,
            "max_iter": max_iter, "shuffle_chunks": int(self.shuffle_chunks), "n_partitions": int(self.n_partitions),
            "eta0": float(self.eta0), "center": True,
            "eta_decay": self.eta_decay if self.eta_decay == "auto" else float(self.eta_decay),
        }

    def _step_settings(self, n_samples: int) -> dict:
        """``features``, ``n_features``, ``block_size``, ``batch_size`` and ``max_iter`` before their resolution."""
        return {"features": self.features, "n_features": self.n_features, "block_size": self.block_size,
                "batch_size": self.batch_size, "max_iter": self.max_iter}

    def _steps_whitening(self, p: dict) -> str:
        """``"joint"`` when the steps run on several Nyström blocks whitened together, else ``"block"``.

        Raises ``ValueError`` for a budget beyond :data:`JOINT_STEPS_MAX_FEATURES`.
        """
        joint = (self._joint_steps and p.get("solver", "dsgd") == "dsgd" and p["features"] == "nystroem"
                 and p["n_blocks"] > 1)
        M = p["n_blocks"] * p["block_size"]
        if joint and M > JOINT_STEPS_MAX_FEATURES:
            raise ValueError(f"{type(self).__name__}(solver='dsgd') whitens its Nyström landmarks together (one "
                             f"eigendecomposition of M x M) so that the steps minimise the objective of the other "
                             f"solvers: at most {JOINT_STEPS_MAX_FEATURES} features in several blocks, got {M}; use "
                             f"n_features <= {JOINT_STEPS_MAX_FEATURES}, a full-data solver or features='fourier'")
        return "joint" if joint else "block"

    # -- inputs ----------------------------------------------------------------------------
    def _target(self, Y, first: bool, **options):
        """``Y`` as the rule reads it, once ``X`` is checked (the identity; classifiers code their labels)."""
        return Y

    def _validate_pair(self, X, Y, reset: bool, **target) -> tuple[DataView, DataView, DataView]:
        """Row-aligned views of ``X`` and ``Y``, checked and stacked (nothing computed for lazy inputs)."""
        vx, vy = self._validate_views(X, Y, reset, self._views if len(self._views) == 2 else ("X", "y"),
                                      target=lambda y: self._target(y, reset, **target))
        self._check_n_features_y(vy, reset, self._second_name)
        return vx, vy, stacked_view(vx, vy)

    @property
    def _second_name(self) -> str:
        return "y" if self._y_is_target else "Y"

    def _columns(self) -> tuple[slice, slice]:
        dx = self.n_features_in_
        return slice(0, dx), slice(dx, dx + self.n_features_in_y_)

    # -- fitting ---------------------------------------------------------------------------
    def _fit(self, X, Y, callback=None, views=None, **target):
        # views: those of _validate_pair(X, Y, reset=True, **target), when the caller has them already
        vx, vy, view = views if views is not None else self._validate_pair(X, Y, reset=True, **target)
        inputs = {"X": vx, self._second_name: vy}
        if self._by_passes():  # the pass driver's checkpoint: the seed now, the solver's state in its run
            ckpt = self._pass_checkpoint(inputs)
            saved = ckpt.load() if ckpt is not None else None
            found = None if saved is None else (saved.seed, None)
        else:
            ckpt, found = self._checkpointer(inputs)
        with one_blas_thread():  # the same products, so the same model, on any machine and scheduler
            self._initialise(view, seed=None if found is None else found[0])
            if ckpt is not None:
                ckpt.seed = self.seed_
                if found is not None and found[1] is not None:
                    self.state_ = found[1]
            self._solve(view, callback, ckpt)
        del self._sample
        return self

    def _by_passes(self) -> bool:
        """Whether this fit runs a pass solver (checkpointed by the pass driver, not by the step engine)."""
        return False

    def _sample_size(self, p: dict) -> int:
        """Rows of the seeded sample of a fit by steps (:data:`N_SAMPLE`)."""
        return N_SAMPLE

    def _solve(self, view: DataView, callback, checkpointer) -> None:
        """Fit the initialised functions: the steps, then the final rotation on the sample.

        ``checkpointer``: the step engine's :class:`~dsgd_dask.engine.checkpoint.Checkpointer`,
        or for a pass solver (:meth:`_by_passes`) the driver's
        :class:`~dsgd_dask.engine.checkpoint.PassCheckpoint`.
        """
        self._run_steps(view, self._params["max_iter"], epoch_offset=0, callback=callback,
                        checkpointer=checkpointer)
        self._finish(self._sample)

    def _partial_fit(self, X, Y, **target):
        first = not hasattr(self, "state_")
        view = self._validate_pair(X, Y, reset=first, **target)[2]
        with one_blas_thread():
            if first:
                self._initialise(view)
                sample = self._sample
                del self._sample
            else:
                sample = sample_rows(view, N_SAMPLE, self.seed_, key=self._n_calls + 1)
            n_steps = max(1, -(-view.n_samples // self._params["batch_size"]))
            self._run_steps(view, n_steps, epoch_offset=self._n_calls)
            self._finish(sample)
        return self

    def _initialise(self, view: DataView, seed: int | None = None) -> None:
        """Seed, sample, per-view kernels and feature blocks, the rule and the initial solve."""
        p = self._check_params(view.n_samples)
        p["whitening"] = self._steps_whitening(p)
        self._params = p
        self.seed_ = self._seed(self.random_state) if seed is None else seed
        sample = sample_rows(view, self._sample_size(p), self.seed_)
        cols = self._columns()
        n_views = len(self._views)
        specs = self._view_kernels(sample)
        dtype, cache = self.compute_dtype, self.cache_bytes
        m, J = p["block_size"], p["n_blocks"]
        rows = landmark_rows(view, J * m, self.seed_, shuffle=True) if p["features"] == "nystroem" else None
        features = []
        for v, spec in enumerate(specs):
            xs = sample[:, cols[v]]
            center = xs.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None
            if rows is not None:
                features.append(NystroemFeatures(spec, rows[:, cols[v]], m, view_seed(self.seed_, v), dtype,
                                                 center=center))
            else:
                cls = FourierPairs if p["features"] == "fourier_pairs" else RandomFeatures
                features.append(cls(spec, xs.shape[1], m, view_seed(self.seed_, v), dtype, center=center,
                                    cache_bytes=cache))
        if p["whitening"] == "joint":
            # the same landmarks whitened together; each joint block has about the second
            # moment of a block whitened on its own, so the step scale below holds
            features = [JointNystroemBlocks.of(f) for f in features]
        self._features = tuple(features)
        z = [f.transform(sample[:N_INIT, cols[v]], 0, 1).astype(np.float64) for v, f in enumerate(self._features)]
        if self._centred:
            z = [zv - zv.mean(axis=0) for zv in z]
        # the top eigenvalue of z^T z / n from the smaller of its two Gram matrices
        lam = max(float(np.linalg.eigvalsh((zv.T @ zv if zv.shape[1] <= zv.shape[0] else zv @ zv.T) / zv.shape[0])[-1])
                  for zv in z)
        if not np.isfinite(lam) or lam <= 0:
            raise ValueError("the data sample has no variance under this kernel; check the bandwidth")
        self._sample = sample
        coef = self._initial(z, sample[:N_INIT], p["n_components"])
        if p["whitening"] == "joint":  # every joint block is fed from the first step: all start at once
            coef = tuple(np.vstack([c, np.zeros((J * m - c.shape[0], c.shape[1]))]) for c in coef)
        self.state_ = StepState(coef, 0, p["eta0"] / self._curvature(lam))
        self._config = StepConfig(n_blocks=J, batch_size=p["batch_size"], eta_decay=self._eta_decay(lam),
                                  average_from=self._average_from(p["batch_size"]))
        self._rule = self._make_rule(cols, self._guard_limit(lam, sample))
        self.bandwidth_ = specs[0].bandwidth if n_views == 1 else tuple(s.bandwidth for s in specs)
        self.kernel_ = specs[0] if n_views == 1 else tuple(specs)
        self._n_calls = 0  # runs of steps (fit, partial_fit): the epoch offset of the next one

    def _view_kernels(self, sample: np.ndarray) -> list:
        """The kernel of each view with its bandwidth (the median trick on the ``sample`` rows)."""
        cols = self._columns()
        n_views = len(self._views)
        return [kernel_spec(self._view_param("kernel", v), self._view_param("bandwidth", v),
                            self._view_param("kernel_params", v), sample[:, cols[v]],
                            what="bandwidth" + ("_" + "xy"[v] if n_views == 2 else ""))
                for v in range(n_views)]

    def _feature_sets(self) -> tuple:
        f = self._features
        if self._params.get("whitening") == "joint" and not isinstance(f[0], JointNystroemBlocks):
            # a loaded model keeps its landmarks as kernel sections: whitened together again to continue
            self._features = f = tuple(JointNystroemBlocks.of(fv) for fv in f)
        return f

    def _sample_functions(self, sample: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The raw functions of every set on the sample rows, centred, and their means."""
        centred, means = [], []
        for i, view in enumerate(self._rule.set_views):
            h = KernelExpansion(self._features[view], self.state_.model_coef[i]).evaluate(self._rule.rows(sample, i))
            means.append(h.mean(axis=0))
            centred.append(h - means[-1])
        return centred, means

    def _norms(self) -> list[np.ndarray]:
        """``J A_i^T A_i`` per set: the Gram matrix of the functions in the features' space.

        ``J`` blocks each approximate the kernel, so the concatenated features carry ``J``
        times it: ``J A^T A`` is the RKHS Gram matrix under the blocks' average kernel.
        """
        J = self._config.n_blocks
        return [J * (c.T @ c) for c in self.state_.model_coef]

    def _finish(self, sample: np.ndarray) -> None:
        """Rotate the sets to the method's ordered components (on the sample), set offsets and models."""
        h, means = self._sample_functions(sample)
        rotations = self._final(h, self._norms(), sample)
        budget = self._params["n_blocks"] * self._params["block_size"]
        models = []
        for i, view in enumerate(self._rule.set_views):
            # the offset is the sample mean of the rotated functions: the raw means, rotated
            features, coef = sections(self._features[view], self.state_.model_coef[i] @ rotations[i], budget)
            offset = means[i] @ rotations[i]
            if features is not self._features[view]:
                # kernel sections round otherwise than the joint blocks: centre on their own values
                offset = KernelExpansion(features, coef).evaluate(self._rule.rows(sample, i)).mean(axis=0)
            model = KernelExpansion(features, coef, offset)
            model.token = model_fingerprint(model)
            models.append(model)
        self.models_ = tuple(models)
        self.n_features_ = models[0].coef.shape[0]
        self._n_features_out = models[0].n_outputs

    # -- transforming ----------------------------------------------------------------------
    def _transform_view(self, i: int, X, name: str):
        model = self.models_[i]
        if i == 0:
            view = self._validate_input(X, reset=False)
        else:
            view = self._validate_second(X)
        return apply_rows(view, model.evaluate, model.n_outputs, model.token, f"{type(self).__name__.lower()}-{name}")

    def _validate_second(self, Y) -> DataView:
        from dsgd_dask.streams.inputs import _as_2d_view

        vy = _as_2d_view(Y, self._second_name, True)
        if not vy.is_dask:
            check_finite_block(vy.data, self._second_name)
        self._check_n_features_y(vy, False, self._second_name)
        return vy

    # -- persistence -----------------------------------------------------------------------
    def save(self, path, overwrite: bool = False, *, storage_options=None):
        check_is_fitted(self, "models_")  # a model fitted without steps has no state_
        attrs, arrays = self._fitted_payload()
        return write_store(path, "model", attrs, arrays, overwrite=overwrite, storage_options=storage_options)

    save.__doc__ = StepEstimatorMixin.save.__doc__

    def _fitted_payload(self) -> tuple[dict, dict]:
        """Attributes and arrays of the fitted model; the step state too when there is one.

        A model fitted without steps (a one-pass or dense solver: no ``state_``) keeps its
        functions only; loading it gives a model to transform, not to continue by steps.
        """
        check_is_fitted(self, "models_")
        stepped = "state_" in self.__dict__
        feats, arrays = {}, {}
        for v, f in enumerate(self._features):
            fattrs, farrays = features_payload(f, prefix=f"view{v}_")
            feats[str(v)] = fattrs
            arrays.update(farrays)
        for i, model in enumerate(self.models_):
            arrays[f"coef_{i}"] = model.coef
            arrays[f"offset_{i}"] = model.offset
            if stepped:
                arrays[f"state_coef_{i}"] = self.state_.coef[i]
                if self.state_.mean:
                    arrays[f"state_mean_{i}"] = self.state_.mean[i]
        arrays.update(self._values_payload())
        fitted = {"seed_": self.seed_, "n_iter_": self.n_iter_, **self._input_payload(),
                  "n_features_in_y_": self.n_features_in_y_, "resolved_params": self._params}
        if getattr(self, "solver_", None) is not None:
            fitted["solver_"] = self.solver_
        if stepped:
            fitted.update({"n_calls": self._n_calls, "step": self.state_.step, "eta_scale": self.state_.eta_scale,
                           "n_mean": self.state_.n_mean, "config": asdict(self._config),
                           "guard_limit": self._rule.guard_limit})
        else:
            fitted["set_views"] = [int(v) for v in self._set_views()]
        fitted.update(self._extra_payload())
        attrs = {"estimator": type(self).__name__, "params": self._params_payload(), "features": feats,
                 "fitted": fitted}
        return attrs, arrays

    def _set_views(self) -> tuple[int, ...]:
        """The input view of each function set (set ``i`` on view ``i`` when there is no rule)."""
        rule = self.__dict__.get("_rule")
        return rule.set_views if rule is not None else tuple(range(len(self.models_)))

    def _values_payload(self) -> dict:
        return {}

    def _extra_payload(self) -> dict:
        return {}

    @classmethod
    def _legacy_params(cls, params: dict) -> dict:
        """The constructor parameters of a store written by an earlier version (renamed values mapped)."""
        return renamed(params)

    @classmethod
    def _from_payload(cls, attrs: dict, arrays: dict):
        fitted = attrs["fitted"]
        est = cls(**cls._legacy_params(dict(attrs["params"])))
        n_views = len(cls._views)
        if len(attrs["features"]) != n_views:
            raise StoreError(f"the model store has {len(attrs['features'])} feature sets, {cls.__name__} "
                             f"needs {n_views}")
        est._features = tuple(features_from_payload(attrs["features"][str(v)], arrays, prefix=f"view{v}_",
                                                    cache_bytes=est.cache_bytes) for v in range(n_views))
        est._params = cls._legacy_params(dict(fitted["resolved_params"]))
        est._restore_input(fitted)
        est.n_features_in_y_ = fitted["n_features_in_y_"]
        est._restore_extra(fitted, arrays)
        est._restore_values(arrays)
        if "step" in fitted:  # fitted by steps (or a solver that keeps a step state): it can continue by steps
            est._config = StepConfig(**fitted["config"])
            est._rule = est._make_rule(est._columns(), fitted["guard_limit"])
            n_sets = est._rule.n_sets
            mean = tuple(arrays[f"state_mean_{i}"] for i in range(n_sets)) if "state_mean_0" in arrays else ()
            est.state_ = StepState(tuple(arrays[f"state_coef_{i}"] for i in range(n_sets)), fitted["step"],
                                   fitted["eta_scale"], mean, int(fitted.get("n_mean", 0)))
            # stores written before the public n_passes_ went hold it under that name
            est._n_calls = int(fitted.get("n_calls", fitted.get("n_passes_", 0)))
            set_views = est._rule.set_views
        else:
            set_views = tuple(fitted["set_views"])
        models = []
        for i, view in enumerate(set_views):
            model = KernelExpansion(est._features[view], arrays[f"coef_{i}"], arrays[f"offset_{i}"])
            model.token = model_fingerprint(model)
            models.append(model)
        est.models_ = tuple(models)
        specs = [f.kernel for f in est._features]
        est.kernel_ = specs[0] if n_views == 1 else tuple(specs)
        est.bandwidth_ = specs[0].bandwidth if n_views == 1 else tuple(s.bandwidth for s in specs)
        est.seed_ = fitted["seed_"]
        est.n_iter_ = fitted["n_iter_"]
        solver = fitted.get("solver_", est._params.get("solver"))
        if solver is not None:
            est.solver_ = solver
        est.n_features_ = models[0].coef.shape[0]
        est._n_features_out = models[0].n_outputs
        return est

    def _restore_extra(self, fitted: dict, arrays: dict) -> None:
        pass

    def _restore_values(self, arrays: dict) -> None:
        pass

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        return tags

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_sample", None)
        return state

