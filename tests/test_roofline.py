"""Row slices of a pass in parallel threads, tiled kernel sections, and the roofline benchmark's plumbing.

A pass takes each chunk's rows in slices fixed by the pass, computes the slices in
parallel threads and adds their sums in slice order: the totals must be those of the
slices taken one after the other, bit for bit, on any number of threads and on any
scheduler. The kernel sections are computed tile by tile: their values are checked
against the dense float64 kernel matrix.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest

from dsgd_dask import _threads
from dsgd_dask.engine import passes
from dsgd_dask.engine.passes import PassRequest, PassView, covariance_request, moment_request, reduce_pass
from dsgd_dask.features import nystroem
from dsgd_dask.features.kernels import KernelSpec, kernel_matrix, l1_family_sections
from dsgd_dask.features.nystroem import NystroemFeatures, kernel_sections, section_operand
from dsgd_dask.streams.inputs import DataView

ROOT = Path(__file__).resolve().parents[1]
D = 6


@pytest.fixture
def two_threads(monkeypatch):
    """The package's loops two threads wide, whatever the machine's BLAS thread count."""
    real = _threads._blas_setters()
    monkeypatch.setattr(_threads, "_setters", [*real, (lambda: 2, lambda n: None)])


@pytest.fixture
def sequential_slices(monkeypatch):
    """Slices taken one after the other in the calling thread (the order the totals must reproduce)."""

    def in_order(fn, items, parallel=True):
        for item in items:
            yield fn(item)

    monkeypatch.setattr(passes, "imap_ordered", in_order)


def _case(seed=0, n=5000, M=64, kernel="gaussian"):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D)).astype(np.float32)
    features = NystroemFeatures(KernelSpec(kernel, 2.0), X[rng.choice(n, M, replace=False)], M, seed,
                                "float32", center=X.mean(0), whiten=False)
    V = rng.normal(size=(M, 3))
    shift = features.raw_transform(X[:300], 0, 1).mean(0, dtype=np.float64)
    return X, features, V, shift


def _flat(totals):
    t = totals.views[0]
    return [a for a in (t.products, t.sums, t.blocks, t.targets, totals.directions) if a is not None]


def test_parallel_slices_sum_as_slices_in_order(two_threads, monkeypatch):
    X, features, V, shift = _case()
    # one page of features, 8 slices of rows (the last one short)
    request = PassRequest(covariance_request(features, 1, V, shift).views, rows_per_slice=700)
    threads = set()
    raw = features.raw

    def spy(*args, **kwargs):
        threads.add(_threads.threading.get_ident())
        return raw(*args, **kwargs)

    monkeypatch.setattr(features, "raw", spy)
    parallel = reduce_pass(DataView(X), request)
    assert len(threads) == 2  # the slices went to both threads of the pool

    def sequential(fn, items, parallel=True):
        for item in items:
            yield fn(item)

    with monkeypatch.context() as m:
        m.setattr(passes, "imap_ordered", sequential)
        in_order = reduce_pass(DataView(X), request)
    for a, b in zip(_flat(parallel), _flat(in_order), strict=True):
        np.testing.assert_array_equal(a, b)
    # and the sums are the right ones: z^T (z V) and sum z of the shifted sections, against float64
    z = kernel_matrix(features.kernel, X.astype(np.float64) - features.center,
                      features.landmarks - features.center) - shift
    H = z @ V
    t = parallel.views[0]
    # float32 sections (relative error ~1e-6 per entry), summed over 5000 rows in float32 per slice
    np.testing.assert_allclose(t.products, z.T @ H, rtol=0, atol=1e-4 * np.abs(z.T @ H).max())
    np.testing.assert_allclose(t.sums, z.sum(0), rtol=0, atol=1e-5 * np.abs(z).sum(0).max())
    np.testing.assert_allclose(parallel.directions, H.sum(0), rtol=0, atol=1e-5 * np.abs(H).sum(0).max())


def test_parallel_slices_of_block_moments_and_targets(two_threads, sequential_slices, monkeypatch):
    X, features, _, _ = _case(seed=1, n=3000)
    rng = np.random.default_rng(2)
    S = np.hstack([X, rng.normal(size=(len(X), 2)).astype(np.float32)])
    request = PassRequest(moment_request(features, 1, slice(0, D), slice(D, D + 2)).views, rows_per_slice=500)
    in_order = reduce_pass(DataView(S), request)
    monkeypatch.undo()  # back to the parallel slices, still two threads wide
    monkeypatch.setattr(_threads, "_setters", [*_threads._blas_setters(), (lambda: 2, lambda n: None)])
    parallel = reduce_pass(DataView(S), request)
    for a, b in zip(_flat(parallel), _flat(in_order), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian", "cauchy"])
def test_same_sums_on_numpy_rows_and_every_local_scheduler(two_threads, monkeypatch, kernel):
    X, features, V, shift = _case(seed=3, n=6000, kernel=kernel)
    monkeypatch.setattr(passes, "SLAB_ROWS", 2000)  # three slabs, each of several slices
    request = PassRequest(covariance_request(features, 1, V, shift).views, rows_per_slice=600)
    ref = reduce_pass(DataView(X), request)
    for scheduler in ("synchronous", "threads"):
        with dask.config.set(scheduler=scheduler):
            got = reduce_pass(DataView(da.from_array(X, chunks=(2000, D))), request)
        for a, b in zip(_flat(got), _flat(ref), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_pass_with_a_gram_takes_its_slices_in_order(two_threads):
    from dsgd_dask.baselines._moments import FourierMap
    from dsgd_dask.features.blocks import RandomFeatures

    X = np.random.default_rng(4).normal(size=(3000, D))
    fmap = FourierMap(RandomFeatures(KernelSpec("gaussian", 2.0), D, 16, 0, "float64"), 2)
    request = PassRequest((PassView(fmap, space="map", gram=True, sums=True),), rows_per_slice=400)
    got = reduce_pass(DataView(X), request)
    z = np.hstack([fmap(X), np.ones((len(X), 1))])
    # float64 features summed in float64: round-off of a few eps times the rows
    np.testing.assert_allclose(got.views[0].gram, z.T @ z, rtol=1e-12, atol=1e-12 * len(X))
    np.testing.assert_allclose(got.views[0].sums, z[:, :-1].sum(0), rtol=1e-12, atol=1e-12 * len(X))


# -- kernel sections, band by band of rows ------------------------------------------------------------------
SPECS = [KernelSpec("gaussian", 3.0), KernelSpec("matern", 3.0, nu=0.5), KernelSpec("matern", 3.0, nu=1.5),
         KernelSpec("matern", 3.0, nu=2.5), KernelSpec("arccos", 2.0, order=0), KernelSpec("arccos", 2.0, order=1),
         KernelSpec("arccos", 2.0, order=2), KernelSpec("laplacian", 8.0), KernelSpec("cauchy", 3.0)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.nu or s.order or ''}")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sections_are_the_kernel_matrix_whatever_the_bands(spec, dtype, monkeypatch):
    rng = np.random.default_rng(5)
    rows, cols = 900, 400  # several bands of rows (BAND_BYTES), a short one last
    X = rng.normal(size=(rows, 9)).astype(dtype)
    L = rng.normal(size=(cols, 9)).astype(dtype)
    X[4] = 0  # a zero row: the arc-cosine kernel's special case
    operand = section_operand(spec, L)
    got = kernel_sections(spec, X, *operand)
    assert got.dtype == np.dtype(dtype)
    assert got.shape == (rows, cols)
    ref = kernel_matrix(spec, X.astype(np.float64), L.astype(np.float64))
    # float32: inner products and squared distances rounded to ~1e-7 relative of |x|^2 + |l|^2 (about 20
    # here, in an exponent scaled by 1 / sigma^2); float64: the same at 1e-16
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))
    assert rows * cols * X.itemsize > 2 * nystroem.BAND_BYTES
    # the elementwise work is the same per entry in any band of rows
    monkeypatch.setattr(nystroem, "BAND_BYTES", 1)
    again = kernel_sections(spec, X, *operand)
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("name", ["laplacian", "cauchy"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_l1_sections_against_the_dense_kernel_and_the_same_wherever_a_row_sits(name, dtype):
    rng = np.random.default_rng(6)
    spec = KernelSpec(name, 40.0 if name == "laplacian" else 6.0)
    # 784 input features (three folds of 256 and one of 16), 256 and 257 (either side of a
    # fold's end), 29 and 1 (one short fold); rows and landmarks that are not multiples of the
    # micro tile (5 rows, 16 float32 or 8 float64 landmarks)
    for d in (784, 256, 257, 29, 1):
        X = rng.uniform(-0.5, 0.5, size=(203, d)).astype(dtype)
        L = rng.uniform(-0.5, 0.5, size=(101, d)).astype(dtype)
        got = l1_family_sections(spec, X, L, np.empty((203, 101), dtype=dtype))
        ref = kernel_matrix(spec, X.astype(np.float64), L.astype(np.float64))
        # Laplacian: the exponent is a sum of d terms of magnitude at most 1 (inputs in [-1/2, 1/2]),
        # scaled by 1 / sigma; its rounding error in the working precision stays within the
        # probabilistic bound sqrt(d) eps sum |terms| <= sqrt(d) d eps (Higham and Mary, 2019).
        # Cauchy: d factors each rounded twice, a relative error within about 2 d eps. Both: a few
        # ulps of the exponential or the reciprocal and of the rounded result
        eps = np.finfo(dtype).eps
        tol = eps * ((np.sqrt(d) * d / spec.bandwidth if name == "laplacian" else 2 * d) + 4)
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * 1e-3)
        assert ref.min() > 1e-6  # the comparison is of values, not of zeros
        # a section is the same bit for bit whatever rows and landmarks are evaluated with it
        rows, cols = rng.permutation(203)[:37], rng.permutation(101)[:11]
        part = l1_family_sections(spec, X[rows], L[cols], np.empty((37, 11), dtype=dtype))
        np.testing.assert_array_equal(part, got[np.ix_(rows, cols)])
        # written into a view whose rows are not contiguous: the same values
        wide = np.full((203, 130), np.nan, dtype=dtype)
        l1_family_sections(spec, X, L, wide[:, 7:108])
        np.testing.assert_array_equal(wide[:, 7:108], got)
        assert np.isnan(wide[:, :7]).all()
        assert np.isnan(wide[:, 108:]).all()
        # and into one in column order (every tile through the tile's own buffer)
        np.testing.assert_array_equal(l1_family_sections(spec, X, L, np.empty((203, 101), dtype=dtype, order="F")),
                                      got)
    # rows in several blocks (ROW_BLOCK_BYTES): a row's sections do not depend on its block
    from dsgd_dask.features import _l1

    Xb = rng.uniform(-0.5, 0.5, size=(3 * _l1.ROW_BLOCK_BYTES // (784 * X.itemsize), 784)).astype(dtype)
    Lb = rng.uniform(-0.5, 0.5, size=(20, 784)).astype(dtype)
    whole = l1_family_sections(spec, Xb, Lb, np.empty((len(Xb), 20), dtype=dtype))
    np.testing.assert_array_equal(l1_family_sections(spec, Xb[333:], Lb, np.empty((len(Xb) - 333, 20), dtype=dtype)),
                                  whole[333:])
    # no input features: every pair at distance 0
    np.testing.assert_array_equal(l1_family_sections(spec, X[:, :0], L[:, :0], np.empty((203, 101), dtype=dtype)), 1)
    with pytest.raises(ValueError, match="laplacian or cauchy"):
        l1_family_sections(KernelSpec("gaussian", 1.0), X, L, got)
    with pytest.raises(ValueError, match="need out of shape"):
        l1_family_sections(spec, X, L, np.empty((3, 3), dtype=dtype))


def test_compiled_exponential_within_an_ulp_and_a_half_and_the_same_wherever_an_entry_sits():
    from dsgd_dask.features._elementwise import UNDERFLOW, exp_sections

    rng = np.random.default_rng(7)
    x = np.concatenate([np.linspace(UNDERFLOW, 0, 1_000_003, dtype=np.float32),
                        -rng.random(100_000, dtype=np.float32) * 1e-3,  # near 0: the polynomial alone
                        -np.float32(2) ** -np.arange(1, 126, dtype=np.float32)]).astype(np.float32)
    got = exp_sections(x.reshape(1, -1).copy())[0]
    ref = np.exp(x.astype(np.float64))
    ulps = np.abs(got - ref) / np.spacing(ref.astype(np.float32))
    # Cody-Waite reduction and Cephes' minimax polynomial: within about an ulp, and half an ulp
    # more from rounding the polynomial's last steps (1.02 measured; NumPy's float32 exp: 2.5 here)
    assert ulps.max() <= 1.5
    ends = np.array([[0, -0.0, 1e-30, 3, np.inf, UNDERFLOW - np.float32(0.01), -1e30, -np.inf]], dtype=np.float32)
    np.testing.assert_array_equal(exp_sections(ends)[0], [1, 1, 1, 1, 1, 0, 0, 0])
    # every entry by the same instructions: vector body or remainder, any row length and offset
    K = -rng.random((5, 203), dtype=np.float32) * 30
    whole = exp_sections(K.copy())
    for c0, c1 in [(0, 1), (3, 11), (1, 202), (17, 203), (8, 16)]:
        np.testing.assert_array_equal(exp_sections(np.ascontiguousarray(K[1:4, c0:c1])), whole[1:4, c0:c1])
    # float64: NumPy's exponential after the clip at 0
    K64 = np.array([[-2.0, 0.5]])
    np.testing.assert_array_equal(exp_sections(K64), [[np.exp(-2.0), 1.0]])


def test_cauchy_sections_past_overflow_are_zero():
    X = np.array([[0.0, 0.0], [1e200, -1e200]])
    L = np.array([[0.0, 0.0], [0.5, 0.5]])
    out = l1_family_sections(KernelSpec("cauchy", 1.0), X, L, np.empty((2, 2)))
    np.testing.assert_allclose(out[0], kernel_matrix(KernelSpec("cauchy", 1.0), X[:1], L)[0], rtol=1e-14)
    assert np.all(out[1] == 0)
    assert np.all(np.isfinite(out))


# -- the roofline benchmark -------------------------------------------------------------------------
def test_quick_roofline_run_writes_consistent_results(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_roofline", ROOT / "benchmarks" / "bench_roofline.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_roofline"] = bench
    spec.loader.exec_module(bench)
    payload = bench.main(["--quick", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "roofline_quick.json").read_text())
    p = bench.QUICK
    assert {(r["family"], r["M"], r["scheduler"]) for r in saved["rows"]} == {
        (f, M, s) for f in bench.FAMILIES for M in p.budgets for s in ("threads", "cluster", "one thread")}
    for r in saved["rows"]:
        assert r["seconds"] > 0
        assert r["gemm_gflops"] > 0
        flops = 2 * r["n"] * r["M"] * (p.n_features_in + 2 * p.directions)
        assert r["gflops"] == pytest.approx(flops / r["seconds"] / 1e9)
        assert r["fraction"] == pytest.approx(r["gflops"] / r["gemm_gflops"])
        if r["scheduler"] == "cluster":
            assert r["identical_to_threads"] is True  # the same sums on the cluster as on threads
    blas = saved["blas"]
    assert any(lib["user_api"] == "blas" for lib in blas["client"]["threadpools"])
    assert len(blas["workers"]) == p.workers
    assert all(k.startswith(("OPENBLAS", "OMP_", "MKL_")) for k in blas["client"]["env"])
    assert len(payload["table"]) == 2 + len(bench.FAMILIES) * len(p.budgets)
    assert saved["complete"] is True
