"""dsgd_dask.datasets: shipped subsets, data home, checksums, and the fetch path (offline, file:// URLs)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import shutil
import struct

import numpy as np
import pytest
import scipy.io

import dsgd_dask
import dsgd_dask.datasets._files as files_module
from dsgd_dask import datasets
from dsgd_dask.datasets import (
    CorruptFileError,
    content_digest,
    fetch,
    get_data_home,
    load_a9a,
    load_mnist,
    load_qm7,
    load_sarcos,
    load_usps,
    search_dirs,
)
from dsgd_dask.datasets._home import SAMPLE_DIR
from dsgd_dask.datasets._registry import REGISTRY

LOADERS = {"mnist": load_mnist, "usps": load_usps, "sarcos": load_sarcos, "a9a": load_a9a, "qm7": load_qm7}


def _sample_arrays(name: str) -> dict[str, np.ndarray]:
    with np.load(SAMPLE_DIR / REGISTRY[name].sample_filename, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _md5(path) -> str:
    return "md5:" + hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty data home, also named by $DSGD_DATA_DIR."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("DSGD_DATA_DIR", str(path))
    return path


def _install_sample_as_full(monkeypatch, name: str, folder):
    """Put the shipped sample of ``name`` in ``folder`` under the full file's name, registered as the full data."""
    info = REGISTRY[name]
    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(info, digest=info.sample_digest))
    target = folder / info.filename
    shutil.copyfile(SAMPLE_DIR / info.sample_filename, target)
    return target


# -- the shipped subsets ----------------------------------------------------------------------

