"""Block-preconditioned kernel CCA steps: the dense reference, the data-parallel sums, bad input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from conftest import mnist_halves

from dsgd_dask import KernelCCA
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.rules.machines import block_solve
from dsgd_dask.rules.two_view import KCCARule


@pytest.fixture(scope="module")
def halves():
    return mnist_halves(600)


# Two Fourier blocks of 32 features per view and the whole 600 rows in every batch: the
# steps are then deterministic, and at a negligible ridge (1e-8) their fixed points solve
# the CCA of the features whatever the preconditioner, the problem "rca" solves on the same
# seeded blocks. Measured after 400 steps at eta0 = 1, no decay, seeds 0-2: correlations
# 8e-8 to 2.8e-5 relative, sin^2 <= 1.5e-3 for the ordered variates; the plain steps on the
# same budget: 4.6e-3 to 2.3e-2 and sin^2 0.18 to 0.43 for the third pair (they move the
# directions of small feature variance by that variance).
RECIPE = dict(features="fourier", n_features=64, block_size=32, reg=1e-8, random_state=0)


@pytest.fixture(scope="module")
def rca_reference(halves):
    return KernelCCA(3, solver="rca", **RECIPE).fit(*halves)


def _errors(est, ref, A):
    U, Ur = est.transform(A), ref.transform(A)
    rel = float(np.abs(est.correlations_ / ref.correlations_ - 1).max())
    return rel, [principal_angle_sin2(U[:, :i], Ur[:, :i]) for i in range(1, 4)]


def test_preconditioned_steps_reach_rca_on_the_same_blocks(halves, rca_reference):
    A, B = halves
    steps = dict(solver="dsgd", batch_size=600, max_iter=400, eta0=1.0, eta_decay=0.0, **RECIPE)
    est = KernelCCA(3, preconditioner="block", **steps).fit(A, B)
    for f, g in zip(est._features, rca_reference._features, strict=True):
        assert f.to_dict() == g.to_dict()
    rel, sin2 = _errors(est, rca_reference, A)
    assert rel < 1e-4
    assert max(sin2) < 5e-3
    # the same budget without the preconditioner is far from it: the cause the option removes
    plain_rel, plain_sin2 = _errors(KernelCCA(3, **steps).fit(A, B), rca_reference, A)
    assert plain_rel > 1e-3
    assert max(plain_sin2) > 0.1


def test_block_update_is_the_plain_update_through_the_block_covariance(halves):
    rng = np.random.default_rng(0)
    n, m, k = 50, 8, 3
    h = (rng.normal(size=(n, k)), rng.normal(size=(n, k)))
    z = (rng.normal(size=(n, m)), rng.normal(size=(n, m)))  # float64: the moments without float32 rounding
    cols = (slice(0, 4), slice(4, 8))
    plain = KCCARule(cols, True, 1e9, 1e-3)
    block = KCCARule(cols, True, 1e9, 1e-3, preconditioner="block", jitter=0.1)
    up_plain = plain.updates(plain.sums(h, z, {}, False), 0.3)
    up_block = block.updates(block.sums(h, z, {}, False), 0.3)
    for i, (p, b) in enumerate(zip(up_plain, up_block, strict=True)):
        np.testing.assert_array_equal(p.shrink, b.shrink)  # the ridge still shrinks every block
        C = np.cov(z[i], rowvar=False, bias=True)
        np.testing.assert_allclose(b.delta, block_solve(C, p.delta, 0.1), rtol=1e-10)
        np.testing.assert_allclose((C + 0.1 * np.trace(C) / m * np.eye(m)) @ b.delta, p.delta, rtol=1e-8, atol=1e-12)


def test_partial_sums_equal_the_preconditioned_step_on_the_union(halves):
    from dsgd_dask.engine.parallel import apply_sums, part_sums
    from dsgd_dask.engine.steps import StepConfig, rule_step
    from dsgd_dask.streams.inputs import paired_views, stacked_view

    A, B = halves
    est = KernelCCA(3, features="fourier", n_features=256, block_size=64, batch_size=128, max_iter=40,
                    preconditioner="block", preconditioner_jitter=0.1, random_state=3).fit(A, B)
    slab = stacked_view(*paired_views(A, B)).data[:96]
    features, coef, rule = est._feature_sets(), est.state_.coef, est._rule
    assert rule.preconditioner == "block"
    blocks = coef[0].shape[0] // 64
    for n_blocks in (blocks + 1, blocks):  # a growing step and a revisiting step
        cfg = StepConfig(n_blocks=n_blocks, batch_size=96, eta_decay=0.01)
        whole = rule_step(coef, slab, 40, est.state_.eta_scale, features, rule, cfg)
        target = blocks if n_blocks > blocks else 40 % blocks
        parts = [part_sums(coef, slab, rows, target, features, rule) for rows in np.array_split(np.arange(96), 3)]
        split = apply_sums(coef, parts[0] + parts[1] + parts[2], 40, est.state_.eta_scale, features, rule, cfg)
        # float32 features of 32-row products against 96-row ones (see the same test of the
        # plain rules in test_two_view_steps.py); the block solve of 96 rows on 64 features
        # amplifies their rounding by the condition of C + epsilon I, so the bound is relative
        # to the step with a looser factor.
        for a, b, c in zip(split, whole, coef, strict=True):
            step = np.abs(b - np.pad(c, ((0, b.shape[0] - c.shape[0]), (0, 0)))).max()
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-4 * step)


@pytest.mark.parametrize(("param", "value"), [("preconditioner", "cholesky"), ("preconditioner_jitter", 0.0),
                                              ("preconditioner_jitter", -1.0), ("preconditioner_jitter", "auto")])
def test_bad_preconditioner_is_refused(halves, param, value):
    with pytest.raises(ValueError, match=param):
        KernelCCA(2, solver="dsgd", features="fourier", n_features=64, max_iter=5, **{param: value}).fit(*halves)


def test_rule_refuses_an_unknown_preconditioner():
    with pytest.raises(ValueError, match="preconditioner"):
        KCCARule((slice(0, 1), slice(1, 2)), True, 1.0, 1e-3, preconditioner="diag")


# -- preconditioner="sample": each block's covariance measured once, on the fit's sample ----------
def test_sample_preconditioned_steps_reach_rca_on_the_same_blocks(halves, rca_reference):
    """600 rows: the sample is every row, so its covariance is the batch's and the fixed points the same."""
    A, B = halves
    steps = dict(solver="dsgd", batch_size=600, max_iter=400, eta0=1.0, eta_decay=0.0, **RECIPE)
    est = KernelCCA(3, preconditioner="sample", **steps).fit(A, B)
    rel, sin2 = _errors(est, rca_reference, A)
    assert rel < 1e-4
    assert max(sin2) < 5e-3


