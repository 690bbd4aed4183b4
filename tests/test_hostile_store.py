"""Model stores under edits, concurrent writers and killed writers.

Every attribute of a store is checksummed, so an edited parameter or fitted value is
refused like an edited array; a reader running while another process replaces the store
gets the old model or the new one; the temporary directory of a killed writer is removed
by the next write to the same path, and those of running writers are left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

import dsgd_dask
from dsgd_dask.cli import main
from dsgd_dask.model import store
from dsgd_dask.model.store import StaleTemporaryWarning, StoreError, attributes_digest, read_store, write_store

EDITED = "attributes .* do not match their checksum: the store was edited or corrupted"


def _data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    return X, X[:, 0] * X[:, 1] + 0.1 * rng.normal(size=200)


def _ridge(alpha: float, seed: int) -> dsgd_dask.KernelRidge:
    X, y = _data()
    return dsgd_dask.KernelRidge(alpha, n_features=16, solver="exact", random_state=seed).fit(X, y)


@pytest.fixture(scope="module")
def ridge():
    return _ridge(1e-3, 0)


def _edit_attributes(path, edit) -> None:
    """Apply ``edit`` to the attributes in ``zarr.json``, as a text editor or a script would."""
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    edit(doc["attributes"])
    meta.write_text(json.dumps(doc, indent=2))


def _double_bandwidth(attrs: dict) -> None:
    for features in attrs["features"].values():
        features["kernel"]["bandwidth"] *= 2
    if "bandwidth_" in attrs["fitted"]:
        attrs["fitted"]["bandwidth_"] *= 2


def _cli(argv, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# -- edited attributes -------------------------------------------------------------------------

def test_doubled_bandwidth_is_refused_by_load_and_info_verify(ridge, tmp_path, capsys):
    X, _ = _data()
    path = ridge.save(tmp_path / "m.zarr")
    _edit_attributes(path, _double_bandwidth)
    with pytest.raises(StoreError, match=EDITED):
        dsgd_dask.load(path)
    code, _, err = _cli(["info", path, "--verify"], capsys)
    assert code == 1
    assert err.strip().startswith("dsgd-dask: error: ")
    assert "do not match their checksum" in err
    assert "edited or corrupted" in err
    assert "Traceback" not in err
    # without --verify, info shows the attributes as they are (to see what was changed)
    code, out, _ = _cli(["info", path], capsys)
    assert code == 0
    assert "KernelRidge" in out
    # the edit changes the model: sealed with a new digest, the store loads another model
    import zarr

    group = zarr.open_group(str(path), mode="r+")
    group.attrs["dsgd_dask"] = {**group.attrs["dsgd_dask"], "attributes_sha256": attributes_digest(group.attrs)}
    assert not np.array_equal(dsgd_dask.load(path).predict(X), ridge.predict(X))


def _add_attribute(attrs):
    attrs["note"] = "harmless?"


def _drop_digest(attrs):
    del attrs["dsgd_dask"]["attributes_sha256"]


def _edit_array_digest(attrs):
    attrs["dsgd_dask"]["arrays"]["coef_0"]["sha256"] = "0" * 64


def _change_parameter(attrs):
    attrs["params"]["alpha"] = 1.0


@pytest.mark.parametrize("edit", [_add_attribute, _drop_digest, _edit_array_digest, _change_parameter])
def test_any_edited_attribute_is_refused(ridge, tmp_path, edit):
    path = ridge.save(tmp_path / "m.zarr")
    _edit_attributes(path, edit)
    with pytest.raises(StoreError, match=EDITED):
        dsgd_dask.load(path)


def test_reformatted_metadata_still_loads(ridge, tmp_path):
    # the digest is over the values, not the bytes of zarr.json
    X, _ = _data()
    path = ridge.save(tmp_path / "m.zarr")
    _edit_attributes(path, lambda attrs: None)
    np.testing.assert_array_equal(dsgd_dask.load(path).predict(X), ridge.predict(X))


def test_edited_array_is_refused(ridge, tmp_path, capsys):
    path = ridge.save(tmp_path / "m.zarr")
    chunk = max((p for p in (path / "coef_0").rglob("*") if p.is_file() and p.name != "zarr.json"),
                key=lambda p: p.stat().st_size)
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="truncated or corrupt"):
        dsgd_dask.load(path)
    code, _, err = _cli(["info", path, "--verify"], capsys)
    assert code == 1
    assert "corrupt" in err


def test_edited_checkpoint_is_refused(tmp_path):
    path = write_store(tmp_path / "ckpt.zarr", "checkpoint", {"step": 10, "fingerprint": "f"},
                       {"coef": np.ones((4, 2))})
    assert read_store(path, "checkpoint")[0] == {"step": 10, "fingerprint": "f"}
    _edit_attributes(path, lambda attrs: attrs.update(step=20))
    with pytest.raises(StoreError, match=f"{EDITED}.*delete the checkpoint"):
        read_store(path, "checkpoint")


# -- a reader while another process replaces the store --------------------------------------------

READER = r"""
import json, os, sys, time
import numpy as np
import dsgd_dask

