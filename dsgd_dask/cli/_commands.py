"""The subcommands of ``dsgd-dask``: preprocess, fit, transform, predict, evaluate, info."""

from __future__ import annotations

import ast
import contextlib
import json
import sys
import time

import numpy as np

import dsgd_dask
from dsgd_dask.cli._io import OUTPUT_ATTR, open_input, open_second, read_model_attrs, row_chunks, write_output
from dsgd_dask.model.store import RemoteLocation, open_store_group, store_location

#: Method names and their estimator classes (all exported from ``dsgd_dask``).
METHODS = {
    "pca": "KernelPCA",
    "cca": "KernelCCA",
    "svd": "KernelSVD",
    "sir": "KernelSIR",
    "ridge": "KernelRidge",
    "svc": "KernelSVC",
    "logistic": "KernelLogisticRegression",
}
TWO_VIEW = ("KernelCCA", "KernelSVD")
SUPERVISED = ("KernelSIR", "KernelRidge", "KernelSVC", "KernelLogisticRegression")
MACHINES = ("KernelRidge", "KernelSVC", "KernelLogisticRegression")


class UsageError(Exception):
    """A command line that cannot work whatever the data (exit status 2)."""


def parse_set(items, valid: dict) -> dict:
    """Estimator parameters from ``key=value`` strings, values read as Python literals, else strings.

    Parameters
    ----------
    items : list of str
        ``key=value`` pairs, e.g. ``n_components=5``, ``kernel=laplacian``,
        ``kernel_params={'nu': 1.5}``.
    valid : dict
        The estimator's ``get_params()``.

    Returns
    -------
    dict

    Raises
    ------
    UsageError
        A pair without ``=`` or an unknown parameter (the message lists the valid ones).
    """
    params = {}
    for item, key, value in _pairs(items, "--set expects key=value"):
        key = key.replace("-", "_")
        if key not in valid:
            raise UsageError(f"unknown parameter {key!r} in --set {item}; valid parameters: {', '.join(sorted(valid))}")
        params[key] = value
    return params


def _pairs(items, usage: str):
    """``(item, key, value)`` of ``key=value`` strings, values read as Python literals, else strings.

    A pair without ``=`` or without a key raises :class:`UsageError` with ``usage``.
    """
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{usage}, got {item!r}")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        yield item, key, value


@contextlib.contextmanager
def scheduler(name: str, n_workers: int | None = None):
    """Run the body on a dask scheduler: ``threads``, ``synchronous``, ``processes``, ``local`` or an address.

    ``local`` starts a :class:`distributed.LocalCluster` of ``n_workers`` single-threaded
    workers (default 2) for the duration; an address connects a client to a running
    scheduler.
    """
    import dask

    if name in ("threads", "synchronous", "processes"):
        if n_workers is not None and name != "synchronous":
            with dask.config.set(scheduler=name, num_workers=n_workers):
                yield
        else:
            with dask.config.set(scheduler=name):
                yield
        return
    from distributed import Client

    from dsgd_dask.engine.distributed import local_cluster

    if name == "local":
        with local_cluster(n_workers or 2) as cluster, Client(cluster):
            yield
        return
    with Client(name):
        yield


def _say(args, *parts) -> None:
    if not args.quiet:
        print(*parts, file=sys.stdout, flush=True)


def _shape(data) -> str:
    return "×".join(str(n) for n in data.shape)


def parse_storage_options(items) -> dict:
    """Options of the fsspec filesystem of URLs from ``key=value`` strings (values as Python literals, else strings).

    Parameters
    ----------
    items : list of str
        ``key=value`` pairs, e.g. ``endpoint_url=http://127.0.0.1:9000``, ``anon=True``,
        ``client_kwargs={'region_name': 'eu-west-1'}``.

    Returns
    -------
    dict

    Raises
    ------
    UsageError
        A pair without ``=`` or without a key.
    """
    return {key: value for _, key, value in _pairs(items, "--storage-option expects KEY=VALUE")}