def test_sample_factors_solve_the_sample_covariance(halves):
    from dsgd_dask.features.blocks import RandomFeatures
    from dsgd_dask.features.kernels import parse_kernel
    from dsgd_dask.rules.preconditioners import SampleBlockPreconditioner

    A, B = halves
    spec = parse_kernel("gaussian", 5.0, None)
    feats = tuple(RandomFeatures(spec, v.shape[1], 16, 7 + i, "float64") for i, v in enumerate((A, B)))
    pre = SampleBlockPreconditioner(feats, (A, B), jitter=0.1, center=True)
    G = np.random.default_rng(0).normal(size=(16, 3))
    for view, X in enumerate((A, B)):
        for block in (0, 2):
            z = feats[view].transform(X, block, block + 1)
            C = np.cov(z, rowvar=False, bias=True)
            np.testing.assert_allclose(pre.solve(view, block, G), block_solve(C, G, 0.1), rtol=1e-8)
    assert pre.nbytes == 4 * 16 * 16 * 8  # one factor per view and block used
    again = pickle.loads(pickle.dumps(pre))  # the factors stay in their process
    assert again.nbytes == 0
    np.testing.assert_array_equal(again.solve(1, 2, G), pre.solve(1, 2, G))


def test_sample_preconditioned_model_is_the_same_on_threads(halves):
    import dask
    import dask.array as da

    A, B = halves
    params = dict(solver="dsgd", features="fourier", n_features=128, block_size=32, batch_size=50, max_iter=30,
                  preconditioner="sample", random_state=4)
    with dask.config.set(scheduler="sync"):
        ref = KernelCCA(3, **params).fit(da.from_array(A, chunks=100), da.from_array(B, chunks=100))
    with dask.config.set(scheduler="threads"):
        est = KernelCCA(3, **params).fit(da.from_array(A, chunks=100), da.from_array(B, chunks=100))
    for a, b in zip(est.models_, ref.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)
    assert est._rule.sample.nbytes == 2 * 4 * 32 * 32 * 8  # 4 blocks per view, each factored once


