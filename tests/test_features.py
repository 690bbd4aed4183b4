"""Random features: unbiased kernel estimates, 1/sqrt(m) convergence, reproducible blocks."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import KERNEL_CASES, kernel_id
from threadpoolctl import threadpool_limits

from dsgd_dask.features import KernelSpec, RandomFeatures, generate_block, kernel_matrix, median_bandwidth


@pytest.mark.parametrize("spec", KERNEL_CASES, ids=kernel_id)
def test_block_average_converges_to_kernel(spec):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3)) * 0.8
    K = kernel_matrix(spec, X)
    m = 64
    # Monte Carlo: the mean squared error of a mean of n_blocks * m features scales like
    # 1/(n_blocks * m); 64x more blocks should shrink the RMS error ~8x (accept 4x-16x).
    # One seed's error is itself a noisy estimate (the 1600 entries are strongly
    # correlated), so the squared errors are averaged over eight seeds.
    sq = {16: [], 1024: []}
    for seed in range(8):
        feats = RandomFeatures(spec, 3, m, seed=seed, dtype="float64", cache_bytes=0)
        Z = feats.transform(X, 0, 1024)  # 1024 blocks of 64 features
        # 40 x 40 products of 65,536 columns: one BLAS thread does each in milliseconds,
        # where two threads on a busy machine can take a second
        with threadpool_limits(limits=1, user_api="blas"):
            for n_blocks in sq:
                Zj = Z[:, : n_blocks * m] / np.sqrt(n_blocks)
                sq[n_blocks].append(np.mean((Zj @ Zj.T - K) ** 2))
    errors = {n: np.sqrt(np.mean(v)) for n, v in sq.items()}
    ratio = errors[16] / errors[1024]
    assert 4.0 < ratio < 16.0, (errors, ratio)
    scale = np.sqrt(np.mean(K**2))
    assert errors[1024] < 0.03 * scale


def test_shift_by_center_is_equivalent():
    """Subtracting a centre changes the features but not the kernel they estimate."""
    spec = KernelSpec("gaussian", 1.0)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 2)) + 50.0
    shifted = RandomFeatures(spec, 2, 128, seed=3, dtype="float32", center=X.mean(0))
    Z = shifted.transform(X, 0, 256) / np.sqrt(256)
    err = np.abs(Z @ Z.T - kernel_matrix(spec, X)).max()
    assert err < 0.02


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_input_feature_gives_the_products_blas_gives(dtype):
    # one input column: the features take the products without a BLAS call, bit for bit the same
    spec = KernelSpec("gaussian", 0.7)
    feats = RandomFeatures(spec, 1, 64, seed=4, dtype=dtype)
    X = np.random.default_rng(3).normal(size=(37, 1))
    Xp = feats.prepare(X)
    w, b = feats._page(0, 0, 3, 3)
    expected = np.cos(np.matmul(Xp, w) + b) * feats.dtype.type(np.sqrt(2.0 / 64))
    np.testing.assert_array_equal(feats.apply(Xp, (w, b)), expected)


def test_blocks_independent_of_order_and_cache():
    spec = KernelSpec("matern", 0.9, nu=2.5)
    cached = RandomFeatures(spec, 5, 32, seed=11)
    uncached = RandomFeatures(spec, 5, 32, seed=11, cache_bytes=0)
    X = np.random.default_rng(2).normal(size=(7, 5))
    a = cached.transform(X, 3, 9)
    b = uncached.transform(X, 0, 12)[:, 3 * 32:9 * 32]
    np.testing.assert_array_equal(a, b)
    w, bias = generate_block(spec, 5, 32, 11, 4)
    np.testing.assert_array_equal(cached.block(4)[0], w)
    np.testing.assert_array_equal(cached.block(4)[1], bias)


_DIGEST = """
import hashlib
from dsgd_dask.features import KernelSpec, generate_block
h = hashlib.sha256()
for name, kw in [("gaussian", {}), ("laplacian", {}), ("cauchy", {}), ("matern", {"nu": 1.5}),
                 ("arccos", {"order": 1})]:
    w, b = generate_block(KernelSpec(name, 0.7, **kw), 9, 48, 123456789, 5, "float32")
    h.update(w.tobytes())
    h.update(b.tobytes())
digest = h.hexdigest()
"""


def test_block_regenerated_bit_identically_in_fresh_process():
    here = {}
    exec(_DIGEST, here)
    child = _DIGEST + "print(digest)"
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here["digest"]


def test_different_blocks_and_seeds_differ():
    spec = KernelSpec("gaussian", 1.0)
    w0, _ = generate_block(spec, 4, 16, 0, 0)
    w1, _ = generate_block(spec, 4, 16, 0, 1)
    w0b, _ = generate_block(spec, 4, 16, 1, 0)
    assert not np.array_equal(w0, w1)
    assert not np.array_equal(w0, w0b)


def test_median_bandwidth():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 10))
    # For standard normal rows the pairwise distance concentrates near sqrt(2 d).
    assert median_bandwidth(X) == pytest.approx(np.sqrt(20), rel=0.05)
    assert median_bandwidth(X, "cityblock") > median_bandwidth(X)
    with pytest.raises(ValueError, match="no nonzero distance"):
        median_bandwidth(np.ones((10, 3)))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"name": "polynomial"}, ValueError, "unknown kernel"),
        ({"name": "gaussian", "bandwidth": 0.0}, ValueError, "positive"),
        ({"name": "gaussian", "bandwidth": -1.0}, ValueError, "positive"),
        ({"name": "gaussian", "bandwidth": np.nan}, ValueError, "positive"),
        ({"name": "gaussian", "bandwidth": "wide"}, TypeError, "number"),
        ({"name": "matern", "nu": 3.5}, ValueError, "nu"),
        ({"name": "arccos", "order": 3}, ValueError, "order"),
        ({"name": "gaussian", "nu": 1.5}, ValueError, "matern kernel only"),
    ],
)
def test_kernel_spec_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        KernelSpec(**kwargs)
