"""Saved models: Zarr stores read back identically anywhere; damaged or foreign stores are refused."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import dsgd_dask
from dsgd_dask import KernelPCA
from dsgd_dask.model.store import attributes_digest


@pytest.fixture(params=["joint", "block"])
def model(blobs, request):
    return KernelPCA(3, kernel="matern", kernel_params={"nu": 2.5}, n_features=512, block_size=64,
                         whitening=request.param, max_iter=40, random_state=0).fit(blobs)


def test_save_load_in_fresh_process(model, blobs, tmp_path):
    path = tmp_path / "model.zarr"
    model.save(path)
    np.save(tmp_path / "X.npy", blobs)
    code = (
        "import sys, numpy as np, dsgd_dask\n"
        f"m = dsgd_dask.load({str(path)!r})\n"
        f"np.save({str(tmp_path / 'Z.npy')!r}, m.transform(np.load({str(tmp_path / 'X.npy')!r})))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "Z.npy"), model.transform(blobs))


def test_loaded_model_keeps_everything(model, blobs, tmp_path):
    model.save(tmp_path / "m.zarr")
    back = dsgd_dask.load(tmp_path / "m.zarr")
    assert back.get_params() == model.get_params()
    np.testing.assert_array_equal(back.eigenvalues_, model.eigenvalues_)
    assert back.bandwidth_ == model.bandwidth_
    assert back.kernel_ == model.kernel_
    assert back.n_features_in_ == 5
    # a model of passes takes no steps (partial_fit), loaded or not; continuing to learn from
    # a loaded model of steps equals continuing the original
    for m in (model, back):
        with pytest.raises(ValueError, match="partial_fit"):
            m.partial_fit(blobs)
    if model.whitening == "joint":
        return
    steps = KernelPCA(**{**model.get_params(), "solver": "dsgd"}).fit(blobs)
    steps.save(tmp_path / "s.zarr")
    a = pickle.loads(pickle.dumps(steps)).partial_fit(blobs)
    b = dsgd_dask.load(tmp_path / "s.zarr").partial_fit(blobs)
    np.testing.assert_array_equal(a.transform(blobs), b.transform(blobs))


def test_readable_attributes(model, tmp_path):
    model.save(tmp_path / "m.zarr")
    attrs = dict(zarr.open_group(str(tmp_path / "m.zarr"), mode="r").attrs)
    assert attrs["estimator"] == "KernelPCA"
    assert attrs["features"]["kernel"] == {"name": "matern", "bandwidth": model.bandwidth_, "nu": 2.5, "order": None}
    assert attrs["features"]["seed"] == 0
    assert attrs["dsgd_dask"]["format_version"] == 3
    assert attrs["dsgd_dask"]["attributes_sha256"] == attributes_digest(attrs)
    json.dumps(attrs)


def test_xarray_labels_survive(blobs, tmp_path):
    arr = xr.DataArray(blobs, dims=("sample", "band"), coords={"band": [400, 500, 600, 700, 800]})
    m = KernelPCA(2, n_features=256, block_size=64, max_iter=10, random_state=0).fit(arr)
    m.save(tmp_path / "m.zarr")
    back = dsgd_dask.load(tmp_path / "m.zarr")
    assert back.feature_dim_ == "band"
    np.testing.assert_array_equal(back.feature_coords_, [400, 500, 600, 700, 800])
    with pytest.raises(ValueError, match="coordinates of dimension 'band'"):
        back.transform(arr.assign_coords(band=[1, 2, 3, 4, 5]))


def test_no_silent_overwrite(model, tmp_path):
    model.save(tmp_path / "m.zarr")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        model.save(tmp_path / "m.zarr")
    model.save(tmp_path / "m.zarr", overwrite=True)
    assert dsgd_dask.load(tmp_path / "m.zarr").n_iter_ == model.n_iter_
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left


def _chunk_files(path: Path, array: str):
    return sorted(p for p in (path / array).rglob("*") if p.is_file() and p.name != "zarr.json")


def test_truncated_chunk_detected(model, tmp_path):
    path = model.save(tmp_path / "m.zarr")
    victim = _chunk_files(path, "coef")[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        dsgd_dask.load(path)


def test_missing_chunk_detected(model, tmp_path):
    path = model.save(tmp_path / "m.zarr")
    _chunk_files(path, "state_coef")[0].unlink()  # zarr would silently read the fill value
    with pytest.raises(ValueError, match="array 'state_coef' does not match its checksum"):
        dsgd_dask.load(path)


def test_data_store_refused(tmp_path, blobs):
    zarr.create_array(store=str(tmp_path / "data.zarr"), data=blobs)
    with pytest.raises(ValueError, match="not a dsgd_dask model store"):
        dsgd_dask.load(tmp_path / "data.zarr")
    xr.Dataset({"X": (("s", "f"), blobs)}).to_zarr(str(tmp_path / "ds.zarr"), consolidated=False)
    with pytest.raises(ValueError, match="no 'dsgd_dask' metadata"):
        dsgd_dask.load(tmp_path / "ds.zarr")
    with pytest.raises(FileNotFoundError):
        dsgd_dask.load(tmp_path / "nothing.zarr")


def test_newer_format_refused(model, tmp_path):
    path = model.save(tmp_path / "m.zarr")
    group = zarr.open_group(str(path), mode="r+")
    meta = dict(group.attrs["dsgd_dask"])
    meta["format_version"] = 99
    group.attrs["dsgd_dask"] = meta
    with pytest.raises(ValueError, match="format version 99.*upgrade dsgd_dask"):
        dsgd_dask.load(path)


def test_older_format_refused(model, tmp_path):
    # format 1 drew its frequencies with another sampler: its seeds would give other features
    path = model.save(tmp_path / "m.zarr")
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["dsgd_dask"] = {**group.attrs["dsgd_dask"], "format_version": 1}
    with pytest.raises(ValueError, match="format version 1, whose seeds generate other random features"):
        dsgd_dask.load(path)
    # format 2 had no digest of the attributes: an edit of them could not be detected
    meta = {k: v for k, v in group.attrs["dsgd_dask"].items() if k != "attributes_sha256"}
    group.attrs["dsgd_dask"] = {**meta, "format_version": 2}
    with pytest.raises(ValueError, match="format version 2, whose attributes .* carry no checksum.*fit the model"):
        dsgd_dask.load(path)


def _seal(group) -> None:
    """Store the digest of ``group``'s edited attributes, as the writer of a store of that content would."""
    group.attrs["dsgd_dask"] = {**group.attrs["dsgd_dask"], "attributes_sha256": attributes_digest(group.attrs)}