def test_sample_preconditioner_measures_wide_blocks_on_eight_rows_per_feature():
    """Blocks of 1280 features: 10,240 sample rows (8 per feature) instead of the 10,000 of other fits."""
    from dsgd_dask.estimators.components import N_SAMPLE
    from dsgd_dask.estimators.two_view import SAMPLE_ROWS_PER_FEATURE

    rng = np.random.default_rng(0)
    t = rng.normal(size=(12_000, 1))
    A = np.hstack([t, rng.normal(size=(12_000, 2))])
    B = np.hstack([np.sin(t), rng.normal(size=(12_000, 2))])
    params = dict(solver="dsgd", features="fourier", n_features=1280, block_size=1280, batch_size=256, max_iter=1,
                  reg=1e-3, random_state=0)
    est = KernelCCA(2, preconditioner="sample", **params).fit(A, B)
    rows = [r.shape[0] for r in est._rule.sample.rows]
    assert rows == [SAMPLE_ROWS_PER_FEATURE * 1280] * 2 == [10_240] * 2
    assert est._sample_size({"block_size": 1280}) > N_SAMPLE
    plain = KernelCCA(2, preconditioner="block", **params)
    assert plain._sample_size({"block_size": 1280}) == N_SAMPLE
    narrow = KernelCCA(2, preconditioner="sample", **{**params, "n_features": 1024, "block_size": 512})
    assert narrow._sample_size({"block_size": 512}) == N_SAMPLE  # 8 x 512 rows are fewer than 10,000


def test_factored_cca_solves_the_problem_with_each_views_ridge():
    """Dense reference: the singular values of ``(Cxx + ex)^{-1/2} Cxy (Cyy + ey)^{-1/2}``, and the constraints."""
    from scipy.linalg import cho_factor, fractional_matrix_power

    from dsgd_dask.rules.solutions import factored_cca

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 12))
    Y = np.hstack([X[:, :5] @ rng.normal(size=(5, 6)), rng.normal(size=(400, 3))]) + 0.5 * rng.normal(size=(400, 9))
    C = np.cov(X, Y, rowvar=False, bias=True)
    Cxx, Cyy, Cxy = C[:12, :12], C[12:, 12:], C[:12, 12:]
    Mx, My = Cxx + 0.3 * np.eye(12), Cyy + 0.05 * np.eye(9)
    ref = np.linalg.svd(fractional_matrix_power(Mx, -0.5) @ Cxy @ fractional_matrix_power(My, -0.5),
                        compute_uv=False)
    for lower in (True, False):
        rho, A, B = factored_cca(cho_factor(Mx, lower=lower), cho_factor(My, lower=lower), Cxy, 4)
        np.testing.assert_allclose(rho, ref[:4], rtol=1e-12)
        np.testing.assert_allclose(A.T @ Mx @ A, np.eye(4), atol=1e-12)
        np.testing.assert_allclose(B.T @ My @ B, np.eye(4), atol=1e-12)
        np.testing.assert_allclose(A.T @ Cxy @ B, np.diag(rho), atol=1e-12)
    rho, A, B = factored_cca(cho_factor(Mx), cho_factor(My), Cxy, 11)  # beyond the rank: zeros
    assert rho.shape == (11,)
    assert np.all(rho[9:] == 0)
    assert np.all(A[:, 9:] == 0)


