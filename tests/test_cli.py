"""The ``dsgd-dask`` command line: round trips through Zarr stores in new processes, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import dsgd_dask
from dsgd_dask.cli import _io, main
from dsgd_dask.datasets import load_a9a, load_mnist

PCA_SET = ["n_components=3", "n_features=256", "random_state=0"]
CCA_SET = ["n_components=3", "n_features=256", "block_size=128", "batch_size=64", "max_iter=40", "random_state=0"]
SVC_SET = ["alpha=1e-3", "n_features=256", "block_size=128", "batch_size=64", "max_iter=60", "random_state=0"]


def cli(*args, ok: bool = True) -> subprocess.CompletedProcess:
    """``python -m dsgd_dask ARGS`` in a new process."""
    proc = subprocess.run([sys.executable, "-m", "dsgd_dask", *map(str, args)], capture_output=True, text=True,
                          timeout=120)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def sets(values) -> list[str]:
    return [a for v in values for a in ("--set", v)]


def leftovers(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*"))


def params(values) -> dict:
    from dsgd_dask.cli import parse_set

    return parse_set(values, {v.split("=")[0]: None for v in values})


@pytest.fixture(scope="module")
def mnist():
    X, y = load_mnist("train", sample=True)
    return (X[:600] / 255.0).astype(np.float32), y[:600]


def write_group(path: Path, chunks: int = 100, **arrays) -> Path:
    group = zarr.open_group(str(path), mode="w")
    for name, arr in arrays.items():
        group.create_array(name, data=arr, chunks=(chunks, *arr.shape[1:]))
    return path


# -- round trips -------------------------------------------------------------------------------
def test_pca_round_trip_xarray(tmp_path, mnist):
    X, y = mnist
    coords = {"sample": np.arange(1000, 1600), "pixel": np.arange(784)}
    ds = xr.Dataset({"X": (("sample", "pixel"), X), "digit": ("sample", y)}, coords=coords)
    ds.isel(sample=slice(0, 400)).chunk({"sample": 100}).to_zarr(tmp_path / "train.zarr", consolidated=False)
    ds.isel(sample=slice(400, None)).chunk({"sample": 80}).to_zarr(tmp_path / "test.zarr", consolidated=False)
    model_path, out = tmp_path / "kpca.zarr", tmp_path / "components.zarr"

    cli("fit", "pca", tmp_path / "train.zarr", "--var", "X", *sets(PCA_SET), "--out", model_path, "--quiet")
    info = json.loads(cli("info", model_path, "--json").stdout)
    assert info["estimator"] == "KernelPCA"
    assert info["fitted"]["n_features_in_"] == 784
    assert info["fitted"]["n_outputs"] == 3
    assert info["fitted"]["feature_dim_"] == "pixel"
    assert info["parameters"]["n_components"] == 3
    assert info["format_version"] == 3
    assert len(info["values"]["eigenvalues"]) == 3
    cli("transform", model_path, tmp_path / "test.zarr", "--var", "X", "--out", out)

    model = dsgd_dask.load(model_path)
    Xtest = xr.open_zarr(tmp_path / "test.zarr", consolidated=False)["X"]
    written = xr.open_zarr(out, consolidated=False)["components"]
    assert written.dims == ("sample", "component")
    np.testing.assert_array_equal(written["sample"], np.arange(1400, 1600))  # coordinates kept
    np.testing.assert_array_equal(written.values, model.transform(Xtest).values)
    assert not leftovers(out)

    with dask.config.set(scheduler="threads"):
        ref = dsgd_dask.KernelPCA(**params(PCA_SET)).fit(
            xr.open_zarr(tmp_path / "train.zarr", consolidated=False)["X"])
    np.testing.assert_array_equal(model.model_.coef, ref.model_.coef)
    np.testing.assert_array_equal(written.values, ref.transform(Xtest).values)


def test_cca_round_trip_mnist_halves(tmp_path, mnist):
    X, _ = mnist
    img = X.reshape(-1, 28, 28)
    left, right = img[:, :, :14].reshape(-1, 392), img[:, :, 14:].reshape(-1, 392)
    write_group(tmp_path / "train.zarr", left=left[:400], right=right[:400])
    write_group(tmp_path / "test.zarr", left=left[400:], right=right[400:], chunks=64)
    model_path, out = tmp_path / "cca.zarr", tmp_path / "variates.zarr"

    cli("fit", "cca", tmp_path / "train.zarr", "--var", "left", "--y", "right", *sets(CCA_SET), "--out", model_path)
    info = cli("info", model_path).stdout
    assert "KernelCCA" in info
    assert "n_features_in_=392, n_features_in_y_=392" in info
    cli("transform", model_path, tmp_path / "test.zarr", "--var", "left", "--y", "right", "--out", out)
    evaluated = json.loads(cli("evaluate", model_path, tmp_path / "test.zarr", "--var", "left", "--y", "right",
                               "--json").stdout)

    model = dsgd_dask.load(model_path)
    Xt = da.from_zarr(str(tmp_path / "test.zarr"), component="left")
    Yt = da.from_zarr(str(tmp_path / "test.zarr"), component="right")
    U, V = dask.compute(*model.transform(Xt, Yt))
    group = zarr.open_group(str(out), mode="r")
    np.testing.assert_array_equal(group["U"][...], U)
    np.testing.assert_array_equal(group["V"][...], V)
    assert group.attrs["dsgd_dask_output"]["estimator"] == "KernelCCA"
    assert evaluated["score"] == pytest.approx(model.score(Xt, Yt), rel=1e-12)

    with dask.config.set(scheduler="threads"):
        ref = dsgd_dask.KernelCCA(**params(CCA_SET)).fit(
            da.from_zarr(str(tmp_path / "train.zarr"), component="left"),
            da.from_zarr(str(tmp_path / "train.zarr"), component="right"))
    for a, b in zip(model.models_, ref.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)
    np.testing.assert_array_equal(group["U"][...], ref.transform(Xt).compute())


def test_classifier_round_trip_a9a(tmp_path):
    X, y = load_a9a("train", sample=True)
    Xt, yt = load_a9a("test", sample=True)
    write_group(tmp_path / "train.zarr", X=X[:500], y=y[:500])
    np.save(tmp_path / "test.npy", Xt[:300])
    np.save(tmp_path / "labels.npy", yt[:300])
    model_path, out = tmp_path / "svc.zarr", tmp_path / "labels.zarr"

    cli("fit", "svc", tmp_path / "train.zarr", "--var", "X", "--y", "y", *sets(SVC_SET), "--out", model_path,
        "--scheduler", "synchronous")
    info = json.loads(cli("info", model_path, "--json", "--verify").stdout)
    assert info["values"]["classes"] == [-1, 1]
    assert info["verified"]
    cli("predict", model_path, tmp_path / "test.npy", "--chunks", "128", "--out", out)
    evaluated = json.loads(cli("evaluate", model_path, tmp_path / "test.npy", "--y", tmp_path / "labels.npy",
                               "--json").stdout)

    model = dsgd_dask.load(model_path)
    written = zarr.open_group(str(out), mode="r")["prediction"]
    assert written.chunks == (128,)
    np.testing.assert_array_equal(written[...], model.predict(Xt[:300]))
    assert evaluated["metric"] == "accuracy"
    assert evaluated["score"] == model.score(Xt[:300], yt[:300]) > 0.75

    ref = dsgd_dask.KernelSVC(**params(SVC_SET)).fit(
        da.from_zarr(str(tmp_path / "train.zarr"), component="X"),
        da.from_zarr(str(tmp_path / "train.zarr"), component="y"))
    np.testing.assert_array_equal(model.model_.coef, ref.model_.coef)
    np.testing.assert_array_equal(written[...], ref.predict(Xt[:300]))


def test_preprocess_fit_predict_round_trip(tmp_path, mnist):
    """``preprocess`` writes what the library's pipeline computes; ``--like`` applies the fitted projection."""
    from sklearn.pipeline import make_pipeline

    from dsgd_dask import SamplePCA, UnitNorm

    X, y = mnist
    raw = (X * 255).astype(np.uint8)
    write_group(tmp_path / "train.zarr", X=raw[:400], y=y[:400])
    write_group(tmp_path / "test.zarr", chunks=80, X=raw[400:], y=y[400:])
    train, test = tmp_path / "train20.zarr", tmp_path / "test20.zarr"

    cli("preprocess", tmp_path / "train.zarr", "--var", "X", "--unit-norm", "--pca", "20", "--pca-samples", "300",
        "--seed", "3", "--keep", "y", "--out", train, "-q")
    cli("preprocess", tmp_path / "test.zarr", "--var", "X", "--like", train, "--keep", "y", "--out", test, "-q")

    pipe = make_pipeline(UnitNorm(), SamplePCA(20, n_samples=300, random_state=3))
    pipe.fit(da.from_zarr(str(tmp_path / "train.zarr"), component="X"))
    got_train, got_test = zarr.open_group(str(train), mode="r"), zarr.open_group(str(test), mode="r")
    assert got_test["X"].dtype == np.float32
    assert got_test["X"].chunks == (80, 20)
    np.testing.assert_array_equal(got_train["X"][...], pipe.transform(raw[:400]).astype(np.float32))
    np.testing.assert_array_equal(got_test["X"][...], pipe.transform(raw[400:]).astype(np.float32))
    np.testing.assert_array_equal(got_test["y"][...], y[400:])
    np.testing.assert_array_equal(got_test["pca_components"][...], pipe[1].components_)
    recipe = dict(got_test.attrs)["dsgd_dask_output"]["preprocessing"]
    assert (recipe["unit_norm"], recipe["pca"], recipe["pca_samples"], recipe["seed"]) == (True, 20, 300, 3)
    assert recipe["explained_variance_ratio"] == pytest.approx(pipe[1].explained_variance_ratio_.sum())

    model_path = tmp_path / "logistic.zarr"
    cli("fit", "logistic", train, "--var", "X", "--y", "y", *sets(SVC_SET), "--out", model_path, "-q")
    evaluated = json.loads(cli("evaluate", model_path, test, "--var", "X", "--y", "y", "--json").stdout)
    ref = dsgd_dask.KernelLogisticRegression(**params(SVC_SET)).fit(da.from_zarr(str(train), component="X"),
                                                                    da.from_zarr(str(train), component="y"))
    assert evaluated["score"] == ref.score(got_test["X"][...], y[400:]) > 0.6