EXPECTED = {  # name: subset -> (X shape, X dtype, y shape, y dtype)
    "mnist": {"train": ((5000, 784), np.uint8, (5000,), np.uint8), "test": ((2000, 784), np.uint8, (2000,), np.uint8)},
    "usps": {"train": ((2000, 256), np.float32, (2000,), np.uint8), "test": ((500, 256), np.float32, (500,), np.uint8)},
    "sarcos": {"all": ((2000, 21), np.float64, (2000, 7), np.float64)},
    "a9a": {"train": ((3000, 123), np.uint8, (3000,), np.int8), "test": ((1000, 123), np.uint8, (1000,), np.int8)},
    "qm7": {"all": ((1000, 529), np.float32, (1000,), np.float32)},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_sample_loads_with_its_shapes_dtypes_and_digest(name):
    info = REGISTRY[name]
    assert content_digest(_sample_arrays(name)) == info.sample_digest
    assert set(_sample_arrays(name)) == set(info.rows)  # the same array names as the full file
    for subset, (xshape, xdtype, yshape, ydtype) in EXPECTED[name].items():
        X, y = LOADERS[name](subset, sample=True)
        assert X.shape == xshape
        assert X.dtype == xdtype
        assert y.shape == yshape
        assert y.dtype == ydtype
        assert np.isfinite(X).all()
        assert np.isfinite(y).all()


def test_mnist_sample_is_the_first_rows_of_mnist():
    X, y = load_mnist("train", sample=True)
    _, yt = load_mnist("test", sample=True)
    # the official first labels and the sample's label counts
    assert y[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert yt[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert np.bincount(y).tolist() == [479, 563, 488, 493, 535, 434, 501, 550, 462, 495]
    assert np.bincount(yt).tolist() == [175, 234, 219, 207, 217, 179, 178, 205, 192, 194]
    assert X.min() == 0
    assert X.max() == 255
    assert abs(X.mean() - 33.3) < 0.5  # full training set: 33.318


def test_usps_sample_is_the_first_rows_of_usps():
    X, y = load_usps("train", sample=True)
    _, yt = load_usps("test", sample=True)
    assert y[:10].tolist() == [6, 5, 4, 7, 3, 6, 3, 1, 0, 1]
    assert np.bincount(y).tolist() == [389, 323, 220, 149, 143, 102, 166, 182, 158, 168]
    assert np.bincount(yt).tolist() == [119, 68, 50, 29, 34, 26, 46, 36, 44, 48]
    assert X.min() == 0.0
    assert X.max() == 1.0
    levels = X.astype(np.float64) * 2000  # ESL's grey levels: multiples of 1/2000, to float32 precision
    assert np.abs(levels - np.rint(levels)).max() < 1e-3


def test_sarcos_a9a_qm7_samples_hold_real_rows():
    X, y = load_sarcos(sample=True)
    assert np.unique(X, axis=0).shape[0] == len(X)
    assert np.abs(y).max() < 200
    X, y = load_a9a("train", sample=True)
    _, yt = load_a9a("test", sample=True)
    assert set(np.unique(X).tolist()) == {0, 1}
    assert (y == 1).sum() == 734
    assert (y == -1).sum() == 2266
    assert (yt == 1).sum() == 240
    assert (yt == -1).sum() == 760
    nnz = X.sum(axis=1)
    assert nnz.min() >= 11
    assert nnz.max() <= 14
    X, y = load_qm7(sample=True)
    assert X[0, 0] == pytest.approx(0.5 * 6**2.4, rel=1e-6)  # molecule 0 is methane
    assert y[0] == pytest.approx(-417.96, abs=0.01)
    assert (y < -404).all()
    assert (y > -2193).all()


def test_qm7_coulomb_matrices_follow_from_charges_and_positions():
    ds = load_qm7(sample=True, as_dataset=True)
    C = datasets.coulomb_matrices(ds["Z"].values, ds["R"].values)
    np.testing.assert_array_equal(C.reshape(len(C), -1), ds["X"].values)


def test_sample_and_fetch_are_exclusive_and_bad_names_list_the_choices():
    with pytest.raises(ValueError, match="'train', 'test'"):
        load_mnist("validation", sample=True)
    with pytest.raises(ValueError, match="'all'"):
        load_sarcos("train", sample=True)
    with pytest.raises(ValueError, match="a9a, mnist, qm7, sarcos, usps"):
        fetch("cifar10")
    with pytest.raises(ValueError, match="sample=True"):
        load_usps(sample=True, fetch=True)


def test_as_dataset_gives_labelled_variables():
    ds = load_mnist("test", sample=True, as_dataset=True)
    X, y = load_mnist("test", sample=True)
    assert ds["X"].dims == ("sample", "feature")
    assert ds["y"].dims == ("sample",)
    np.testing.assert_array_equal(ds["X"].values, X)
    np.testing.assert_array_equal(ds["y"].values, y)
    assert ds.attrs["dataset"] == "mnist"
    assert ds.attrs["subset"] == "test"
    assert "LeCun" in ds.attrs["citation"]
    ds = load_sarcos(sample=True, as_dataset=True)
    assert ds["y"].dims == ("sample", "output")
    assert ds.sizes == {"sample": 2000, "feature": 21, "output": 7}
    ds = load_qm7(sample=True, as_dataset=True)
    assert ds["Z"].dims == ("sample", "atom")
    assert ds["R"].dims == ("sample", "atom", "xyz")
    assert "Rupp" in ds.attrs["citation"]


# -- the data home ----------------------------------------------------------------------------

def test_data_home_lookup(tmp_path, monkeypatch):
    monkeypatch.delenv("DSGD_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert get_data_home() == tmp_path / "user" / "dsgd_dask_data"
    assert search_dirs()[0] == tmp_path / "user" / "dsgd_dask_data"
    assert get_data_home(tmp_path / "given") == tmp_path / "given"
    monkeypatch.setenv("DSGD_DATA_DIR", str(tmp_path / "env"))
    assert get_data_home() == tmp_path / "env"
    assert search_dirs() == [tmp_path / "env"]  # only it: no fallback beside the checkout
    assert search_dirs(tmp_path / "given") == [tmp_path / "given"]


def test_env_variable_is_honoured(home, monkeypatch):
    _install_sample_as_full(monkeypatch, "a9a", home)
    X, y = load_a9a("test")
    np.testing.assert_array_equal(X, _sample_arrays("a9a")["X_test"])
    np.testing.assert_array_equal(y, _sample_arrays("a9a")["y_test"])
    other = home.parent / "other"
    other.mkdir()
    monkeypatch.setenv("DSGD_DATA_DIR", str(other))
    with pytest.raises(FileNotFoundError):
        load_a9a("test")
    assert load_a9a("test", data_home=home)[0].shape == (1000, 123)  # the argument wins over the variable


def test_missing_full_file_says_where_and_how_to_fetch(home):
    with pytest.raises(FileNotFoundError) as err:
        load_mnist()
    message = str(err.value)
    assert str(home) in message
    assert "DSGD_DATA_DIR" in message
    assert "load_mnist(fetch=True)" in message
    assert "dsgd_dask.datasets.fetch('mnist')" in message
    assert "sample=True" in message
    with pytest.raises(FileNotFoundError, match="fetch"):
        load_qm7(data_home=home / "elsewhere")


def test_verification_is_cached_per_file(home, monkeypatch):
    path = _install_sample_as_full(monkeypatch, "usps", home)
    calls = []
    real = files_module.content_digest
    monkeypatch.setattr(files_module, "content_digest", lambda arrays: calls.append(1) or real(arrays))
    load_usps("train")
    load_usps("test")
    assert len(calls) == 1
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a changed file is verified again
    load_usps("train")
    assert len(calls) == 2


# -- corrupt files ----------------------------------------------------------------------------

def test_flipped_bytes_are_refused(home, monkeypatch):
    path = _install_sample_as_full(monkeypatch, "mnist", home)
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 16):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt") as err:
        load_mnist()
    assert str(path) in str(err.value)
    assert "fetch" in str(err.value)
    assert "Delete it" in str(err.value)


def test_truncated_file_is_refused(home, monkeypatch):
    path = _install_sample_as_full(monkeypatch, "sarcos", home)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CorruptFileError, match="not a readable .npz"):
        load_sarcos()


def test_a_changed_value_or_a_missing_array_is_refused(home, monkeypatch):
    path = _install_sample_as_full(monkeypatch, "qm7", home)
    arrays = _sample_arrays("qm7")
    arrays["y"][17] += np.float32(0.01)
    np.savez_compressed(path, **arrays)  # a valid npz
    with pytest.raises(ValueError, match="content digest") as err:
        load_qm7()
    assert str(path) in str(err.value)
    del arrays["R"]
    np.savez_compressed(path, **arrays)
    with pytest.raises(ValueError, match="no array 'R'"):
        load_qm7(as_dataset=True)


def test_a_recompressed_file_still_verifies(home, monkeypatch):
    path = _install_sample_as_full(monkeypatch, "usps", home)
    np.savez(path, **_sample_arrays("usps"))  # stored, not deflated: other bytes, same arrays
    np.testing.assert_array_equal(load_usps("test")[0], load_usps("test", sample=True)[0])


def test_content_digest_sees_names_dtypes_and_shapes():
    a = np.arange(12, dtype=np.uint8)
    base = content_digest({"a": a})
    assert content_digest({"a": a.copy()}) == base
    assert content_digest({"b": a}) != base
    assert content_digest({"a": a.astype(np.int8)}) != base
    assert content_digest({"a": a.reshape(3, 4)}) != base
    assert content_digest({"a": a.reshape(3, 4)}) == content_digest({"a": np.asfortranarray(a.reshape(3, 4))})


# -- fetch, from local source files in the original formats ---------------------------------

def _idx(arr: np.ndarray) -> bytes:
    return struct.pack(">BBBB", 0, 0, 8, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def _libsvm(X, y) -> bytes:
    return "".join(("+1" if label > 0 else "-1") + "".join(f" {j}:1" for j in np.flatnonzero(row) + 1) + " \n"
                   for row, label in zip(X, y, strict=True)).encode()


def _esl(X, y) -> bytes:
    grey = np.rint(X.reshape(len(X), -1).astype(np.float64) * 2000) / 1000 - 1
    return "".join(f"{label:.4f} " + " ".join(f"{v:.4f}" for v in row) + " \n"
                   for label, row in zip(y, grey, strict=True)).encode()


def _write_sources(name: str, folder) -> None:
    """The official source files of ``name``, holding the rows of the shipped sample."""
    s = _sample_arrays(name)
    if name == "mnist":
        for prefix, split in (("train", "train"), ("t10k", "test")):
            (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(s[f"X_{split}"])))
            (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(s[f"y_{split}"])))
    elif name == "a9a":
        (folder / "a9a").write_bytes(_libsvm(s["X_train"], s["y_train"]))
        (folder / "a9a.t").write_bytes(_libsvm(s["X_test"], s["y_test"]))
    elif name == "usps":
        (folder / "zip.train.gz").write_bytes(gzip.compress(_esl(s["X_train"], s["y_train"])))
        (folder / "zip.test.gz").write_bytes(gzip.compress(_esl(s["X_test"], s["y_test"])))
    elif name == "sarcos":
        scipy.io.savemat(folder / "sarcos_inv_test.mat", {"sarcos_inv_test": np.hstack([s["X"], s["y"]])})
    elif name == "qm7":
        np.savez(folder / "qm7.npz", positions=s["R"], energies=s["y"], charges=s["Z"].astype(np.int64))


@pytest.mark.parametrize("name", ["mnist", "a9a", "usps", "sarcos", "qm7"])
def test_fetch_converts_the_original_formats(name, tmp_path, home, monkeypatch):
    src = tmp_path / "mirror"
    src.mkdir()
    _write_sources(name, src)
    info = REGISTRY[name]
    checksums = {s.filename: _md5(src / s.filename) for s in info.sources}
    if name == "a9a":
        checksums = {f: "sha256:" + hashlib.sha256((src / f).read_bytes()).hexdigest() for f in checksums}
    expected = _sample_arrays(name)
    path = fetch(name, base_url=src.as_uri(), checksums=checksums, digest=content_digest(expected))
    assert path == home / info.filename
    assert sorted(p.name for p in home.iterdir()) == [info.filename]  # no sources, no temporary files left
    with np.load(path, allow_pickle=False) as f:
        assert set(f.files) == set(expected)
        for k in expected:
            assert f[k].dtype == expected[k].dtype
            np.testing.assert_array_equal(f[k], expected[k])
    # the loader reads it once it is registered as the full data
    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(info, digest=info.sample_digest))
    subset = next(iter(info.subsets))
    for a, b in zip(LOADERS[name](subset), LOADERS[name](subset, sample=True), strict=True):
        np.testing.assert_array_equal(a, b)
    # a second fetch keeps the verified file
    mtime = path.stat().st_mtime_ns
    fetch(name, base_url=src.as_uri(), checksums=checksums, digest=content_digest(expected))
    assert path.stat().st_mtime_ns == mtime


