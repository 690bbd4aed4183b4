"""Dai et al.'s own recipe for the kernel machines: block-preconditioned steps and the preprocessing."""

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.pipeline import make_pipeline

from dsgd_dask import KernelLogisticRegression, KernelRidge, KernelSVC, SamplePCA, UnitNorm
from dsgd_dask.engine.parallel import apply_sums, part_sums
from dsgd_dask.engine.steps import rule_step, step_target
from dsgd_dask.rules.machines import BLOCK_JITTER, MOMENT_SLICE_ROWS, MachineRule, block_moment


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return X[:1000], y[:1000], X[1000:], y[1000:]


def _one_step_ridge(X, y, **kw):
    return KernelRidge(alpha=0, solver="dsgd", features="fourier", preconditioner="block", block_size=64,
                       n_features=64, batch_size=len(X), max_iter=1, eta0=1.0, compute_dtype="float64",
                       random_state=0, **kw).fit(X, y)


def test_one_preconditioned_step_is_the_least_squares_fit_of_the_block():
    # squared loss, eta = 1, the whole data as the batch, coefficients starting at zero: the
    # step's block gets (C + eps I)^{-1} Z^T (y - b) / n, the ridge fit of y less the intercept
    # b by the block, and
    # the least-squares fit as the jitter goes to zero
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(300, 8))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=300)
    for jitter in (BLOCK_JITTER, 1e-1):
        est = _one_step_ridge(X, y, bandwidth=1.0, preconditioner_jitter=jitter)
        assert est._rule.jitter == jitter
        Z = est.model_.features.transform(X, 0, 1)
        C = Z.T @ Z / len(X)
        eps = jitter * np.trace(C) / 64
        ridge = np.linalg.solve(C + eps * np.eye(64), Z.T @ (y - est.intercept_) / len(X))
        # the same normal equations by another factorisation: only rounding (cond(C) is about 8)
        np.testing.assert_allclose(est.model_.coef[:, 0], ridge, rtol=1e-10, atol=1e-12 * np.abs(ridge).max())
    est = _one_step_ridge(X, y, bandwidth=1.0, preconditioner_jitter=1e-6)
    assert est.n_iter_ == 1
    assert est.state_.eta_scale == 1.0
    assert est._config.eta_decay == 1e-4
    Z = est.model_.features.transform(X, 0, 1)
    C = Z.T @ Z / len(X)
    eps = 1e-6 * np.trace(C) / 64
    # and the least-squares solution itself, to the jitter's relative effect, at most eps / lambda_min
    b = est.intercept_
    ls = np.linalg.lstsq(Z, y - b, rcond=None)[0]
    ev = np.linalg.eigvalsh(C)
    bound = 2 * eps / ev[0]
    assert bound < 1e-4
    assert np.abs(est.model_.coef[:, 0] - ls).max() <= bound * np.abs(ls).max()
    np.testing.assert_allclose(est.predict(X) - b, Z @ ls, rtol=0, atol=bound * np.abs(Z @ ls).max())


def test_block_moment_is_the_float64_product_and_the_same_on_any_number_of_threads():
    from dsgd_dask._threads import one_blas_thread

    z = np.random.default_rng(1).normal(size=(9000, 96)).astype(np.float32)
    exact = z.astype(np.float64).T @ z.astype(np.float64)
    sequential = np.zeros_like(exact)
    with one_blas_thread():
        threaded = block_moment(z)
        for i in range(0, len(z), MOMENT_SLICE_ROWS):  # the slices, one after the other, added in order
            sequential += z[i:i + MOMENT_SLICE_ROWS].T @ z[i:i + MOMENT_SLICE_ROWS]
    np.testing.assert_array_equal(threaded, sequential)
    # float32 products over 4096 rows: relative error of order sqrt(4096) eps32 of the
    # entries' scale (the diagonal, about 9000)
    np.testing.assert_allclose(threaded, exact, rtol=0, atol=1e-5 * np.abs(exact).max())