# -- every estimator: a fresh process, a distributed worker, paths -------------------------------

SMALL = dict(n_features=256, block_size=64, batch_size=32, max_iter=30, random_state=0)


def _data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 5))
    labels = np.array(["low", "mid", "high"])[np.digitize(X[:, 0] + X[:, 1], [-0.7, 0.7])]
    return X, labels


def _estimators():
    """Name -> (fitted estimator, method, arguments) for each of the seven estimators."""
    X, labels = _data()
    A, B = X[:, :3], X[:, 3:]
    return {
        "pca": (KernelPCA(3, n_features=256, max_iter=5, random_state=0).fit(X), "transform", (X,)),
        "svd": (dsgd_dask.KernelSVD(2, **SMALL).fit(A, B), "transform", (A, B)),
        "cca": (dsgd_dask.KernelCCA(2, **SMALL).fit(A, B), "transform", (A, B)),
        "sir": (dsgd_dask.KernelSIR(2, n_slices=5, **SMALL).fit(X, X[:, 0] ** 2), "transform", (X,)),
        "ridge": (dsgd_dask.KernelRidge(1e-3, **SMALL).fit(X, X[:, 0] * X[:, 1]), "predict", (X,)),
        "svc": (dsgd_dask.KernelSVC(1e-3, **SMALL).fit(X, labels), "predict", (X,)),
        "logistic": (dsgd_dask.KernelLogisticRegression(1e-3, **SMALL).fit(X, labels), "predict_proba", (X,)),
    }