def test_load_with_fetch_downloads_a_missing_file(tmp_path, home, monkeypatch):
    src = tmp_path / "mirror"
    src.mkdir()
    _write_sources("a9a", src)
    info = REGISTRY["a9a"]
    monkeypatch.setitem(REGISTRY, "a9a", dataclasses.replace(
        info, digest=info.sample_digest, base_url=src.as_uri(),
        sources=tuple(dataclasses.replace(s, checksum=_md5(src / s.filename)) for s in info.sources)))
    X, _ = load_a9a("train", fetch=True)
    np.testing.assert_array_equal(X, load_a9a("train", sample=True)[0])
    assert (home / "a9a.npz").is_file()


def test_download_with_a_wrong_md5_is_refused_and_leaves_nothing(tmp_path, home):
    src = tmp_path / "mirror"
    src.mkdir()
    _write_sources("mnist", src)
    # the published MD5s of the official files: the locally built files do not match them
    with pytest.raises(ValueError, match="MD5"):
        fetch("mnist", base_url=src.as_uri(), digest=content_digest(_sample_arrays("mnist")))
    assert list(home.iterdir()) == []
    new_home = tmp_path / "new" / "home"
    with pytest.raises(ValueError, match="MD5"):
        fetch("mnist", data_home=new_home, base_url=src.as_uri())
    assert not (tmp_path / "new").exists()  # the folders made for it are removed again