def _options(args) -> dict:
    """The ``--storage-option`` values of a command (``{}``: the filesystems' defaults)."""
    return parse_storage_options(getattr(args, "storage_option", None))


def _load(args):
    model = dsgd_dask.load(args.model, storage_options=_options(args))
    _set_verbose(model, args)
    return model


def _set_verbose(model, args) -> None:
    if hasattr(model, "verbose"):
        model.verbose = not args.quiet


def _inputs(args, kind: str):
    """``X`` and the second view or target (or None) of a command, as the method needs them."""
    X = open_input(args.input, args.var, feature_dim=args.feature_dim, storage_options=_options(args))
    if args.y is None:
        if kind in SUPERVISED and args.command in ("fit", "evaluate"):
            raise UsageError(f"{kind} needs --y: the target, a path or a variable of {args.input}")
        if kind in TWO_VIEW and args.command in ("fit", "evaluate"):
            raise UsageError(f"{kind} needs --y: the second view, a path or a variable of {args.input}")
        return X, None
    if kind not in TWO_VIEW + SUPERVISED:
        raise UsageError(f"{kind} takes no --y")
    if kind in SUPERVISED and args.command in ("transform", "predict"):
        raise UsageError(f"{args.command} with {kind} takes no --y")
    second = "second view" if kind in TWO_VIEW else "target"
    Y = open_second(args.input, args.y, args.y_var, f"--y ({second})", 2 if kind in TWO_VIEW else None,
                    args.feature_dim if kind in TWO_VIEW else None, _options(args))
    return X, Y


# -- preprocess ------------------------------------------------------------------------------
#: The output attribute holding a preprocessing's parameters (its fitted arrays are beside ``X``).
PREPROCESSING = "preprocessing"


def _fitted_pca(mean: np.ndarray, components: np.ndarray):
    """A :class:`~dsgd_dask.SamplePCA` that projects on ``components`` about ``mean`` (fitted elsewhere)."""
    from dsgd_dask.preprocessing import SamplePCA

    pca = SamplePCA(n_components=components.shape[0])
    pca.mean_, pca.components_, pca.n_features_in_ = mean, components, components.shape[1]
    return pca


def _preprocessing_of(path, options: dict):
    """The fitted steps and the parameters of a store written by ``dsgd-dask preprocess``."""
    from dsgd_dask.preprocessing import UnitNorm

    group = open_store_group(path, options, "--like")
    recipe = dict(group.attrs).get(OUTPUT_ATTR, {}).get(PREPROCESSING)
    if not isinstance(recipe, dict):
        raise ValueError(f"--like {path} was not written by `dsgd-dask preprocess` (no {PREPROCESSING!r} in its "
                         f"{OUTPUT_ATTR!r} attribute)")
    steps = []
    if recipe["unit_norm"]:
        steps.append(UnitNorm())
    if recipe["pca"] is not None:
        steps.append(_fitted_pca(np.asarray(group["pca_mean"][...]), np.asarray(group["pca_components"][...])))
    return steps, recipe


def _finite_rows(block: np.ndarray, what: str, block_info=None) -> np.ndarray:
    from dsgd_dask.streams.inputs import check_finite_block

    check_finite_block(block, f"{what}, row chunk {block_info[0]['chunk-location'][0] if block_info else '?'}")
    return block


