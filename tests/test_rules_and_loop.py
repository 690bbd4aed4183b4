"""Update rules against dense eigen-solutions; the loop's guard, partial_fit and pickling."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from dsgd_dask import KernelPCA
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.rules.base import apply_update
from dsgd_dask.rules.kpca import pca_rule

#: The paper's algorithm: random Fourier blocks and doubly stochastic steps (what this file tests).
PAPER = dict(solver="dsgd", features="fourier")


def _features(n=4000, p=12, seed=0):
    rng = np.random.default_rng(seed)
    scales = np.array([3.0, 2.2, 1.6, 1.0, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.05])[:p]
    return rng.normal(size=(n, p)) * scales + 5.0  # an offset that centring must remove


@pytest.mark.parametrize("ordered", [False, True])
def test_rules_reach_the_dense_principal_subspace(ordered):
    """On explicit finite features (every coordinate updated), the rules are Oja's / Sanger's."""
    F = _features()
    k = 3
    Fc = F - F.mean(0)
    vals, vecs = np.linalg.eigh(Fc.T @ Fc / len(F))
    top = vecs[:, ::-1][:, :k]
    rng = np.random.default_rng(1)
    A = rng.normal(size=(F.shape[1], k)) * 0.1
    rule = pca_rule(ordered, center=True, guard_limit=np.inf)
    for t in range(3000):
        X = F[rng.integers(0, len(F), 64)]
        eta = 0.5 / vals[-1] / (1 + 0.01 * t)
        (update,) = rule.updates(rule.sums((X @ A,), (X,), {}, for_parts=False), eta)
        A = apply_update(A, update, target=0, growing=False, block_size=A.shape[0])
    assert principal_angle_sin2(A, top) < 1e-3
    # fixed point: orthonormal columns (unit RKHS norm), E[h_i^2] = lambda_i
    np.testing.assert_allclose(A.T @ A, np.eye(k), atol=0.05)
    if ordered:
        for i in range(k):
            assert abs(A[:, i] @ top[:, i]) / np.linalg.norm(A[:, i]) > 0.99


def test_divergence_guard_recovers(blobs):
    ref = KernelPCA(2, **PAPER, n_features=512, block_size=64, max_iter=150, random_state=0).fit(blobs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wild = KernelPCA(2, **PAPER, n_features=512, block_size=64, max_iter=150, eta0=64.0,
                             random_state=0).fit(blobs)
    assert any("diverged" in str(w.message) for w in caught)
    Z = wild.transform(blobs)
    assert np.isfinite(Z).all()
    # the step was halved until stable: at most 1/8 of the requested 64 x (lambda_1)^-1
    assert wild.state_.eta_scale <= ref.state_.eta_scale * (64.0 / 0.5) / 8
    assert principal_angle_sin2(Z, ref.transform(blobs)) < 0.05


def test_partial_fit_streams_like_fit(blobs):
    params = dict(n_components=2, n_features=1024, block_size=128, batch_size=64, random_state=0)
    full = KernelPCA(**PAPER, max_iter=200, **params).fit(blobs)
    stream = KernelPCA(**PAPER, **params)
    for _ in range(3):
        for piece in np.array_split(blobs, 5):
            stream.partial_fit(piece)
    assert stream.n_iter_ == 3 * sum(-(-len(p) // 64) for p in np.array_split(blobs, 5))
    assert principal_angle_sin2(stream.transform(blobs), full.transform(blobs)) < 0.05
    with pytest.raises(ValueError, match="expecting 5 features"):
        stream.partial_fit(blobs[:, :3])


def test_fit_is_reproducible_and_seed_dependent(blobs):
    params = dict(n_components=2, n_features=512, block_size=64, max_iter=50)
    a = KernelPCA(**PAPER, random_state=3, **params).fit(blobs)
    b = KernelPCA(**PAPER, random_state=3, **params).fit(blobs)
    c = KernelPCA(**PAPER, random_state=4, **params).fit(blobs)
    np.testing.assert_array_equal(a.model_.coef, b.model_.coef)
    assert not np.allclose(a.model_.coef, c.model_.coef)


def test_pickled_model_transforms_identically(blobs):
    import cloudpickle

    model = KernelPCA(2, **PAPER, n_features=512, block_size=64, max_iter=30, random_state=0).fit(blobs)
    for dumps in (pickle.dumps, cloudpickle.dumps):
        clone = pickle.loads(dumps(model))
        np.testing.assert_array_equal(clone.transform(blobs), model.transform(blobs))


def test_feature_names_out(blobs):
    model = KernelPCA(3, **PAPER, n_features=256, block_size=64, max_iter=5, random_state=0).fit(blobs)
    assert list(model.get_feature_names_out()) == ["kernelpca0", "kernelpca1", "kernelpca2"]
    assert model.n_features_in_ == 5
    assert model.n_features_ == 256


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian", "cauchy", "matern", "arccos"])
def test_every_kernel_fits(blobs, kernel):
    from sklearn.decomposition import KernelPCA as SkKernelPCA

    from dsgd_dask.features import kernel_matrix

    model = KernelPCA(2, **PAPER, kernel=kernel, n_features=2048, max_iter=300, random_state=0).fit(blobs)
    # dense reference with the same kernel and bandwidth: exact centred kernel PCA
    K = kernel_matrix(model.kernel_, blobs)
    exact = SkKernelPCA(3, kernel="precomputed").fit(K)
    assert exact.eigenvalues_[1] / exact.eigenvalues_[2] > 1.2
    sin2 = principal_angle_sin2(model.transform(blobs), exact.transform(K)[:, :2])
    assert sin2 < 0.05, sin2


@pytest.mark.parametrize("ordered", [False, True])
def test_partial_sums_equal_one_step_on_the_union(blobs, ordered):
    """A data-parallel step (parts reduced) is the step on the whole mini-batch, to round-off."""
    from dsgd_dask.engine.parallel import apply_sums, part_sums
    from dsgd_dask.engine.steps import StepConfig, rule_step
    from dsgd_dask.rules import Sums

    model = KernelPCA(3, **PAPER, n_features=512, block_size=64, max_iter=12, ordered=ordered,
                          random_state=0).fit(blobs)
    features, coef = (model._features,), model.state_.coef
    rule = pca_rule(ordered, center=True, guard_limit=1e9)
    for n_blocks in (coef[0].shape[0] // 64 + 1, coef[0].shape[0] // 64):  # a growing step and a revisiting step
        cfg = StepConfig(n_blocks=n_blocks, batch_size=96, eta_decay=0.01)
        X = blobs[:96]
        whole = rule_step(coef, X, 12, model.state_.eta_scale, features, rule, cfg)
        target = coef[0].shape[0] // 64 if n_blocks > coef[0].shape[0] // 64 else 12 % (coef[0].shape[0] // 64)
        parts = [part_sums(coef, X, rows, target, features, rule) for rows in np.array_split(np.arange(96), 3)]
        total = parts[0] + parts[1] + parts[2]
        assert isinstance(total, Sums)
        assert total.n == 96
        split = apply_sums(coef, total, 12, model.state_.eta_scale, features, rule, cfg)
        np.testing.assert_allclose(split[0], whole[0], rtol=1e-9, atol=1e-12)


def test_data_parallel_fit_matches_subspace(blobs):
    import dask.array as da

    params = dict(n_components=2, n_features=1024, block_size=128, max_iter=200, random_state=0)
    one = KernelPCA(**PAPER, **params).fit(blobs)
    two = KernelPCA(**PAPER, **params, n_partitions=2).fit(da.from_array(blobs, chunks=(100, 5)))
    assert principal_angle_sin2(one.transform(blobs), two.transform(blobs)) < 0.02