def test_fetch_refuses_data_that_does_not_convert_to_the_digest(tmp_path, home):
    src = tmp_path / "mirror"
    src.mkdir()
    _write_sources("a9a", src)
    with pytest.raises(ValueError, match="content digest"):
        fetch("a9a", base_url=src.as_uri(), checksums={"a9a": None, "a9a.t": None})  # the real a9a's digest
    assert list(home.iterdir()) == []


def test_fetch_reports_an_unreachable_source(tmp_path, home):
    with pytest.raises(OSError, match="could not download"):
        fetch("sarcos", base_url=(tmp_path / "nowhere").as_uri())
    assert list(home.iterdir()) == []


def test_fetch_replaces_a_corrupt_file(tmp_path, home):
    src = tmp_path / "mirror"
    src.mkdir()
    _write_sources("sarcos", src)
    (home / "sarcos_test.npz").write_bytes(b"not a zip file")
    digest = content_digest(_sample_arrays("sarcos"))
    path = fetch("sarcos", base_url=src.as_uri(), checksums={"sarcos_inv_test.mat": None}, digest=digest)
    with np.load(path) as f:
        assert content_digest(dict(f)) == digest


def test_package_exports_datasets():
    assert dsgd_dask.datasets is datasets
    assert set(datasets.DATASETS) == set(LOADERS)