def test_preprocess_xarray_keeps_the_row_coordinates(tmp_path, mnist):
    X, y = mnist
    coords = {"sample": np.arange(1000, 1300), "pixel": np.arange(784)}
    ds = xr.Dataset({"X": (("sample", "pixel"), X[:300]), "digit": ("sample", y[:300])}, coords=coords)
    ds.chunk({"sample": 100}).to_zarr(tmp_path / "data.zarr", consolidated=False)
    out = tmp_path / "pre.zarr"
    cli("preprocess", tmp_path / "data.zarr", "--var", "X", "--pca", "5", "--pca-samples", "200", "--keep", "digit",
        "--out", out, "-q")
    got = xr.open_zarr(out, consolidated=False)
    assert got["X"].dims == ("sample", "component")
    np.testing.assert_array_equal(got["sample"].values, coords["sample"])
    np.testing.assert_array_equal(got["digit"].values, y[:300])
    pca = dsgd_dask.SamplePCA(5, n_samples=200, random_state=0).fit(X[:300])
    np.testing.assert_allclose(got["X"].values, pca.transform(X[:300]), rtol=0, atol=1e-5)


def test_preprocess_refuses_bad_input(tmp_path, capsys):
    X = np.random.default_rng(0).random((300, 10)).astype(np.float32)
    X[250, 3] = np.nan
    write_group(tmp_path / "nan.zarr", X=X, y=np.arange(300))
    write_group(tmp_path / "wide.zarr", X=np.ones((300, 12), np.float32))
    out, pre = tmp_path / "out.zarr", tmp_path / "pre.zarr"
    code, err = run(["preprocess", tmp_path / "nan.zarr", "--var", "X", "--unit-norm", "--out", out], capsys)
    assert_error(code, err, 1, "NaN or infinity")
    assert not out.exists()
    assert not leftovers(out)
    code, err = run(["preprocess", tmp_path / "nan.zarr", "--var", "X", "--out", out], capsys)
    assert_error(code, err, 2, "nothing to do")
    X[250, 3] = 0.0
    write_group(tmp_path / "clean.zarr", X=X)
    assert run(["preprocess", tmp_path / "clean.zarr", "--pca", "4", "--out", pre, "-q"], capsys)[0] == 0
    code, err = run(["preprocess", tmp_path / "wide.zarr", "--like", pre, "--out", out], capsys)
    assert_error(code, err, 1, "12 features", "takes 10")
    code, err = run(["preprocess", tmp_path / "clean.zarr", "--like", tmp_path / "wide.zarr", "--out", out], capsys)
    assert_error(code, err, 1, "not written by `dsgd-dask preprocess`")
    code, err = run(["preprocess", tmp_path / "clean.zarr", "--like", pre, "--pca", "3", "--out", out], capsys)
    assert_error(code, err, 2, "--like")
    code, err = run(["preprocess", tmp_path / "clean.zarr", "--pca", "0", "--out", out], capsys)
    assert_error(code, err, 2, "--pca must be a positive integer")
    code, err = run(["preprocess", tmp_path / "clean.zarr", "--pca", "11", "--out", out], capsys)
    assert_error(code, err, 1, "n_components=11")
    code, err = run(["preprocess", tmp_path / "nan.zarr", "--var", "X", "--unit-norm", "--keep", "nope", "--out",
                     out], capsys)
    assert_error(code, err, 1, "no variable 'nope'")
    assert not out.exists()
    assert not leftovers(out)


