"""Fast frequency samplers against their distributions; results independent of the thread count."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import blas_threads
from scipy import stats
from threadpoolctl import threadpool_limits

from dsgd_dask import KernelPCA
from dsgd_dask._threads import one_blas_thread, parallel_width
from dsgd_dask.features import KernelSpec, RandomFeatures
from dsgd_dask.features.sampling import standard_cauchy, standard_laplace, standard_normal

# an odd size exercises the unpaired last normal draw
N = 2_000_001
SAMPLERS = [(standard_normal, "norm"), (standard_cauchy, "cauchy"), (standard_laplace, "laplace")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("sampler", "dist"), SAMPLERS, ids=[d for _, d in SAMPLERS])
def test_samplers_follow_their_distributions(sampler, dist, dtype):
    rng = np.random.Generator(np.random.SFC64(2024))
    x = sampler(rng, np.empty(N, dtype=dtype))
    assert x.dtype == np.dtype(dtype)
    assert np.isfinite(x).all()
    # Kolmogorov-Smirnov: under the right distribution p is uniform, so p < 1e-3 would be a
    # one-in-a-thousand event; the resolution of the uniforms (2^-24) is far below the KS
    # statistic's scale (1/sqrt(N) = 7e-4).
    assert stats.kstest(x.astype(np.float64), dist).pvalue > 1e-3
    if dist == "norm":
        # Box-Muller from uniforms in (0, 1]: tails cut at sqrt(-2 log(resolution))
        eps = np.finfo(dtype).epsneg
        assert np.abs(x).max() <= np.sqrt(-2 * np.log(eps)) * (1 + 1e-6)
        # mean and variance within 5 standard errors
        assert abs(x.mean()) < 5 / np.sqrt(N)
        assert abs(x.var() - 1) < 5 * np.sqrt(2 / N)


def test_normal_pairs_are_independent():
    # the two halves of a Box-Muller fill share radii: their squares must still be uncorrelated
    rng = np.random.Generator(np.random.SFC64(7))
    x = standard_normal(rng, np.empty((512, 784), dtype="float32")).reshape(-1).astype(np.float64)
    h = x.size // 2
    for a, b in [(x[:h], x[h:]), (x[:h] ** 2, x[h:] ** 2)]:
        assert abs(np.corrcoef(a, b)[0, 1]) < 5 / np.sqrt(h)


def test_one_blas_thread_nests_and_overlaps_across_threads():
    with threadpool_limits(limits=2, user_api="blas"):
        assert blas_threads() == 2
        with one_blas_thread():
            assert blas_threads() == 1
            assert parallel_width() == 2
            with one_blas_thread():
                assert blas_threads() == 1
            assert blas_threads() == 1  # the inner exit does not restore
        assert blas_threads() == 2
        # overlapping computations in two threads: the first to finish must not restore
        entered, release_a, done_a = threading.Event(), threading.Event(), threading.Event()
        seen = {}

        def a():
            with one_blas_thread():
                entered.set()
                release_a.wait()
            done_a.set()

        t = threading.Thread(target=a)
        t.start()
        entered.wait()
        with one_blas_thread():
            release_a.set()
            done_a.wait()
            seen["after_a"] = blas_threads()
        t.join()
        assert seen["after_a"] == 1
        assert blas_threads() == 2


@pytest.mark.parametrize("cache_bytes", [None, 0])
def test_features_and_fit_do_not_depend_on_the_thread_count(cache_bytes):
    # OpenBLAS rounds float32 products differently on one and on several threads; the package
    # computes on one BLAS thread and spreads pages over its own threads instead, so the width
    # (1 or 2 here) must not change a single bit.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(700, 30)).astype(np.float32)
    spec = KernelSpec("gaussian", 4.0)
    params = dict(n_components=3, solver="dsgd", features="fourier", n_features=4096, block_size=256,
                  batch_size=128, max_iter=40,
                  cache_bytes=cache_bytes, random_state=5)
    results = {}
    for width in (1, 2):
        with threadpool_limits(limits=width, user_api="blas"):
            feats = RandomFeatures(spec, 30, 256, seed=3, cache_bytes=cache_bytes)
            Z = feats.transform(X, 0, 16)  # 4 pages
            model = KernelPCA(**params).fit(X)
            results[width] = (Z, model.model_.coef, model.transform(X))
    for a, b in zip(results[1], results[2], strict=True):
        np.testing.assert_array_equal(a, b)


def test_fit_in_another_thread_equals_fit_in_the_main_thread():
    # OpenBLAS ignores openblas_set_num_threads from other threads once the main thread set a
    # count: a fit started from a worker thread (a web server, a notebook's background job)
    # must still compute on one BLAS thread, and restore the count afterwards.
    X = np.random.default_rng(1).normal(size=(600, 20)).astype(np.float32)
    params = dict(n_components=2, solver="dsgd", features="fourier", n_features=2048, block_size=256,
                  batch_size=128, max_iter=30, random_state=2)
    with threadpool_limits(limits=2, user_api="blas"):
        main = KernelPCA(**params).fit(X).model_.coef
        out = {}

        def fit_here():
            out["coef"] = KernelPCA(**params).fit(X).model_.coef
            out["threads_after"] = blas_threads()

        t = threading.Thread(target=fit_here)
        t.start()
        t.join()
        assert blas_threads() == 2
    np.testing.assert_array_equal(out["coef"], main)
    assert out["threads_after"] == 2