root = sys.argv[1]
X, pa, pb = (np.load(os.path.join(root, f)) for f in ("X.npy", "A.npy", "B.npy"))
seen = {"A": 0, "B": 0, "other": 0, "errors": []}
open(os.path.join(root, "ready"), "w").close()
while not os.path.exists(os.path.join(root, "stop")):
    try:
        pred = dsgd_dask.load(os.path.join(root, "m.zarr")).predict(X)
    except Exception as err:
        seen["errors"].append(f"{type(err).__name__}: {err}")
        continue
    seen["A" if np.array_equal(pred, pa) else "B" if np.array_equal(pred, pb) else "other"] += 1
json.dump(seen, open(os.path.join(root, "seen.json"), "w"))
"""


def test_reader_gets_the_old_or_the_new_model_while_another_process_saves(tmp_path):
    X, _ = _data()
    a, b = _ridge(1e-3, 0), _ridge(1e-1, 1)
    pa, pb = a.predict(X), b.predict(X)
    assert not np.array_equal(pa, pb)
    for name, arr in (("X", X), ("A", pa), ("B", pb)):
        np.save(tmp_path / f"{name}.npy", arr)
    path = a.save(tmp_path / "m.zarr")
    reader = subprocess.Popen([sys.executable, "-c", READER, str(tmp_path)])
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists():
            assert reader.poll() is None, "the reader process failed to start"
            assert time.monotonic() < deadline, "the reader process did not start"
            time.sleep(0.05)
        # the writer: B, A, B, ... replacing the store each time (without reading again after a
        # failed read, some 30 of the reader's loads fail during these saves)
        for i in range(100):
            (b if i % 2 == 0 else a).save(path, overwrite=True)
    finally:
        (tmp_path / "stop").touch()
        assert reader.wait(timeout=120) == 0
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["errors"] == []
    assert seen["other"] == 0
    assert min(seen["A"], seen["B"]) > 0, seen  # the loads overlapped the saves
    assert seen["A"] + seen["B"] >= 100, seen  # at least 200 calls in all: 100 saves, 100 loads or more
    assert [p.name for p in tmp_path.glob(".m.zarr.*")] == []


def test_damaged_store_without_a_writer_is_refused_at_once(ridge, tmp_path, monkeypatch):
    path = ridge.save(tmp_path / "m.zarr")
    _edit_attributes(path, _change_parameter)
    sleeps = []
    clock = SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: (sleeps.append(s), time.sleep(s)))
    monkeypatch.setattr(store, "time", clock)
    with pytest.raises(StoreError, match=EDITED):
        dsgd_dask.load(path)
    assert sleeps == []  # no writer: not read again
    with pytest.raises(FileNotFoundError):
        dsgd_dask.load(tmp_path / "nothing.zarr")
    assert sleeps == []
    # while a writer of the path runs, the read is made again until the time allowed is spent
    live = tmp_path / ".m.zarr.tmp-live"
    live.mkdir()
    (live / "writer.json").write_text(json.dumps({"pid": os.getpid(), "host": _host(), "started": None}))
    monkeypatch.setattr(store, "READ_RETRY_SECONDS", 0.05)
    with pytest.raises(StoreError, match=EDITED):
        dsgd_dask.load(path)
    assert len(sleeps) >= 1


# -- temporary directories of killed writers ---------------------------------------------------

def _host() -> str:
    import socket

    return socket.gethostname()


def _killed_writer(path) -> None:
    """A process that starts writing a store at ``path`` and is killed (SIGKILL) before it finishes."""
    pid = os.fork()
    if pid == 0:  # the child: no Zarr here (its event loop thread does not survive fork)
        try:
            with store.atomic_directory(path, overwrite=True) as (tmp, _):
                tmp.mkdir()
                (tmp / "zarr.json").write_text("{}")
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL


def test_temporaries_of_killed_writers_are_removed_by_the_next_write(ridge, tmp_path):
    X, _ = _data()
    path = ridge.save(tmp_path / "m.zarr")
    _killed_writer(path)
    (dead,) = tmp_path.glob(".m.zarr.tmp-*")
    record = json.loads((dead / "writer.json").read_text())
    assert record["host"] == _host()
    assert record["pid"] != os.getpid()
    assert (dead / "m.zarr" / "zarr.json").exists()  # the half-written store
    # a running writer (this process), a writer on another host, a directory without a record
    kept = {}
    for name, rec in (("live", {**record, "pid": os.getpid(), "started": None}),
                      ("elsewhere", {**record, "host": record["host"] + "-other"}), ("unknown", None)):
        kept[name] = tmp_path / f".m.zarr.tmp-{name}"
        shutil.copytree(dead, kept[name])
        if rec is None:
            (kept[name] / "writer.json").unlink()
        else:
            (kept[name] / "writer.json").write_text(json.dumps(rec))
    # the killed writer left the store in place: it still loads
    np.testing.assert_array_equal(dsgd_dask.load(path).predict(X), ridge.predict(X))
    with pytest.warns(StaleTemporaryWarning, match=f"removed 1 temporary directory .*{dead.name}"):
        ridge.save(path, overwrite=True)
    assert not dead.exists()
    assert all(p.exists() for p in kept.values())
    assert sorted(p.name for p in tmp_path.glob(".m.zarr.*")) == sorted(p.name for p in kept.values())
    np.testing.assert_array_equal(dsgd_dask.load(path).predict(X), ridge.predict(X))


def test_a_refused_write_removes_nothing(ridge, tmp_path):
    path = ridge.save(tmp_path / "m.zarr")
    _killed_writer(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        ridge.save(path)
    assert len(list(tmp_path.glob(".m.zarr.tmp-*"))) == 1


def test_transform_output_of_a_killed_run_is_cleaned_by_the_next_run(ridge, tmp_path, capsys):
    X, _ = _data()
    model = ridge.save(tmp_path / "m.zarr")
    np.save(tmp_path / "X.npy", X)
    out = tmp_path / "pred.zarr"
    _killed_writer(out)
    assert len(list(tmp_path.glob(".pred.zarr.tmp-*"))) == 1
    with pytest.warns(StaleTemporaryWarning, match="no longer running"):
        code, _, err = _cli(["predict", model, tmp_path / "X.npy", "--out", out], capsys)
    assert code == 0, err
    assert list(tmp_path.glob(".pred.zarr.*")) == []
    import zarr

    np.testing.assert_array_equal(zarr.open_group(str(out), mode="r")["prediction"][...], ridge.predict(X))