def test_ridge_solvers_from_the_command_line(tmp_path, capsys):
    # the solver is a parameter like any other: the exact solve through the stores, and its model
    # store says which solver ran; the passes checkpoint
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=400)
    write_group(tmp_path / "train.zarr", X=X[:300], y=y[:300])
    np.save(tmp_path / "test.npy", X[300:])
    model_path, out = tmp_path / "ridge.zarr", tmp_path / "pred.zarr"
    ridge_set = ["solver=exact", "alpha=1e-3", "random_state=0"]
    cli("fit", "ridge", tmp_path / "train.zarr", "--var", "X", "--y", "y", *sets(ridge_set), "--out", model_path,
        "-q")
    info = json.loads(cli("info", model_path, "--json").stdout)
    assert info["fitted"]["solver_"] == "exact"
    assert info["fitted"]["n_features_"] == 300  # every training row
    code = main(["predict", str(model_path), str(tmp_path / "test.npy"), "--out", str(out), "-q"])
    assert code == 0
    ref = dsgd_dask.KernelRidge(**params(ridge_set)).fit(X[:300], y[:300])
    np.testing.assert_allclose(zarr.open_group(str(out), mode="r")["prediction"][...], ref.predict(X[300:]),
                               rtol=0, atol=1e-12)
    # solver=cg checkpoints after every pass: run again, the fit resumes after its last pass (its seed
    # saved with it, random_state=None here): the same model
    for name in ("cg.zarr", "cg-again.zarr"):
        assert main(["fit", "ridge", str(tmp_path / "train.zarr"), "--var", "X", "--y", "y", "--set", "solver=cg",
                     "--checkpoint", str(tmp_path / "ckpt.zarr"), "--out", str(tmp_path / name), "-q"]) == 0
    assert (tmp_path / "ckpt.zarr").exists()
    first, again = (dsgd_dask.load(tmp_path / name) for name in ("cg.zarr", "cg-again.zarr"))
    assert first.solver_ == again.solver_ == "cg"
    np.testing.assert_array_equal(again.model_.coef, first.model_.coef)