def test_preconditioned_softmax_beats_plain_steps(digits):
    X, y, Xt, yt = digits
    params = dict(alpha=0, solver="dsgd", features="fourier", block_size=256, batch_size=1000, max_iter=5,
                  n_features=5 * 256, random_state=0)
    plain = KernelLogisticRegression(**params, preconditioner=None).fit(X, y)
    block = KernelLogisticRegression(**params, preconditioner="block").fit(X, y)
    # the schedule of the paper: eta_t = 1 / (1 + 1e-4 t) for softmax (eta0 = 0.5 over its curvature 1/2)
    assert block.state_.eta_scale == 1.0
    assert block._config.eta_decay == 1e-4
    # measured: 3.9 % against 14.2 % of test error after five steps
    err_block, err_plain = 1 - block.score(Xt, yt), 1 - plain.score(Xt, yt)
    assert err_block < 0.06
    assert err_block < err_plain / 2
    # one new block per step, never revisited: every block of the budget got coefficients
    coef = block.model_.coef.reshape(5, 256, -1)
    assert block.model_.coef.shape == (5 * 256, 10)
    assert (np.abs(coef).max(axis=(1, 2)) > 0).all()


@pytest.mark.parametrize("cls", [KernelLogisticRegression, KernelSVC])
def test_classifier_defaults_are_the_recipe(digits, cls):
    X, y = digits[0][:600], digits[1][:600]
    default = cls(random_state=0).fit(X, y)
    p = default._params
    # batches of all 600 rows (at most RECIPE_BATCH), blocks of the largest power of two at
    # most half of it, a new Fourier block at every step, 8 passes in steps but at least 16
    assert (p["features"], p["block_size"], p["max_iter"], p["n_blocks"]) == ("fourier", 256, 16, 16)
    assert default._rule.preconditioner == "block"
    # the jitter chosen on held-out rows of the sample; the explicit one below is the chosen value
    assert default._rule.jitter == default.preconditioner_jitter_ in default.jitter_grid_
    explicit = cls(preconditioner="block", features="fourier", batch_size=8192, block_size=256, n_features=16 * 256,
                   max_iter=16, preconditioner_jitter=default.preconditioner_jitter_, random_state=0).fit(X, y)
    np.testing.assert_array_equal(default.model_.coef, explicit.model_.coef)


@pytest.mark.parametrize("cls", [KernelLogisticRegression, KernelSVC, KernelRidge])
def test_plain_steps_keep_their_batch(digits, cls):
    X, y = digits[0][:300], digits[1][:300]
    if cls is KernelRidge:
        y = y.astype(float)
    params = dict(features="fourier", n_features=256, block_size=64, max_iter=20, random_state=0)
    if cls is KernelRidge:
        default = cls(solver="dsgd", **params).fit(X, y)
        assert default._rule.preconditioner is None
    else:
        default = cls(preconditioner=None, **params).fit(X, y)
    assert default._params["batch_size"] == 256
    explicit = cls(**params, batch_size=256, preconditioner="auto" if cls is KernelRidge else None,
                   **({"solver": "dsgd"} if cls is KernelRidge else {})).fit(X, y)
    np.testing.assert_array_equal(default.model_.coef, explicit.model_.coef)


def test_data_parallel_preconditioned_step_equals_the_whole_batch(digits):
    X, y = digits[0][:400], digits[1][:400]
    est = KernelLogisticRegression(alpha=1e-4, features="fourier", preconditioner="block", n_features=192,
                                   block_size=64, batch_size=96, max_iter=3, compute_dtype="float64",
                                   random_state=0).fit(X, y)
    rule, features, cfg = est._rule, est._features, est._config
    assert isinstance(rule, MachineRule)
    assert rule.preconditioner == "block"
    coef = est.state_.coef
    slab = np.column_stack([X[:96], np.searchsorted(est.classes_, y[:96]).astype(float)])
    whole = rule_step(coef, slab, 3, est.state_.eta_scale, features, rule, cfg)
    target = step_target(coef, features, rule, cfg, 3)[1]  # block 0 again: the budget of three is full
    assert target == 0
    parts = [part_sums(coef, slab, rows, target, features, rule) for rows in np.array_split(np.arange(96), 3)]
    split = apply_sums(coef, parts[0] + parts[1] + parts[2], 3, est.state_.eta_scale, features, rule, cfg)
    # the sums differ by rounding only; the solve amplifies it by at most cond(C + eps I)
    np.testing.assert_allclose(split[0], whole[0], rtol=1e-8, atol=1e-10 * np.abs(whole[0]).max())
    # every step on all the rows (batch = n): the fit on two partitions of a dask array is the
    # serial fit to rounding (measured 3e-13 of the largest coefficient)
    params = {**est.get_params(), "batch_size": len(X)}
    one = KernelLogisticRegression(**params).fit(X, y)
    two = KernelLogisticRegression(**{**params, "n_partitions": 2}).fit(da.from_array(X, chunks=(200, -1)),
                                                                 da.from_array(y, chunks=200))
    assert one.n_iter_ == two.n_iter_ == 3
    np.testing.assert_allclose(two.model_.coef, one.model_.coef, rtol=0, atol=1e-10 * np.abs(one.model_.coef).max())


