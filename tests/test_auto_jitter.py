"""preconditioner_jitter="auto": the held-out choice against dense solves, a numeric jitter untouched, saved models."""

from __future__ import annotations

import numpy as np
import pytest

from dsgd_dask import KernelLogisticRegression, KernelRidge, KernelSVC, load
from dsgd_dask.datasets import load_a9a, load_usps
from dsgd_dask.estimators._auto import JITTER_GRID, held_out_jitter


@pytest.fixture(scope="module")
def usps():
    X, y = load_usps("train", sample=True)
    return X[:1200], y[:1200], X[1200:1700], y[1200:1700]


def test_held_out_jitter_matches_dense_solves():
    # a block of 60 features on 150 rows: each jitter's fit by its own dense solve, scored on 50 others
    rng = np.random.default_rng(0)
    z = rng.standard_normal((200, 60))  # float64: the moment in float64 products too
    targets = z[:, :3] @ rng.standard_normal((3, 2)) + 0.5 * rng.standard_normal((200, 2))
    jitter, scores = held_out_jitter(z, targets, 150)
    zf, zh = z[:150].astype(np.float64), z[150:].astype(np.float64)
    C = zf.T @ zf / 150
    want = []
    for j in JITTER_GRID:
        A = np.linalg.solve(C + j * np.trace(C) / 60 * np.eye(60), zf.T @ targets[:150] / 150)
        want.append(-np.mean((zh @ A - targets[150:]) ** 2))
    # one eigendecomposition against 11 solves of a matrix of condition below 1e3: 1e-10 relative
    np.testing.assert_allclose(scores, want, rtol=1e-10)
    assert jitter == JITTER_GRID[int(np.argmax(want))]
    # pure noise: the largest jitter fits least, and wins
    assert held_out_jitter(z, rng.standard_normal((200, 2)), 150)[0] >= 1.0


@pytest.mark.parametrize("cls", [KernelLogisticRegression, KernelSVC])
def test_auto_jitter_is_the_chosen_value_bit_for_bit(usps, cls):
    X, y, Xt, _ = usps
    params = {"n_features": 1024, "block_size": 256, "batch_size": 600, "random_state": 0}
    auto = cls(**params).fit(X, y)
    assert auto.preconditioner_jitter == "auto"
    assert auto.jitter_grid_.shape == auto.jitter_scores_.shape == (11,)
    assert np.isfinite(auto.jitter_scores_).all()
    assert auto.preconditioner_jitter_ == auto.jitter_grid_[np.flatnonzero(
        auto.jitter_scores_ == auto.jitter_scores_.max())[-1]]
    # the choice reads the sample the fit reads anyway: a numeric jitter at the chosen value
    # is the same fit, bit for bit, and records no scores
    fixed = cls(**params, preconditioner_jitter=auto.preconditioner_jitter_).fit(X, y)
    np.testing.assert_array_equal(fixed.decision_function(Xt), auto.decision_function(Xt))
    assert fixed.preconditioner_jitter_ == auto.preconditioner_jitter_
    assert not hasattr(fixed, "jitter_scores_")
    # a refit with a numeric value drops the scores of the earlier choice
    auto.set_params(preconditioner_jitter=1e-3).fit(X, y)
    assert auto.preconditioner_jitter_ == 1e-3
    assert not hasattr(auto, "jitter_scores_")


def test_auto_jitter_is_saved_and_the_stream_keeps_it(usps, tmp_path):
    X, y, Xt, _ = usps
    est = KernelLogisticRegression(n_features=1024, block_size=256, batch_size=600, random_state=0).fit(X, y)
    back = load(est.save(tmp_path / "clf.zarr"))
    assert back.preconditioner_jitter_ == est.preconditioner_jitter_
    np.testing.assert_array_equal(back.jitter_scores_, est.jitter_scores_)
    est.partial_fit(X[:600], y[:600])
    back.partial_fit(X[:600], y[:600])
    np.testing.assert_array_equal(back.decision_function(Xt), est.decision_function(Xt))
    assert est.preconditioner_jitter_ == back.preconditioner_jitter_


def test_noisy_labels_get_a_larger_jitter():
    # a9a's labels are noisy (the best accuracy is about 0.85): the block fit needs more ridge
    # than on the clean USPS digits
    X, y = load_a9a("train", sample=True)
    noisy = KernelSVC(n_features=2048, block_size=512, batch_size=2048, random_state=0).fit(X.astype(np.float32), y)
    Xu, yu = load_usps("train", sample=True)
    clean = KernelSVC(n_features=2048, block_size=512, batch_size=2048, random_state=0).fit(Xu, yu)
    assert noisy.preconditioner_jitter_ > clean.preconditioner_jitter_


def test_plain_steps_and_bad_values():
    X, y = load_usps("train", sample=True)
    plain = KernelSVC(preconditioner=None, n_features=256, block_size=64, max_iter=5, random_state=0).fit(X[:500],
                                                                                                         y[:500])
    assert not hasattr(plain, "preconditioner_jitter_")
    for bad in ("best", 0.0, -1.0):
        with pytest.raises(ValueError, match="preconditioner_jitter"):
            KernelRidge(preconditioner_jitter=bad).fit(X[:100], X[:100, 0])
