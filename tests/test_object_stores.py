"""Data, models and checkpoints on object stores, against a real S3 API server on loopback.

``s3_bucket`` (tests/conftest.py) is a fresh bucket on moto's S3 server; ``memory://``
checks the commit-record logic without a server. A store on an object store is a version
``v-<uuid>/`` under a commit record ``commit.json`` written last: the tests kill saves
midway, edit what was written, and resume checkpoints, as for local stores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
import warnings

import dask.array as da
import numpy as np
import pytest
import zarr

import dsgd_dask
from dsgd_dask import KernelPCA, KernelRidge
from dsgd_dask.cli import main
from dsgd_dask.model.store import (
    COMMIT_RECORD,
    RemoteLocation,
    StaleTemporaryWarning,
    StoreError,
    read_store,
    write_store,
)

PCA = dict(solver="dsgd", features="fourier", n_features=128, block_size=64, max_iter=20, random_state=0)


def _kpca(**extra):
    return KernelPCA(2, **PCA, **extra)


def _memory_url() -> str:
    return f"memory://stores-{uuid.uuid4().hex}/m.zarr"


def _s3fs(options):
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    fs.invalidate_cache()
    return fs


def _data_store(url: str, options: dict, X: np.ndarray, rows: int = 100) -> str:
    zarr.create_array(store=url, data=X, chunks=(rows, X.shape[1]), storage_options=options)
    return url


def _run(code: str, *args, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                            env=env, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


# -- the commit record, on memory:// ---------------------------------------------------------------

def test_memory_store_round_trip_and_layout():
    url = _memory_url()
    arrays = {"coef": np.arange(12.0).reshape(3, 4), "seed": np.array([7])}
    location = write_store(url, "model", {"estimator": "x", "n": 3}, arrays, storage_options={})
    assert isinstance(location, RemoteLocation)
    entries = location.entries()
    assert COMMIT_RECORD in entries
    assert len(entries) == 2
    commit = json.loads(location.commit_bytes())
    assert commit["version"] in entries
    assert commit["kind"] == "model"
    assert set(commit["arrays"]) == {"coef", "seed"}
    attrs, got = read_store(url, "model", storage_options={})
    assert attrs == {"estimator": "x", "n": 3}
    for name, arr in arrays.items():
        np.testing.assert_array_equal(got[name], arr)


def test_memory_store_needs_overwrite_and_replaces_the_version():
    url = _memory_url()
    first = write_store(url, "model", {"n": 1}, {"a": np.zeros(3)}, storage_options={})
    old = json.loads(first.commit_bytes())["version"]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_store(url, "model", {"n": 2}, {"a": np.ones(3)}, storage_options={})
    write_store(url, "model", {"n": 2}, {"a": np.ones(3)}, overwrite=True, storage_options={})
    new = json.loads(first.commit_bytes())["version"]
    assert new != old
    assert first.entries() == sorted([COMMIT_RECORD, new])
    assert read_store(url, "model", storage_options={})[0] == {"n": 2}


def test_memory_store_without_a_commit_record_is_refused():
    url = _memory_url()
    location = write_store(url, "model", {"n": 1}, {"a": np.zeros(3)}, storage_options={})
    location.fs.rm(location.child(COMMIT_RECORD))
    with pytest.raises(StoreError, match="no commit record"):
        read_store(url, "model", storage_options={})
    with pytest.raises(FileNotFoundError, match="no store"):
        read_store(_memory_url(), "model", storage_options={})


def test_memory_store_commit_record_and_version_must_agree():
    url = _memory_url()
    location = write_store(url, "model", {"n": 1}, {"a": np.zeros(3)}, storage_options={})
    commit = json.loads(location.commit_bytes())
    # a digest changed in the record only: the version no longer matches it
    location.fs.pipe_file(location.child(COMMIT_RECORD), json.dumps({**commit, "attributes_sha256": "0" * 64}).encode())
    with pytest.raises(StoreError, match="does not match the checksums of its commit record"):
        read_store(url, "model", storage_options={})
    location.fs.pipe_file(location.child(COMMIT_RECORD), b"{not json")
    with pytest.raises(StoreError, match="commit record .* is not valid"):
        read_store(url, "model", storage_options={})
    location.fs.pipe_file(location.child(COMMIT_RECORD), json.dumps({**commit, "version": "../elsewhere"}).encode())
    with pytest.raises(StoreError, match="commit record .* is not valid"):
        read_store(url, "model", storage_options={})


def test_memory_store_failed_write_leaves_the_previous_store():
    url = _memory_url()
    location = write_store(url, "model", {"n": 1}, {"a": np.zeros(3)}, storage_options={})
    entries = location.entries()

    with pytest.raises(TypeError, match="cannot store"):  # the attributes are not JSON: fails after the arrays
        write_store(url, "model", {"n": object()}, {"a": np.ones(3)}, overwrite=True, storage_options={})
    assert location.entries() == entries  # the failed version was deleted
    assert read_store(url, "model", storage_options={})[0] == {"n": 1}


def test_remote_urls_take_the_filesystem_defaults_without_storage_options():
    url = _memory_url()
    write_store(url, "model", {"n": 1}, {"a": np.zeros(1)})
    assert read_store(url, "model")[0] == {"n": 1}
    assert read_store(url, "model", storage_options={})[0] == {"n": 1}
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        write_store(_memory_url(), "model", {}, {"a": np.zeros(1)}, storage_options=["endpoint_url"])


def test_memory_model_and_checkpoint(blobs):
    url = _memory_url()
    model = _kpca().fit(blobs)
    model.save(url, storage_options={})
    loaded = dsgd_dask.load(url, storage_options={})
    np.testing.assert_array_equal(loaded.transform(blobs), model.transform(blobs))
    ckpt = _memory_url()
    fitted = _kpca(checkpoint=ckpt, checkpoint_every=5).fit(blobs, storage_options={})
    assert RemoteLocation(ckpt, {}).state() == "committed"
    resumed = _kpca(checkpoint=ckpt, checkpoint_every=5).fit(blobs, storage_options={})
    np.testing.assert_array_equal(resumed.transform(blobs), fitted.transform(blobs))


def test_storage_options_keyword_in_signatures_and_docs():
    import inspect

    assert "storage_options : dict, optional" in KernelPCA.fit.__doc__  # in the Parameters section
    for method in (KernelPCA.fit, KernelPCA.partial_fit, KernelPCA.transform, KernelRidge.fit, KernelRidge.predict,
                   dsgd_dask.KernelCCA.transform, dsgd_dask.KernelSIR.fit, dsgd_dask.KernelSVC.decision_function):
        param = inspect.signature(method).parameters["storage_options"]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        assert param.default is None
        assert "storage_options" in method.__doc__
    assert "storage_options" in inspect.signature(dsgd_dask.load).parameters
    assert "storage_options" in inspect.signature(KernelPCA.save).parameters


# -- a real S3 API server -----------------------------------------------------------------------------

def test_fit_from_an_s3_zarr_path(s3_bucket, blobs):
    bucket, options = s3_bucket
    path = _data_store(f"{bucket}/X.zarr", options, blobs)
    fitted = _kpca().fit(path, storage_options=options)
    reference = _kpca().fit(da.from_array(blobs, chunks=(100, -1)))
    np.testing.assert_array_equal(fitted.transform(blobs), reference.transform(blobs))
    # transform of a path, lazily: the chunks are read with the options of the call
    out = fitted.transform(path, storage_options=options)
    np.testing.assert_array_equal(np.asarray(out), reference.transform(blobs))


def test_fit_from_s3_paths_of_two_inputs(s3_bucket, blobs):
    bucket, options = s3_bucket
    y = blobs @ np.arange(1.0, 6.0)
    X_path = _data_store(f"{bucket}/X.zarr", options, blobs)
    zarr.create_array(store=f"{bucket}/y.zarr", data=y, chunks=(100,), storage_options=options)
    params = dict(solver="dsgd", n_features=128, block_size=64, max_iter=20, random_state=0)
    fitted = KernelRidge(**params).fit(X_path, f"{bucket}/y.zarr", storage_options=options)
    reference = KernelRidge(**params).fit(da.from_array(blobs, chunks=(100, -1)), da.from_array(y, chunks=100))
    np.testing.assert_array_equal(fitted.predict(blobs), reference.predict(blobs))


def test_save_to_s3_and_load_in_a_fresh_process(s3_bucket, blobs, tmp_path):
    bucket, options = s3_bucket
    model = _kpca().fit(blobs)
    url = f"{bucket}/models/kpca.zarr"
    assert str(model.save(url, storage_options=options)) == url
    np.save(tmp_path / "X.npy", blobs)
    _run("""
        import json, sys
        import numpy as np
        import dsgd_dask
        url, options, data, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
        np.save(out, dsgd_dask.load(url, storage_options=options).transform(np.load(data)))
    """, url, json.dumps(options), str(tmp_path / "X.npy"), str(tmp_path / "out.npy"))
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), model.transform(blobs))


def test_overwrite_on_s3_keeps_one_version(s3_bucket, blobs):
    bucket, options = s3_bucket
    url = f"{bucket}/kpca.zarr"
    _kpca().fit(blobs).save(url, storage_options=options)
    with pytest.raises(FileExistsError):
        _kpca().fit(blobs).save(url, storage_options=options)
    other = KernelPCA(2, **{**PCA, "random_state": 1}).fit(blobs)
    other.save(url, overwrite=True, storage_options=options)
    names = sorted(p.rsplit("/", 1)[-1] for p in _s3fs(options).ls(url[len("s3://"):]))
    assert len(names) == 2
    assert COMMIT_RECORD in names
    np.testing.assert_array_equal(dsgd_dask.load(url, storage_options=options).transform(blobs),
                                  other.transform(blobs))


_KILLED_SAVE = """
    import json, os, signal, sys
    import numpy as np
    import zarr
    import dsgd_dask

    url, options, step = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    model = dsgd_dask.KernelPCA(2, solver="dsgd", features="fourier", n_features=128, block_size=64, max_iter=20,
                                random_state=1).fit(np.load(sys.argv[4]))
    if step == "array":  # killed once the first array is written
        create = zarr.Group.create_array
        def create_then_die(self, *args, **kwargs):
            out = create(self, *args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        zarr.Group.create_array = create_then_die
    else:  # killed when the commit record is about to be written: every array and the attributes are there
        import fsspec.asyn
        pipe = fsspec.asyn.AsyncFileSystem.pipe_file
        def die_at_commit(self, path, *args, **kwargs):
            if path.endswith("commit.json"):
                os.kill(os.getpid(), signal.SIGKILL)
            return pipe(self, path, *args, **kwargs)
        fsspec.asyn.AsyncFileSystem.pipe_file = die_at_commit
    model.save(url, overwrite=True, storage_options=options)
"""


@pytest.mark.parametrize("step", ["array", "commit"])
def test_killed_save_on_s3_leaves_the_previous_model(s3_bucket, blobs, tmp_path, step):
    bucket, options = s3_bucket
    url = f"{bucket}/kpca.zarr"
    model = _kpca().fit(blobs)
    model.save(url, storage_options=options)
    np.save(tmp_path / "X.npy", blobs)
    result = _run(_KILLED_SAVE, url, json.dumps(options), step, str(tmp_path / "X.npy"), check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr
    location = RemoteLocation(url, options)
    assert len(location.entries()) == 3  # the commit record, its version, the killed save's version
    np.testing.assert_array_equal(dsgd_dask.load(url, storage_options=options).transform(blobs),
                                  model.transform(blobs))
    # the next save removes the killed writer's version
    with pytest.warns(StaleTemporaryWarning, match="no longer running"):
        model.save(url, overwrite=True, storage_options=options)
    assert len(location.entries()) == 2


def test_killed_first_save_on_s3_leaves_nothing_that_loads(s3_bucket, blobs, tmp_path):
    bucket, options = s3_bucket
    url = f"{bucket}/new.zarr"
    np.save(tmp_path / "X.npy", blobs)
    result = _run(_KILLED_SAVE, url, json.dumps(options), "commit", str(tmp_path / "X.npy"), check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert RemoteLocation(url, options).state() == "empty"
    with pytest.raises(StoreError, match="no commit record"):
        dsgd_dask.load(url, storage_options=options)
    # a new save to the same URL needs no overwrite: nothing was committed there
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StaleTemporaryWarning)
        _kpca().fit(blobs).save(url, storage_options=options)
    assert dsgd_dask.load(url, storage_options=options).n_features_in_ == blobs.shape[1]


def test_edited_store_on_s3_is_refused(s3_bucket, blobs):
    bucket, options = s3_bucket
    url = f"{bucket}/kpca.zarr"
    _kpca().fit(blobs).save(url, storage_options=options)
    fs = _s3fs(options)
    version = json.loads(fs.cat_file(f"{url}/{COMMIT_RECORD}"))["version"]
    group = zarr.open_group(f"{url}/{version}", mode="r+", storage_options=options)
    # an edited array
    coef = group["coef"][...]
    group["coef"][0, 0] = coef[0, 0] + 1.0
    with pytest.raises(StoreError, match="array 'coef' does not match its checksum"):
        dsgd_dask.load(url, storage_options=options)
    group["coef"][0, 0] = coef[0, 0]
    assert dsgd_dask.load(url, storage_options=options) is not None
    # an edited attribute
    params = dict(group.attrs["params"])
    group.attrs["params"] = {**params, "n_components": 1}
    with pytest.raises(StoreError, match="attributes .* do not match their checksum"):
        dsgd_dask.load(url, storage_options=options)


def test_checkpointed_fit_on_s3_resumes(s3_bucket, blobs):
    bucket, options = s3_bucket
    X = da.from_array(blobs, chunks=(100, -1))
    reference = _kpca().fit(X)
    ckpt = f"{bucket}/ck.zarr"
    seen = []

    def stop(step, model):
        seen.append(step)
        if step >= 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _kpca(checkpoint=ckpt, checkpoint_every=5).fit(X, callback=stop, storage_options=options)
    attrs, _ = read_store(ckpt, "checkpoint", storage_options=options)
    assert 5 <= attrs["step"] < reference.n_iter_
    resumed_steps = []
    resumed = _kpca(checkpoint=ckpt, checkpoint_every=5).fit(X, callback=lambda s, m: resumed_steps.append(s),
                                                            storage_options=options)
    assert resumed_steps[0] == attrs["step"] + 1  # the steps before the checkpoint were not taken again
    np.testing.assert_array_equal(resumed.transform(blobs), reference.transform(blobs))


def test_checkpoint_on_an_object_store_without_options(blobs):
    # without storage_options a URL takes its filesystem's defaults, checkpoints included
    ckpt = _memory_url()
    fitted = _kpca(checkpoint=ckpt, checkpoint_every=5).fit(blobs)
    assert RemoteLocation(ckpt, {}).state() == "committed"
    resumed = _kpca(checkpoint=ckpt, checkpoint_every=5).fit(blobs)
    np.testing.assert_array_equal(resumed.transform(blobs), fitted.transform(blobs))


def test_lazy_transform_written_to_s3(s3_bucket, blobs):
    bucket, options = s3_bucket
    model = _kpca().fit(blobs)
    out = model.transform(da.from_array(blobs, chunks=(100, -1)))
    da.to_zarr(out, f"{bucket}/components.zarr", storage_options=options)
    got = zarr.open_array(f"{bucket}/components.zarr", mode="r", storage_options=options)[...]
    np.testing.assert_array_equal(got, model.transform(blobs))


def test_output_on_an_object_store_gets_its_group_metadata_last():
    from dsgd_dask.cli import write_output

    url = _memory_url()
    location = RemoteLocation(url, {})
    seen = []

    def rows(block):
        seen.append(location.fs.exists(location.child("zarr.json")))
        return block

    data = da.from_array(np.arange(40.0).reshape(20, 2), chunks=(5, 2)).map_blocks(rows, dtype=float)
    write_output(url, {"components": data}, {"command": "test"}, storage_options={})
    assert seen
    assert not any(seen)
    group = zarr.open_group(url, mode="r", storage_options={})
    np.testing.assert_array_equal(group["components"][...], np.arange(40.0).reshape(20, 2))
    assert group.attrs["dsgd_dask_output"] == {"command": "test"}
    with pytest.raises(FileExistsError, match="overwrite"):
        write_output(url, {"components": data}, {}, storage_options={})

    def fail(block):
        raise RuntimeError("a bad chunk")

    with pytest.raises(RuntimeError, match="a bad chunk"):
        write_output(url, {"components": data.map_blocks(fail, dtype=float)}, {}, overwrite=True, storage_options={})
    assert location.entries() == []  # what the failed write wrote is deleted


def _options_args(options: dict) -> list[str]:
    return [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]


def test_cli_fit_transform_info_on_s3(s3_bucket, blobs, capsys):
    bucket, options = s3_bucket
    data = _data_store(f"{bucket}/X.zarr", options, blobs)
    opts = _options_args(options)
    sets = [arg for k, v in PCA.items() for arg in ("--set", f"{k}={v}")]
    assert main(["fit", "pca", data, *sets, "--set", "n_components=2", "--out", f"{bucket}/m.zarr", "-q",
                 "--checkpoint", f"{bucket}/ck.zarr", *opts]) == 0
    model = dsgd_dask.load(f"{bucket}/m.zarr", storage_options=options)
    np.testing.assert_array_equal(model.transform(blobs), _kpca().fit(da.from_array(blobs, chunks=(100, -1)))
                                  .transform(blobs))
    assert main(["transform", f"{bucket}/m.zarr", data, "--out", f"{bucket}/c.zarr", "-q", *opts]) == 0
    got = zarr.open_group(f"{bucket}/c.zarr", mode="r", storage_options=options)["components"][...]
    np.testing.assert_array_equal(got, model.transform(blobs))
    assert RemoteLocation(f"{bucket}/c.zarr", options).entries() == ["components", "zarr.json"]
    capsys.readouterr()
    assert main(["info", f"{bucket}/m.zarr", "--verify", "--json", *opts]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["estimator"] == "KernelPCA"
    assert info["verified"] is True
    # nothing at the URL: a one-line error, status 1
    assert main(["info", f"{bucket}/missing.zarr", *opts]) == 1
    assert "no store" in capsys.readouterr().err


def test_cli_storage_option_values(capsys):
    from dsgd_dask.cli._commands import parse_storage_options

    assert parse_storage_options(["endpoint_url=http://127.0.0.1:9000", "use_ssl=False",
                                  "client_kwargs={'region_name': 'eu-west-1'}", "key= a b "]) == {
        "endpoint_url": "http://127.0.0.1:9000", "use_ssl": False, "client_kwargs": {"region_name": "eu-west-1"},
        "key": "a b"}
    assert main(["info", "memory://nothing.zarr", "--storage-option", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