def cmd_preprocess(args) -> int:
    """Unit-norm rows and a PCA fitted on a sample (or those of ``--like``), written to a new Zarr store."""
    import dask.array as da
    import xarray as xr
    from sklearn.pipeline import make_pipeline

    from dsgd_dask.preprocessing import SamplePCA, UnitNorm

    options = _options(args)
    if args.like is not None and (args.unit_norm or args.pca is not None):
        raise UsageError("--like applies the preprocessing of another store: give it without --unit-norm or --pca")
    if args.like is None and not args.unit_norm and args.pca is None:
        raise UsageError("nothing to do: give --unit-norm, --pca N or both (or --like STORE)")
    X = open_input(args.input, args.var, feature_dim=args.feature_dim, storage_options=options)
    labelled = isinstance(X, xr.DataArray)
    data = row_chunks(X.data if labelled else X, args.chunks)
    data = data.map_blocks(_finite_rows, f"INPUT {args.input}", dtype=data.dtype)
    with scheduler(args.scheduler, args.n_workers):
        if args.like is not None:
            steps, recipe = _preprocessing_of(args.like, options)
            if steps and isinstance(steps[0], UnitNorm):
                steps[0].fit(data)
            pipe = make_pipeline(*steps)
            n_in = steps[-1].n_features_in_
            if data.shape[1] != n_in:
                raise ValueError(f"INPUT {args.input} has {data.shape[1]} features; the preprocessing of --like "
                                 f"{args.like} takes {n_in}")
        else:
            steps = [UnitNorm()] if args.unit_norm else []
            if args.pca is not None:
                steps.append(SamplePCA(args.pca, n_samples=args.pca_samples, random_state=args.seed))
            pipe = make_pipeline(*steps).fit(data)
    pca = steps[-1] if isinstance(steps[-1], SamplePCA) else None
    if args.like is None:
        recipe = {"unit_norm": bool(args.unit_norm), "pca": args.pca,
                  "pca_samples": None if pca is None else len(pca.sample_indices_),
                  "seed": args.seed, "explained_variance_ratio":
                  None if pca is None else float(pca.explained_variance_ratio_.sum()),
                  "fitted_on": str(args.input)}
    out = pipe.transform(data).astype(np.float32)
    name = args.var or "X"
    arrays = {}
    if labelled:
        row_dim, feature_dim = X.dims[0], X.dims[-1]
        if pca is None:
            arrays[name] = X.copy(data=out)
        else:
            arrays[name] = xr.DataArray(out, dims=(row_dim, "component"), coords={row_dim: X[row_dim]})
            arrays["pca_mean"] = xr.DataArray(pca.mean_, dims=(feature_dim,))
            arrays["pca_components"] = xr.DataArray(pca.components_, dims=("component", feature_dim))
    else:
        arrays[name] = out
        if pca is not None:
            arrays["pca_mean"] = da.from_array(pca.mean_)
            arrays["pca_components"] = da.from_array(pca.components_)
    for keep in args.keep:
        if keep in arrays:
            raise UsageError(f"--keep {keep}: the output already has an array {keep!r}")
        kept = open_input(args.input, keep, ndim=None, storage_options=options)
        if kept.shape[0] != X.shape[0]:
            raise ValueError(f"--keep {keep}: it has {kept.shape[0]} rows, INPUT's {name} has {X.shape[0]}")
        if labelled != isinstance(kept, xr.DataArray):
            raise ValueError(f"--keep {keep}: {name} and {keep} must both be xarray variables or both plain arrays")
        arrays[keep] = kept if labelled else row_chunks(kept, out.chunks[0][0])
    attrs = {"command": "preprocess", "input": str(args.input), "var": args.var, "version": dsgd_dask.__version__,
             PREPROCESSING: recipe, "like": None if args.like is None else str(args.like)}
    t0 = time.perf_counter()
    with scheduler(args.scheduler, args.n_workers), _progress(args):
        write_output(args.out, arrays, attrs, overwrite=args.overwrite, storage_options=options)
    _say(args, f"wrote {name} {_shape(out)} to {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


# -- fit -------------------------------------------------------------------------------------
def cmd_fit(args) -> int:
    """Fit an estimator on a data store and save it."""
    cls = getattr(dsgd_dask, METHODS[args.method])
    params = parse_set(args.set, cls().get_params())
    params.setdefault("verbose", not args.quiet)
    if args.checkpoint is not None:
        params["checkpoint"] = args.checkpoint
    options = _options(args)
    out = store_location(args.out, options, "--out")
    exists = out.state() != "empty" if isinstance(out, RemoteLocation) else out.exists()
    if exists and not args.overwrite:
        raise FileExistsError(f"{out} exists; pass --overwrite to replace it")
    X, Y = _inputs(args, cls.__name__)
    model = cls(**params)
    t0 = time.perf_counter()
    with scheduler(args.scheduler, args.n_workers):
        model.fit(X, storage_options=options) if Y is None else model.fit(X, Y, storage_options=options)
    seconds = time.perf_counter() - t0
    model.save(out, overwrite=args.overwrite)
    _say(args, f"fitted {cls.__name__} on {args.input} ({_shape(X)}) in {seconds:.1f} s; saved to {out}")
    return 0


# -- transform / predict ---------------------------------------------------------------------
def _provenance(args, model) -> dict:
    where = store_location(args.model, _options(args), "MODEL")
    where = str(where if isinstance(where, RemoteLocation) else where.resolve())
    return {"command": args.command, "estimator": type(model).__name__, "model": where,
            "input": str(args.input), "var": args.var, "version": dsgd_dask.__version__}


def _write(args, arrays: dict, model) -> int:
    t0 = time.perf_counter()
    with scheduler(args.scheduler, args.n_workers), _progress(args):
        write_output(args.out, arrays, _provenance(args, model), overwrite=args.overwrite,
                     storage_options=_options(args))
    shapes = ", ".join(f"{name} {_shape(a)}" for name, a in arrays.items())
    _say(args, f"wrote {shapes} to {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_transform(args) -> int:
    """Project a data store with a saved model into a new Zarr store."""
    model = _load(args)
    kind = type(model).__name__
    if kind in MACHINES:
        raise UsageError(f"{kind} is a predictor: use `dsgd-dask predict`")
    X, Y = _inputs(args, kind)
    X = row_chunks(X, args.chunks)
    if Y is not None:
        U, V = model.transform(X, row_chunks(Y, args.chunks))
        return _write(args, {"U": U, "V": V}, model)
    return _write(args, {"U" if kind in TWO_VIEW else "components": model.transform(X)}, model)


def cmd_predict(args) -> int:
    """Predict with a saved kernel machine into a new Zarr store."""
    model = _load(args)
    kind = type(model).__name__
    if kind not in MACHINES:
        raise UsageError(f"{kind} does not predict: use `dsgd-dask transform`")
    if args.proba and not hasattr(model, "predict_proba"):
        raise UsageError(f"--proba needs a model with predict_proba (logistic); {kind} has none")
    X, _ = _inputs(args, kind)
    X = row_chunks(X, args.chunks)
    out = {"proba": model.predict_proba(X)} if args.proba else {"prediction": model.predict(X)}
    return _write(args, out, model)


@contextlib.contextmanager
def _progress(args):
    """A tqdm bar over the tasks of a local dask computation (shown on a terminal, unless --quiet)."""
    if args.quiet or args.scheduler not in ("threads", "synchronous", "processes"):
        yield
        return
    from dask.callbacks import Callback
    from tqdm.auto import tqdm

    class TqdmCallback(Callback):
        def _start_state(self, dsk, state):
            self.bar = tqdm(total=sum(len(state[k]) for k in ("ready", "waiting", "running", "finished")),
                            unit="task", desc="writing", leave=False, disable=None)

        def _posttask(self, key, result, dsk, state, worker_id):
            self.bar.update(1)

        def _finish(self, dsk, state, errored):
            self.bar.close()

    with TqdmCallback():
        yield


# -- evaluate --------------------------------------------------------------------------------
def _as_numpy(values) -> np.ndarray:
    values = getattr(values, "data", values)
    return np.asarray(values.compute() if hasattr(values, "compute") else values)


def evaluate(model, X, Y=None) -> dict:
    """The score of a fitted estimator on ``X`` (and ``Y``), with what it measures.

    Parameters
    ----------
    model : fitted dsgd_dask estimator
    X : data input
    Y : data input, optional
        The second view (CCA, SVD) or the target (SIR, kernel machines).

    Returns
    -------
    dict
        ``metric`` (what ``score`` is), ``score`` and per-component values where there are
        several: CCA and SVD, ``score`` (the sum of the correlations of the paired
        functions); classifiers, the accuracy; ridge, R²; PCA, which has no ``score``,
        the variance of each component on ``X`` (the second moment for an uncentred
        model: comparable to ``eigenvalues_``) and their sum; SIR, the share of each
        direction's variance explained by the means of the slices of ``Y`` (comparable to
        ``eigenvalues_``) and their sum.
    """
    from dsgd_dask.metrics import paired_correlations

    kind = type(model).__name__
    if kind in TWO_VIEW:
        import dask

        U, V = (np.asarray(a) for a in dask.compute(*(getattr(a, "data", a) for a in model.transform(X, Y))))
        corr = paired_correlations(U, V)
        return {"metric": "sum of the correlations of the paired functions", "score": float(corr.sum()),
                "per_component": corr.tolist()}
    if kind in MACHINES:
        pred = _as_numpy(model.predict(X))
        y = _as_numpy(Y).reshape(pred.shape)
        if kind == "KernelRidge":
            from sklearn.metrics import r2_score

            return {"metric": "R² (coefficient of determination)", "score": float(r2_score(y, pred))}
        return {"metric": "accuracy", "score": float(np.mean(pred == y))}
    U = _as_numpy(model.transform(X))
    if kind == "KernelSIR":
        from dsgd_dask.rules.solutions import between_slice_factor, slice_sums

        labels = model.slicer_.assign(_as_numpy(Y))
        G = between_slice_factor(*slice_sums(U, labels, model.slicer_.n_slices))
        share = (G**2).sum(axis=0) / U.var(axis=0)  # the diagonal of the between-slice covariance
        return {"metric": "share of each direction's variance explained by the slices of y (sum)",
                "score": float(share.sum()), "per_component": share.tolist(),
                "eigenvalues": np.asarray(model.eigenvalues_).tolist()}
    if getattr(model, "center", True):
        var, what = U.var(axis=0), "variance"
    else:
        var, what = (U**2).mean(axis=0), "second moment (uncentred model)"
    return {"metric": f"{what} of the components on the data (sum; compare eigenvalues_)",
            "score": float(var.sum()), "per_component": var.tolist(),
            "eigenvalues": np.asarray(model.eigenvalues_).tolist()}


def cmd_evaluate(args) -> int:
    """Score a saved model on a data store."""
    model = _load(args)
    kind = type(model).__name__
    X, Y = _inputs(args, kind)
    with scheduler(args.scheduler, args.n_workers):
        result = {"estimator": kind, "model": str(args.model), "input": str(args.input), **evaluate(model, X, Y)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{kind} on {args.input}: {result['metric']} = {result['score']:.6g}")
        if "per_component" in result:
            print("per component:", " ".join(f"{v:.4g}" for v in result["per_component"]))
        if "eigenvalues" in result:
            print("eigenvalues_: ", " ".join(f"{v:.4g}" for v in result["eigenvalues"]))
    return 0


# -- info ------------------------------------------------------------------------------------
#: Small arrays shown by ``info``.
_SHOWN = ("eigenvalues", "correlations", "singular_values", "classes")


def model_info(path, verify: bool = False, storage_options: dict | None = None) -> dict:
    """What a model store holds, read from its attributes (and a few small arrays).

    Parameters
    ----------
    path : str or Path
        A store written by an estimator's ``save``.
    verify : bool
        Also load the model: checks the attributes and every array against their SHA-256
        digests (a store that does not match them raises a ``StoreError``) and adds the
        model's fingerprint.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL (``{}``: its defaults).

    Returns
    -------
    dict
        ``estimator``, ``format_version``, ``parameters``, ``fitted`` (``n_features_in_``,
        ``n_components``, ``n_features_``, ``n_iter_``, ``seed_``, ...), ``arrays``
        (shape, dtype, digest of each), small fitted values and, with ``verify``,
        ``fingerprint``.
    """
    # verified first, so that what is shown is what was verified
    model = dsgd_dask.load(path, storage_options=storage_options) if verify else None
    attrs, meta = read_model_attrs(path, storage_options)
    fitted = {k: v for k, v in attrs.get("fitted", {}).items() if k not in ("config", "resolved_params")}
    arrays = meta.get("arrays", {})
    coef = arrays.get("coef", arrays.get("coef_0"))
    if coef is not None:
        fitted["n_features_"], fitted["n_outputs"] = coef["shape"]
    group = open_store_group(path, storage_options, "MODEL")
    values = {name: np.asarray(group[name][...]).tolist() for name in _SHOWN
              if name in arrays and np.prod(arrays[name]["shape"]) <= 1000}
    info = {"path": str(path), "estimator": attrs.get("estimator"), "format_version": meta.get("format_version"),
            "parameters": attrs.get("params", {}),
            "resolved_parameters": attrs.get("fitted", {}).get("resolved_params"),
            "fitted": fitted, "features": attrs.get("features"), "values": values,
            "arrays": {name: {"shape": a["shape"], "dtype": a["dtype"], "sha256": a["sha256"]}
                       for name, a in arrays.items()},
            "attributes_sha256": meta.get("attributes_sha256")}
    if verify:
        from dsgd_dask.estimators._steps import model_fingerprint

        models = getattr(model, "models_", None) or (model.model_,)
        info["fingerprint"] = [model_fingerprint(m) for m in models]
        info["verified"] = True
    return info


def cmd_info(args) -> int:
    """Describe a saved model."""
    info = model_info(args.model, verify=args.verify, storage_options=_options(args))
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    fitted = info["fitted"]
    lines = [f"model          {info['path']}",
             f"estimator      {info['estimator']}  (model store format {info['format_version']})"]
    inputs = f"n_features_in_={fitted.get('n_features_in_')}"
    if fitted.get("n_features_in_y_") is not None:
        inputs += f", n_features_in_y_={fitted['n_features_in_y_']}"
    if fitted.get("feature_dim_"):
        inputs += f", feature dim {fitted['feature_dim_']!r}"
    lines.append(f"input          {inputs}")
    lines.append(f"fitted         outputs={fitted.get('n_outputs')}, n_features_={fitted.get('n_features_')}, "
                 f"n_iter_={fitted.get('n_iter_')}, solver_={fitted.get('solver_')}, seed_={fitted.get('seed_')}"
                 + (f", bandwidth_={fitted['bandwidth_']:.6g}" if isinstance(fitted.get("bandwidth_"), float) else ""))
    for name, vals in info["values"].items():
        lines.append(f"{name + '_':<15}{' '.join(f'{v:.4g}' if isinstance(v, float) else str(v) for v in vals)}")
    lines.append("parameters     " + ", ".join(f"{k}={v!r}" for k, v in sorted(info["parameters"].items())))
    lines.append("arrays")
    for name, a in info["arrays"].items():
        lines.append(f"  {name:<22}{'×'.join(map(str, a['shape'])) or 'scalar':<14}{a['dtype']:<6}"
                     f"sha256 {a['sha256'][:16]}")
    if info.get("verified"):
        lines.append("verified       the attributes and every array match their digests; fingerprint "
                     + ", ".join(info["fingerprint"]))
    print("\n".join(lines))
    return 0