# -- bad input ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small fitted PCA model store and data stores around it."""
    root = tmp_path_factory.mktemp("saved")
    rng = np.random.default_rng(0)
    write_group(root / "data.zarr", X=rng.normal(size=(300, 6)), W=rng.normal(size=(300, 4)))
    dsgd_dask.KernelPCA(2, n_features=64, random_state=0).fit(rng.normal(size=(300, 6))).save(root / "model.zarr")
    return root


def run(argv, capsys) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def assert_error(code: int, err: str, expected: int, *words: str) -> None:
    assert code == expected
    lines = err.strip().splitlines()
    assert lines[-1].startswith("dsgd-dask: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[-1], lines[-1]


def test_corrupt_model(tmp_path, saved, capsys):
    import shutil

    model = shutil.copytree(saved / "model.zarr", tmp_path / "model.zarr")
    chunk = max((p for p in (model / "coef").rglob("*") if p.is_file() and p.name != "zarr.json"),
                key=lambda p: p.stat().st_size)
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    out = tmp_path / "out.zarr"
    code, err = run(["transform", model, saved / "data.zarr", "--var", "X", "--out", out], capsys)
    assert_error(code, err, 1, "corrupt", "coef")
    assert not out.exists()
    assert not leftovers(out)
    code, err = run(["info", model, "--verify"], capsys)
    assert_error(code, err, 1, "corrupt")
    code, err = run(["info", model, "--verify", "--debug"], capsys)
    assert code == 1
    assert "Traceback" in err


def test_foreign_store_in_a_new_process_is_one_line(tmp_path, saved):
    out = tmp_path / "out.zarr"
    proc = cli("predict", saved / "data.zarr", saved / "data.zarr", "--var", "X", "--out", out, ok=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("dsgd-dask: error: ")
    assert "not a dsgd_dask model store" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize(("argv", "words"), [
    (["transform", "{data}", "{data}", "--var", "X"], ("not a dsgd_dask model store", "data store")),
    (["info", "{data}"], ("not a dsgd_dask model store",)),
    (["transform", "{model}", "{data}", "--var", "W"], ("4 features", "expecting 6")),
    (["transform", "{model}", "{data}", "--var", "nope"], ("no variable 'nope'", "['W', 'X']")),
    (["transform", "{model}", "{data}"], ("2 2-D arrays", "--var")),
    (["transform", "{model}", "{data}/missing.zarr"], ("no Zarr store",)),
    (["transform", "{model}", "{model}"], ("model store, not a data store",)),
])
def test_bad_inputs(tmp_path, saved, capsys, argv, words):
    out = tmp_path / "out.zarr"
    argv = [a.format(data=saved / "data.zarr", model=saved / "model.zarr") for a in argv]
    if argv[0] != "info":
        argv += ["--out", out]
    code, err = run(argv, capsys)
    assert_error(code, err, 1, *words)
    assert not out.exists()
    assert not leftovers(out)


def test_usage_errors(tmp_path, saved, capsys):
    data, out = saved / "data.zarr", tmp_path / "m.zarr"
    with pytest.raises(SystemExit) as exc:
        main(["fit", "kmeans", str(data), "--out", str(out)])
    assert exc.value.code == 2
    assert "invalid choice: 'kmeans'" in capsys.readouterr().err
    code, err = run(["fit", "pca", data, "--var", "X", "--set", "n_compnents=3", "--out", out], capsys)
    assert_error(code, err, 2, "unknown parameter 'n_compnents'", "n_components", "kernel")
    code, err = run(["fit", "svc", data, "--var", "X", "--out", out], capsys)
    assert_error(code, err, 2, "needs --y")
    code, err = run(["predict", saved / "model.zarr", data, "--var", "X", "--out", out], capsys)
    assert_error(code, err, 2, "use `dsgd-dask transform`")
    assert not out.exists()
    code, err = run(["fit", "pca", data, "--var", "X", "--set", "n_components=0", "--out", out, "-q"], capsys)
    assert_error(code, err, 1, "n_components")
    assert not out.exists()


def test_existing_output_is_kept(tmp_path, saved, capsys):
    out = tmp_path / "out.zarr"
    out.mkdir()
    code, err = run(["transform", saved / "model.zarr", saved / "data.zarr", "--var", "X", "--out", out], capsys)
    assert_error(code, err, 1, "exists", "--overwrite")
    assert out.is_dir()
    assert not any(out.iterdir())
    argv = ["transform", saved / "model.zarr", saved / "data.zarr", "--var", "X", "--out", out, "--overwrite", "-q"]
    assert run(argv, capsys)[0] == 0
    assert zarr.open_group(str(out), mode="r")["components"].shape == (300, 2)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError])