def test_sample_preconditioned_steps_start_from_the_first_blocks_canonical_pairs(halves):
    """The initial functions: the first block's canonical pairs on the whole sample, in the steps' metric.

    Steps of ``eta0 = 1e-12`` leave them where they start, so the fitted variates span
    the same space as the first block's pairs computed independently on the sample rows.
    """
    from dsgd_dask.rules.preconditioners import SampleBlockPreconditioner

    A, B = halves
    est = KernelCCA(3, solver="dsgd", features="fourier", n_features=128, block_size=32, batch_size=100,
                    max_iter=4, eta0=1e-12, preconditioner="sample", preconditioner_jitter=0.5,
                    random_state=1).fit(A, B)
    fresh = SampleBlockPreconditioner(est._features, est._rule.sample.rows, 0.5, center=True)
    rho, Ax, Ay = fresh.canonical_pairs(0, 3)
    assert np.all(np.diff(rho) <= 0)
    assert rho[0] < 1
    for view, (X, D) in enumerate(((A, Ax), (B, Ay))):
        start = est._features[view].transform(X, 0, 1) @ D
        fitted = est.transform(A, B)[view]
        assert principal_angle_sin2(fitted - fitted.mean(axis=0), start - start.mean(axis=0)) < 1e-8
    Cx = np.cov(est._features[0].transform(est._rule.sample.rows[0], 0, 1), rowvar=False, bias=True)
    np.testing.assert_allclose(Ax.T @ (Cx + 0.5 * np.trace(Cx) / 32 * np.eye(32)) @ Ax, np.eye(3), atol=1e-6)


def test_loaded_sample_preconditioned_model_refuses_to_continue(halves, tmp_path):
    from dsgd_dask import load

    A, B = halves
    est = KernelCCA(2, solver="dsgd", features="fourier", n_features=64, block_size=32, max_iter=5,
                    preconditioner="sample", random_state=0).partial_fit(A, B)
    est.save(tmp_path / "m.zarr")
    loaded = load(tmp_path / "m.zarr")
    np.testing.assert_array_equal(loaded.transform(A), est.transform(A))
    with pytest.raises(ValueError, match="sample"):
        loaded.partial_fit(A, B)
    est.partial_fit(A, B)  # the estimator that holds its sample continues


def test_store_validation_rows_leave_out_the_comparisons_held_out_rows(tmp_path):
    """``mnist_halves_steps.py --store`` never trains on its validation rows nor on kcca-mnist8m's held-out rows."""
    import zarr

    from pipelines.mnist_halves_steps import store_rows

    n, d, held_n = 500, 784, 40
    pixels = np.random.default_rng(7).integers(0, 256, size=(n, d), dtype=np.uint8)
    pixels[:, 0] = np.arange(n) % 256  # first two columns: the row's index
    pixels[:, 1] = np.arange(n) // 256
    zarr.open_group(str(tmp_path / "store.zarr"), mode="w").create_array("X", data=pixels, chunks=(64, d))
    train, val = store_rows(tmp_path / "store.zarr", n=held_n)
    train = train.compute()

    def index(rows):
        return np.rint(rows[:, 0] * 255).astype(int) + 256 * np.rint(rows[:, 1] * 255).astype(int)

    held = np.random.default_rng(2).choice(n, held_n, replace=False)  # the comparison's draw
    seen, checked = index(train), index(val)
    assert val.shape == (held_n, d)
    assert train.shape == (n - 2 * held_n, d)
    assert np.intersect1d(seen, checked).size == 0
    assert np.intersect1d(seen, held).size == 0
    assert np.intersect1d(checked, held).size == 0
    np.testing.assert_array_equal(val, pixels[checked].astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(train, pixels[np.sort(seen)].astype(np.float32) / np.float32(255))


def test_store_rotation_rows_are_drawn_from_all_training_rows():
    """The rotated sum's linear CCA is fitted on rows drawn from the whole store, not on its first (undeformed) rows."""
    from pipelines.mnist_halves_steps import rotation_rows

    rows = rotation_rows(8_090_000)
    assert rows.size == np.unique(rows).size == 10_000
    assert np.all(np.diff(rows) > 0)
    assert rows.min() < 8_090_000 // 100
    assert rows.max() > 8_090_000 * 99 // 100
    assert np.mean(rows < 60_000) < 0.02  # about 60,000 / 8,090,000 of them among the undeformed digits
    np.testing.assert_array_equal(rotation_rows(300), np.arange(300))  # a store smaller than the draw: every row