def _outputs(out) -> list[np.ndarray]:
    return [np.asarray(o) for o in out] if isinstance(out, tuple) else [np.asarray(out)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The seven estimators, each saved: name -> (estimator, method, arguments, path)."""
    root = tmp_path_factory.mktemp("models")
    return {name: (est, method, args, est.save(root / f"{name}.zarr"))
            for name, (est, method, args) in _estimators().items()}


def test_every_estimator_saved_and_loaded_in_a_fresh_process(saved, tmp_path):
    assert {type(est).__name__ for est, *_ in saved.values()} == {
        "KernelPCA", "KernelSVD", "KernelCCA", "KernelSIR", "KernelRidge", "KernelSVC",
        "KernelLogisticRegression"}
    spec = {name: {"path": str(path), "method": method, "args": [f"{name}-{i}.npy" for i in range(len(args))]}
            for name, (_, method, args, path) in saved.items()}
    for name, (_, _, args, _) in saved.items():
        for i, arg in enumerate(args):
            np.save(tmp_path / f"{name}-{i}.npy", arg)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code = (
        "import json, sys, numpy as np, dsgd_dask\n"
        "root = sys.argv[1]\n"
        "spec = json.load(open(root + '/spec.json'))\n"
        "for name, s in spec.items():\n"
        "    m = dsgd_dask.load(s['path'])\n"
        "    out = getattr(m, s['method'])(*[np.load(root + '/' + a) for a in s['args']])\n"
        "    out = out if isinstance(out, tuple) else (out,)\n"
        "    for i, o in enumerate(out):\n"
        "        np.save(f'{root}/{name}-out{i}.npy', np.asarray(o))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    for name, (est, method, args, _) in saved.items():
        for i, expected in enumerate(_outputs(getattr(est, method)(*args))):
            got = np.load(tmp_path / f"{name}-out{i}.npy")
            assert got.dtype == expected.dtype, name
            np.testing.assert_array_equal(got, expected, err_msg=name)


def test_models_loaded_on_a_distributed_worker(saved, local_clusters):
    import os
    from operator import methodcaller

    from distributed import Client

    with Client(local_clusters(1)) as client:
        assert os.getpid() not in client.run(os.getpid).values()  # the worker is another process
        for name, (est, method, args, path) in saved.items():
            model = client.submit(dsgd_dask.load, str(path), pure=False)
            out = client.submit(methodcaller(method, *args), model, pure=False).result()
            assert type(model.result()) is type(est)
            for got, expected in zip(_outputs(out), _outputs(getattr(est, method)(*args)), strict=True):
                np.testing.assert_array_equal(got, expected, err_msg=name)


class _PathLike:
    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return str(self.path)


@pytest.mark.parametrize("kind", ["str", "Path", "PathLike", "file-url"])
def test_local_paths_of_every_kind(model, blobs, tmp_path, kind):
    target = tmp_path / "a dir" / "m.zarr"
    path = {"str": str(target), "Path": target, "PathLike": _PathLike(target), "file-url": target.as_uri()}[kind]
    assert model.save(path) == target
    np.testing.assert_array_equal(dsgd_dask.load(path).transform(blobs), model.transform(blobs))
    np.testing.assert_array_equal(dsgd_dask.load(target).transform(blobs), model.transform(blobs))


def test_file_urls_of_another_host_refused(model, blobs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = "file://otherhost/m.zarr"
    with pytest.raises(ValueError, match="must be local"):
        model.save(url)
    with pytest.raises(ValueError, match="must be local"):
        dsgd_dask.load(url)
    # a checkpoint on such a URL fails before any step
    seen = []
    with pytest.raises(ValueError, match="must be local"):
        KernelPCA(2, solver="dsgd", features="fourier", n_features=128, block_size=64, max_iter=20,
                  checkpoint=url, random_state=0).fit(blobs, callback=lambda *a: seen.append(a))
    assert seen == []
    assert list(tmp_path.iterdir()) == []  # nothing written locally under a mangled name


def test_object_store_urls_without_storage_options(model, blobs, tmp_path, monkeypatch):
    # any other fsspec URL is written on its filesystem, with that filesystem's defaults
    monkeypatch.chdir(tmp_path)
    url = f"memory://no-options-{uuid.uuid4().hex}/m.zarr"  # the memory filesystem is one per process
    model.save(url)
    np.testing.assert_array_equal(dsgd_dask.load(url).transform(blobs), model.transform(blobs))
    assert list(tmp_path.iterdir()) == []  # nothing written locally under a mangled name


def test_model_fitted_with_a_path_checkpoint_saves(blobs, tmp_path):
    ckpt = tmp_path / "ck.zarr"
    est = KernelPCA(2, solver="dsgd", features="fourier", n_features=128, block_size=64, max_iter=20,
                    checkpoint=ckpt, random_state=0).fit(blobs)
    loaded = dsgd_dask.load(est.save(tmp_path / "m.zarr"))
    assert loaded.checkpoint == str(ckpt)
    np.testing.assert_array_equal(loaded.transform(blobs), est.transform(blobs))


def test_checkpoint_at_a_file_url(blobs, tmp_path):
    params = dict(solver="dsgd", features="fourier", n_features=128, block_size=64, max_iter=20, random_state=0)
    ckpt = tmp_path / "ck.zarr"
    fitted = KernelPCA(2, **params, checkpoint=ckpt.as_uri(), checkpoint_every=5).fit(blobs)
    assert ckpt.is_dir()
    resumed = KernelPCA(2, **params, checkpoint=ckpt.as_uri(), checkpoint_every=5).fit(blobs)
    np.testing.assert_array_equal(resumed.transform(blobs), fitted.transform(blobs))


# -- two views: the model of every solver saves and loads; stores of earlier versions load --------

TWO_VIEW_SOLVERS = [("KernelCCA", {"solver": "dsgd"}), ("KernelCCA", {"solver": "lobpcg"}),
                    ("KernelCCA", {"solver": "rca"}), ("KernelCCA", {"solver": "rca", "features": "fourier"}),
                    ("KernelCCA", {"solver": "exact"}), ("KernelSVD", {"solver": "exact"})]


@pytest.mark.parametrize(("name", "params"), TWO_VIEW_SOLVERS,
                         ids=[f"{n}-{'-'.join(p.values())}" for n, p in TWO_VIEW_SOLVERS])
def test_two_view_models_of_every_solver_save_and_load(tmp_path, name, params):
    X, _ = _data()
    A, B = X[:, :3], X[:, 3:]
    est = getattr(dsgd_dask, name)(2, **SMALL, **params).fit(A, B)
    back = dsgd_dask.load(est.save(tmp_path / "m.zarr"))
    assert type(back) is type(est)
    assert back.get_params() == est.get_params()
    assert (back.solver_, back.n_iter_, back.n_features_) == (est.solver_, est.n_iter_, est.n_features_)
    assert back.bandwidth_ == est.bandwidth_
    for a, b in zip(back.transform(A, B), est.transform(A, B), strict=True):
        np.testing.assert_array_equal(a, b)
    values = "correlations_" if name == "KernelCCA" else "singular_values_"
    np.testing.assert_array_equal(getattr(back, values), getattr(est, values))
    if params["solver"] == "dsgd":  # a loaded model of steps continues as the original does
        a = pickle.loads(pickle.dumps(est)).partial_fit(A, B)
        np.testing.assert_array_equal(back.partial_fit(A, B).transform(A), a.transform(A))
    else:
        with pytest.raises(ValueError, match=f"partial_fit takes doubly stochastic steps.*solver='{params['solver']}'"):
            back.partial_fit(A, B)


@pytest.mark.parametrize(("old", "new"), [("passes", "lobpcg"), ("steps", "dsgd")])
def test_kcca_stores_of_earlier_versions_load(tmp_path, old, new):
    # a store written before the estimators took their problems' names and the solvers their
    # algorithms': DSGDKernelCCA, solver "passes" or "steps", the public n_passes_
    X, _ = _data()
    A, B = X[:, :3], X[:, 3:]
    est = dsgd_dask.KernelCCA(2, **SMALL, solver=new).fit(A, B)
    path = est.save(tmp_path / "old.zarr")
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["estimator"] = "DSGDKernelCCA"
    group.attrs["params"] = {**group.attrs["params"], "solver": old}
    fitted = dict(group.attrs["fitted"])
    fitted["resolved_params"] = {**fitted["resolved_params"], "solver": old}
    fitted["n_passes_"] = fitted.pop("n_calls")
    del fitted["solver_"]
    group.attrs["fitted"] = fitted
    _seal(group)
    back = dsgd_dask.load(path)
    assert (type(back).__name__, back.solver, back.solver_) == ("KernelCCA", new, new)
    assert not hasattr(back, "n_passes_")
    for a, b in zip(back.transform(A, B), est.transform(A, B), strict=True):
        np.testing.assert_array_equal(a, b)


def test_ksvd_store_of_an_earlier_version_loads(tmp_path):
    # KernelSVD had no solver parameter: its stores were all of steps
    X, _ = _data()
    A, B = X[:, :3], X[:, 3:]
    est = dsgd_dask.KernelSVD(2, **SMALL).fit(A, B)
    path = est.save(tmp_path / "old.zarr")
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["estimator"] = "DSGDKernelSVD"
    group.attrs["params"] = {k: v for k, v in group.attrs["params"].items() if k != "solver"}
    fitted = dict(group.attrs["fitted"])
    fitted["resolved_params"] = {k: v for k, v in fitted["resolved_params"].items() if k != "solver"}
    fitted["n_passes_"] = fitted.pop("n_calls")
    del fitted["solver_"]
    group.attrs["fitted"] = fitted
    _seal(group)
    back = dsgd_dask.load(path)
    assert (back.solver, back.solver_) == ("auto", "dsgd")
    for a, b in zip(back.transform(A, B), est.transform(A, B), strict=True):
        np.testing.assert_array_equal(a, b)
    # and it continues the stream as the original does
    np.testing.assert_array_equal(back.partial_fit(A, B).transform(A), est.partial_fit(A, B).transform(A))