def test_interrupted_transform_leaves_nothing(tmp_path, saved, capsys, monkeypatch, exc):
    write = _io._write_group
    seen = {}

    def interrupted(tmp, arrays, attrs):
        first = dict(list(arrays.items())[:1])
        write(tmp, first, attrs)  # the first array is complete on disk, then the write is interrupted
        seen["tmp"] = tmp
        assert any(tmp.iterdir())
        raise exc("No space left on device")

    monkeypatch.setattr(_io, "_write_group", interrupted)
    out = tmp_path / "out.zarr"
    code, err = run(["transform", saved / "model.zarr", saved / "data.zarr", "--var", "X", "--out", out], capsys)
    assert code == (130 if exc is KeyboardInterrupt else 1)
    assert ("interrupted" if exc is KeyboardInterrupt else "No space left") in err
    assert not out.exists()
    assert not seen["tmp"].exists()
    assert not leftovers(out)


@pytest.mark.parametrize("scheduler", ["threads", "synchronous"])
def test_interrupt_inside_a_chunk_task(tmp_path, saved, capsys, monkeypatch, scheduler):
    """A KeyboardInterrupt raised while dask computes the fifth chunk: nothing at the output path.

    On threads, other chunks are being written when it arrives: they finish before the
    temporary store is removed, so none of them writes into it afterwards.
    """
    import threading
    import time

    from dsgd_dask.cli import _commands

    calls, lock = {"n": 0}, threading.Lock()
    original = _commands.row_chunks

    def interrupting(data, rows):
        def block(b):
            with lock:
                calls["n"] += 1
                n = calls["n"]
            if n == 5:
                raise KeyboardInterrupt
            time.sleep(0.05)
            return b
        return original(data, 20).map_blocks(block, dtype=np.float64)

    monkeypatch.setattr(_commands, "row_chunks", interrupting)
    out = tmp_path / "out.zarr"
    argv = ["transform", saved / "model.zarr", saved / "data.zarr", "--var", "X", "--out", out,
            "--scheduler", scheduler, "--n-workers", "4"]
    code, err = run(argv, capsys)
    assert code == 130
    assert "interrupted" in err
    time.sleep(0.2)
    assert 5 <= calls["n"] < 15
    assert not out.exists()
    assert not leftovers(out)


def test_help_version_and_demo(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"dsgd-dask {dsgd_dask.__version__}"
    for command in ("fit", "transform", "predict", "evaluate", "info", "demo"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "example" in text
        assert "--debug" in text
    assert main(["demo", "--out", str(tmp_path), "--quiet"]) == 0
    summary = json.loads((tmp_path / "demo.json").read_text())
    for fit in summary["fits"].values():
        assert np.max(np.abs(fit["relative_error"])) < 0.05
    assert dsgd_dask.load(tmp_path / "model.zarr").n_features_in_ == 1