def test_ridge_steps_refuse_the_landmark_preconditioner():
    X = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(ValueError, match="preconditioner='landmarks' is a preconditioner of the passes"):
        KernelRidge(solver="dsgd", preconditioner="landmarks", n_features=32).fit(X, X[:, 0])


def test_preprocessing_is_the_same_on_numpy_and_dask(digits):
    X = digits[0] * 16  # any scale: the rows come out unit-norm
    Xd = da.from_array(X, chunks=(128, 32))
    un = UnitNorm().fit(X)
    u = un.transform(X)
    ud = un.transform(Xd)
    assert isinstance(ud, da.Array)
    np.testing.assert_array_equal(ud.compute(), u)
    np.testing.assert_allclose(np.linalg.norm(u, axis=1), 1.0, rtol=1e-12)
    pca = SamplePCA(n_components=10, n_samples=300, random_state=0).fit(u)
    pcad = SamplePCA(n_components=10, n_samples=300, random_state=0).fit(ud)
    np.testing.assert_array_equal(pcad.sample_indices_, pca.sample_indices_)
    np.testing.assert_array_equal(pcad.components_, pca.components_)
    p, pd = pca.transform(u), pcad.transform(ud)
    assert isinstance(pd, da.Array)
    assert pd.shape == (len(X), 10)
    # one matrix product per chunk against one for all rows: BLAS may block them otherwise
    np.testing.assert_allclose(pd.compute(), p, rtol=0, atol=1e-13)
    # the projection of the sample rows is sklearn's own transform of them
    np.testing.assert_allclose(p[pca.sample_indices_], pca.pca_.transform(u[pca.sample_indices_]), atol=1e-13)


def test_recipe_pipeline_on_dask_input(digits):
    # a step's batch lies within one chunk: chunks of the batch size, blocks well below it
    # (a block as wide as the batch interpolates it)
    X, y, Xt, yt = digits
    pipe = make_pipeline(UnitNorm(), SamplePCA(n_components=20, n_samples=500, random_state=0),
                         KernelLogisticRegression(alpha=0, features="fourier", preconditioner="block", block_size=128,
                                                  batch_size=500, max_iter=4, n_features=4 * 128, random_state=0))
    pipe.fit(da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500))
    pred = pipe.predict(da.from_array(Xt, chunks=(250, -1)))
    assert isinstance(pred, da.Array)
    assert np.mean(pred.compute() == yt) > 0.93


def test_preconditioned_machine_saves_loads_and_continues(digits, tmp_path):
    from dsgd_dask import load

    X, y = digits[0][:600], digits[1][:600]
    params = dict(alpha=0, features="fourier", preconditioner="block", block_size=64, batch_size=300, max_iter=2,
                  n_features=4 * 64, random_state=0)
    est = KernelLogisticRegression(**params).fit(X, y)
    est.save(str(tmp_path / "m.zarr"))
    back = load(str(tmp_path / "m.zarr"))
    assert back._rule.preconditioner == "block"
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    # two more steps from the loaded state equal two more steps of the fitted model: the third
    # and fourth blocks, new ones
    est.partial_fit(X, y)
    back.partial_fit(X, y)
    np.testing.assert_array_equal(back.model_.coef, est.model_.coef)
    assert (np.abs(est.model_.coef.reshape(4, 64, -1)).max(axis=(1, 2)) > 0).all()
