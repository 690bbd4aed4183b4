"""Hostile command lines: each bad option refused in one line (exit status 2) before any work, inputs untouched."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

import dsgd_dask
from dsgd_dask.cli import main


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
    """A data group (X, Y), the same data as .npy files, and fitted PCA, CCA and ridge model stores."""
    root = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    Y = X[:, :3] + 0.1 * rng.normal(size=(80, 3))
    group = zarr.open_group(str(root / "data.zarr"), mode="w")
    group.create_array("X", data=X, chunks=(40, 4))
    group.create_array("Y", data=Y, chunks=(40, 3))
    np.save(root / "x.npy", X)
    np.save(root / "y.npy", Y)
    dsgd_dask.KernelPCA(2, n_features=32, random_state=0).fit(X).save(root / "pca.zarr")
    dsgd_dask.KernelCCA(2, n_features=32, random_state=0).fit(X, Y).save(root / "cca.zarr")
    dsgd_dask.KernelRidge(solver="exact", random_state=0).fit(X, Y[:, 0]).save(root / "ridge.zarr")
    return root


@pytest.fixture
def work(stores, tmp_path) -> Path:
    """A private copy of the stores, for commands that must leave them as they are."""
    for path in stores.iterdir():
        if path.is_dir():
            shutil.copytree(path, tmp_path / path.name)
        else:
            shutil.copy(path, tmp_path / path.name)
    return tmp_path


def snapshot(root: Path) -> dict:
    """Every entry under ``root``: the bytes of each file, None for a folder."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def run(argv, capsys) -> tuple[int, str]:
    """``main(argv)``: the exit status (argument errors included) and stderr."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def one_line(code: int, err: str, expected: int, *words: str) -> str:
    """Assert the exit status and a single line of stderr, without a traceback, holding ``words``."""
    assert code == expected, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dsgd-dask: error: "), err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def refused(argv, capsys, root: Path, *words: str) -> str:
    """Assert ``argv`` is refused (status 2, one line naming ``words``) and nothing under ``root`` changed."""
    before = snapshot(root)
    line = one_line(*run(argv, capsys), 2, *words)
    assert snapshot(root) == before
    return line


# -- --chunks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-5"])
@pytest.mark.parametrize(("command", "model", "data"), [
    ("transform", "pca.zarr", ["data.zarr", "--var", "X"]),
    ("transform", "pca.zarr", ["x.npy"]),
    ("transform", "cca.zarr", ["x.npy", "--y", "y.npy"]),
    ("predict", "ridge.zarr", ["x.npy"]),
    ("predict", "ridge.zarr", ["data.zarr", "--var", "X"]),
])
def test_chunks_must_be_positive(work, capsys, value, command, model, data):
    # a zero used to divide by zero inside dask (Zarr) or fall back to 8192 rows (.npy); a negative
    # number reached dask's own message
    argv = [command, work / model, *(work / d if d.endswith((".zarr", ".npy")) else d for d in data),
            "--chunks", value, "--out", work / "out.zarr", "-q"]
    refused(argv, capsys, work, "--chunks", value)


def test_chunks_apply_to_npy_inputs(stores, tmp_path, capsys):
    X, Y = np.load(stores / "x.npy"), np.load(stores / "y.npy")
    out = tmp_path / "uv.zarr"
    assert main(["transform", str(stores / "cca.zarr"), str(stores / "x.npy"), "--y", str(stores / "y.npy"),
                 "--chunks", "16", "--out", str(out), "-q"]) == 0
    group = zarr.open_group(str(out), mode="r")
    model = dsgd_dask.load(stores / "cca.zarr")
    U, V = (np.asarray(a) for a in model.transform(X, Y))
    assert group["U"].chunks == group["V"].chunks == (16, 2)
    np.testing.assert_array_equal(group["U"][...], U)  # transforms give the same bits whatever the chunking
    np.testing.assert_array_equal(group["V"][...], V)
    out = tmp_path / "pred.zarr"
    assert main(["predict", str(stores / "ridge.zarr"), str(stores / "x.npy"), "--chunks", "16", "--out", str(out),
                 "-q"]) == 0
    written = zarr.open_group(str(out), mode="r")["prediction"]
    assert written.chunks == (16,)
    np.testing.assert_array_equal(written[...], np.asarray(dsgd_dask.load(stores / "ridge.zarr").predict(X)))


# -- outputs apart from the inputs -------------------------------------------------------------
@pytest.mark.parametrize(("argv", "words"), [
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "data.zarr", "--overwrite"],
     ("--out", "is the same path as INPUT")),
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "data.zarr/X/new.zarr"],
     ("--out", "is inside INPUT")),
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", ".", "--overwrite"], ("--out", "contains")),
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "pca.zarr", "--overwrite"],
     ("--out", "is the same path as MODEL")),
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "link.zarr", "--overwrite"],
     ("--out", "is the same path as INPUT")),
    (["transform", "cca.zarr", "x.npy", "--y", "y.npy", "--out", "y.npy", "--overwrite"],
     ("--out", "is the same path as --y")),
    (["predict", "ridge.zarr", "x.npy", "--out", "x.npy", "--overwrite"], ("--out", "is the same path as INPUT")),
    (["fit", "pca", "data.zarr", "--var", "X", "--out", "data.zarr", "--overwrite"],
     ("--out", "is the same path as INPUT")),
    (["fit", "cca", "data.zarr", "--var", "X", "--y", "y.npy", "--out", "y.npy", "--overwrite"],
     ("--out", "is the same path as --y")),
    (["fit", "pca", "data.zarr", "--var", "X", "--checkpoint", "data.zarr/ckpt.zarr", "--out", "m.zarr"],
     ("--checkpoint", "is inside INPUT")),
])
def test_output_overlapping_an_input_is_refused(work, capsys, monkeypatch, argv, words):
    # the paths are compared resolved: relative to the working folder, through symbolic links
    (work / "link.zarr").symlink_to(work / "data.zarr", target_is_directory=True)
    monkeypatch.chdir(work)
    refused(argv, capsys, work, *words)


def test_output_containing_the_inputs_by_absolute_path(work, capsys):
    refused(["transform", work / "pca.zarr", work / "data.zarr", "--var", "X", "--out", work, "--overwrite"],
            capsys, work, "--out", "contains MODEL")


@pytest.mark.parametrize("command", ["transform", "fit"])
def test_overwrite_replaces_only_a_zarr_store(work, capsys, monkeypatch, command):
    # --overwrite used to replace whatever was at --out: a folder of other files, a file
    monkeypatch.chdir(work)
    (work / "notes").mkdir()
    (work / "notes" / "keep.txt").write_text("not a store")
    (work / "notes.txt").write_text("not a store")
    argv = {"transform": ["transform", "pca.zarr"], "fit": ["fit", "pca", "--set", "n_components=2"]}[command]
    argv += ["data.zarr", "--var", "X", "--overwrite", "-q"]
    for out in ("notes", "notes.txt"):
        refused([*argv, "--out", out], capsys, work, f"--out {out}", "not a Zarr store", "--overwrite")
    # a Zarr store, or an empty folder, is replaced
    (work / "empty").mkdir()
    for out in ("empty", "cca.zarr"):
        assert main([*argv, "--out", out]) == 0
        assert (work / out / "zarr.json").is_file()
    assert (work / "notes" / "keep.txt").read_text() == "not a store"


@pytest.mark.parametrize(("checkpoint", "out", "words"), [
    ("p.zarr", "p.zarr", ("--out p.zarr is the same path as --checkpoint p.zarr",)),
    ("m.zarr/ckpt.zarr", "m.zarr", ("--out m.zarr contains --checkpoint",)),
    ("ckpt.zarr", "ckpt.zarr/m.zarr", ("--out ckpt.zarr/m.zarr is inside --checkpoint",)),
])
def test_checkpoint_at_the_output_is_refused_before_fitting(work, capsys, monkeypatch, checkpoint, out, words):
    # it used to fit to the end, writing the checkpoint at --out, then refuse to save the model there
    fits = []
    monkeypatch.setattr(dsgd_dask.KernelPCA, "fit", lambda self, *a, **k: fits.append(1) or self)
    monkeypatch.chdir(work)
    refused(["fit", "pca", "data.zarr", "--var", "X", "--checkpoint", checkpoint, "--out", out, "-q"], capsys, work,
            *words)
    assert not fits


# -- other options -----------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "words"), [
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "o.zarr", "--n-workers", "0"],
     ("--n-workers", "positive")),
    (["evaluate", "pca.zarr", "data.zarr", "--var", "X", "--n-workers", "-1"], ("--n-workers", "positive")),
    (["fit", "pca", "data.zarr", "--var", "X", "--out", "o.zarr", "--scheduler", "local", "--n-workers", "0"],
     ("--n-workers", "positive")),
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "o.zarr", "--scheduler", "thread"],
     ("--scheduler", "'thread'", "tcp://host:8786")),
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "o.zarr", "--scheduler", "tcp://127.0.0.1:1",
      "--n-workers", "2"], ("--n-workers", "tcp://127.0.0.1:1")),
    (["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "o.zarr", "--y-var", "Y"], ("--y-var", "--y")),
    (["fit", "pca", "data.zarr", "--var", "X", "--set", "checkpoint='c.zarr'", "--out", "o.zarr"],
     ("--set checkpoint=", "--checkpoint")),
    (["demo", "--seed", "-1", "--out", "demo"], ("--seed", "non-negative")),
    (["demo", "--out", "x.npy"], ("--out x.npy", "file")),
])
def test_option_out_of_range_is_refused(work, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(work)
    refused([*argv, "-q"], capsys, work, *words)


@pytest.mark.parametrize(("options", "words"), [
    (["--chunks", "abc"], ("--chunks", "'abc'")),
    (["--n-workers", "two"], ("--n-workers", "'two'")),
    (["--out", "other.zarr"], ("--out", "given twice", "'o.zarr'", "'other.zarr'")),
    (["--var", "Y"], ("--var", "given twice")),
    (["--bogus"], ("--bogus",)),
])
def test_argument_errors_are_one_line(work, capsys, monkeypatch, options, words):
    # argparse printed the usage too, and kept the last of an option given twice
    monkeypatch.chdir(work)
    refused(["transform", "pca.zarr", "data.zarr", "--var", "X", "--out", "o.zarr", *options, "-q"], capsys, work,
            *words, "dsgd-dask transform --help")


# -- errors of the estimator and beyond ----------------------------------------------------------
def test_set_value_errors_are_one_line(work, capsys, monkeypatch):
    monkeypatch.chdir(work)
    base = ["fit", "pca", "data.zarr", "--var", "X", "--out", "m.zarr", "-q"]
    before = snapshot(work)
    for value, words in [("n_components='zz'", ("n_components", "'zz'")), ("kernel=bogus", ("kernel", "'bogus'")),
                         ("bandwidth=-1", ("bandwidth",)), ("random_state=-1", ("random_state",))]:
        one_line(*run([*base, "--set", value], capsys), 1, *words)
    assert snapshot(work) == before

    def out_of_memory(self, *args, **kwargs):
        raise MemoryError("Unable to allocate 745. GiB for an array with shape (200, 1000000000)")

    monkeypatch.setattr(dsgd_dask.KernelPCA, "fit", out_of_memory)
    one_line(*run(base, capsys), 1, "MemoryError", "745. GiB")
    monkeypatch.setattr(dsgd_dask.KernelPCA, "fit", lambda self, *a, **k: 1 // 0)
    one_line(*run(base, capsys), 1, "ZeroDivisionError", "--debug")
    code, err = run([*base, "--debug"], capsys)
    assert code == 1
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("dsgd-dask: error: ZeroDivisionError")
    assert snapshot(work) == before
