"""Block-preconditioned kernel CCA steps: the dense reference, the data-parallel sums, bad input."""

from __future__ import annotations

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
                                              ("preconditioner_jitter", -1.0)])
def test_bad_preconditioner_is_refused(halves, param, value):
    with pytest.raises(ValueError, match=param):
        KernelCCA(2, solver="dsgd", features="fourier", n_features=64, max_iter=5, **{param: value}).fit(*halves)


def test_rule_refuses_an_unknown_preconditioner():
    with pytest.raises(ValueError, match="preconditioner"):
        KCCARule((slice(0, 1), slice(1, 2)), True, 1.0, 1e-3, preconditioner="diag")
