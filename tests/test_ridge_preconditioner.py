"""The preconditioners of KernelRidge(solver="cg"): block-Jacobi and the landmark (FALKON-style) one."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from conftest import KERNEL_CASES, blas_threads, kernel_id
from threadpoolctl import threadpool_limits

from dsgd_dask import KernelRidge
from dsgd_dask.datasets import load_mnist
from dsgd_dask.engine import ridge as ridge_module
from dsgd_dask.engine.ridge import BlockJacobi, LandmarkPreconditioner, RKHSPenalty, landmark_moment
from dsgd_dask.features import KernelSpec
from dsgd_dask.features.kernels import kernel_matrix
from dsgd_dask.features.nystroem import NystroemFeatures

#: The Gaussian bandwidth of the MNIST pipeline (pixels / 255).
BANDWIDTH = 7.17


@pytest.fixture(scope="module")
def digits():
    """1,500 MNIST digits (the subset shipped with the package) to fit, 500 held out; one-hot {-1, +1} codes."""
    X, y = load_mnist("train", sample=True)
    X = X.astype(np.float64) / 255
    Y = -np.ones((len(y), 10))
    Y[np.arange(len(y)), y] = 1.0
    return X[:1500], Y[:1500], X[4000:4500]


def _dense(est, X, Y, Xh, nu):
    """Predictions on ``Xh`` of the exact minimiser of the same objective: RKHS-norm penalty on the landmarks' span.

    The function fits ``Y`` less ``est``'s intercept, which the predictions add back.
    """
    feats = est.model_.features
    J, m = feats.max_blocks, feats.block_size
    M = J * m
    W = np.zeros((M, M))
    for j in range(J):
        W[j * m:(j + 1) * m, j * m:(j + 1) * m] = feats.normalization[j]
    G = W.T @ feats.landmark_kernel(0, M, J) @ W  # |z a|_H^2 = a^T G a
    Z = feats.transform(X, 0, J).astype(np.float64)
    b = est.intercept_
    A = np.linalg.lstsq(Z.T @ Z / len(X) + nu * G, Z.T @ (Y - b) / len(X), rcond=None)[0]
    return feats.transform(Xh, 0, J).astype(np.float64) @ A + b


def test_landmarks_reach_the_dense_solution_in_fewer_passes(digits):
    # Three Nyström blocks of 256 digits each: every block alone approximates the same
    # kernel, so E[z z^T] has a near-null space that only the penalty nu W^T K_LL W
    # regularises. Measured (nu = 1e-5, float64 features): the landmark preconditioner
    # reaches a residual of 4.9e-9 after 18 passes, its predictions 4e-8 from the dense
    # solve; block-Jacobi is at 6.7e-4 after the same 18 passes (predictions 3.5e-2 away)
    # and 3.5e-4 after 40 (2.7e-2).
    X, Y, Xh = digits
    nu = 1e-5
    # no intercept: the callback's first model (after the right-hand side's pass) is then 0
    params = {"alpha": nu, "solver": "cg", "n_features": 768, "block_size": 256, "compute_dtype": "float64",
              "bandwidth": BANDWIDTH, "fit_intercept": False, "random_state": 0}
    traj = {"block": [], "landmarks": []}

    def keep(pre):
        return lambda n, model: traj[pre].append(model.evaluate(Xh))

    lm = KernelRidge(**params, preconditioner="landmarks", tol=1e-8, max_iter=30)
    lm.fit(X, Y, callback=keep("landmarks"))
    assert lm.preconditioner_ == "landmarks"
    res = [c["measure"] for c in lm.convergence_]
    assert res[-1] <= 1e-8
    assert lm.n_iter_ <= 26  # the first pass and at most 25 of conjugate gradients
    dense = _dense(lm, X, Y, Xh, nu)
    # |f - f*|^2 on the rows is at most r^T H^{-1} r: a residual of 1e-8 |b| leaves an error
    # of the function of 4e-8 of its size here; 1e-6 leaves room for round-off of another BLAS
    assert np.linalg.norm(lm.predict(Xh) - dense) / np.linalg.norm(dense) < 1e-6

    bj = KernelRidge(**params, preconditioner="block", tol=1e-8, max_iter=lm.n_iter_)
    bj.fit(X, Y, callback=keep("block"))
    assert bj.preconditioner_ == "block"
    # as many passes leave block-Jacobi far from converged, on its way to the same solution
    assert bj.convergence_[-1]["measure"] > 1e4 * lm.convergence_[-1]["measure"]
    gap = np.linalg.norm(bj.predict(Xh) - dense) / np.linalg.norm(dense)
    assert 1e-4 < gap < 0.05
    # from the fourth pass of conjugate gradients on (the fifth full pass) the landmark preconditioner
    # is closer to the solution at every pass (block-Jacobi's first steps, on each block's own moment,
    # are the better ones: measured 0.12 against 0.37 after one); the callback sees every full pass,
    # the first (a zero model) included
    errs = {pre: [np.linalg.norm(f - dense) / np.linalg.norm(dense) for f in fs] for pre, fs in traj.items()}
    assert len(errs["block"]) == len(errs["landmarks"]) == lm.n_iter_
    assert errs["block"][0] == errs["landmarks"][0] == 1.0
    assert all(a < b for a, b in zip(errs["landmarks"][4:], errs["block"][4:], strict=True))


def test_landmark_moment_is_the_landmarks_second_moment(digits):
    # W^T K_LL^2 W / M, tile by tile, against the dense product (float64 throughout)
    X = digits[0]
    spec = KernelSpec("gaussian", BANDWIDTH)
    m, J = 64, 3
    feats = NystroemFeatures(spec, X[:J * m], m, seed=0, dtype="float64", center=X.mean(axis=0))
    K = kernel_matrix(spec, X[:J * m], X[:J * m])
    W = np.zeros((J * m, J * m))
    for j in range(J):
        W[j * m:(j + 1) * m, j * m:(j + 1) * m] = feats.normalization[j]
    Z = feats.transform(X[:J * m], 0, J)  # the features of the landmarks themselves: Z = K W
    np.testing.assert_allclose(Z, K @ W, atol=1e-8)
    expected = W.T @ K @ K @ W / (J * m)
    got = landmark_moment(feats, J)
    upper = np.triu(np.ones((J * m, J * m), dtype=bool))
    np.testing.assert_allclose(got[upper], expected[upper], rtol=0, atol=1e-12)
    # the first two blocks alone: their own landmarks, their own moment
    W2, K2 = W[:2 * m, :2 * m], K[:2 * m, :2 * m]
    np.testing.assert_allclose(landmark_moment(feats, 2)[upper[:2 * m, :2 * m]],
                               (W2.T @ K2 @ K2 @ W2 / (2 * m))[upper[:2 * m, :2 * m]], rtol=0, atol=1e-12)


def test_landmark_moment_of_float32_features(digits):
    # float32 features: the products in float32 (the whitened sections kept in the second half of
    # the result's buffer), the result in float64 to float32 round-off: |error| <= eps32 * |G_i| |G_j| / M
    # times the GEMM's summation length, M = 256 here; the tiles below the diagonal zero
    X = digits[0]
    spec = KernelSpec("gaussian", BANDWIDTH)
    m, J = 64, 4
    M = J * m
    feats = NystroemFeatures(spec, X[:M], m, seed=0, dtype="float32", center=X.mean(axis=0))
    K = kernel_matrix(spec, X[:M], X[:M])
    W = np.zeros((M, M))
    for j in range(J):
        W[j * m:(j + 1) * m, j * m:(j + 1) * m] = feats.normalization[j]
    G = W.T @ K
    expected = G @ G.T / M
    got = landmark_moment(feats, J)
    assert got.dtype == np.float64
    upper = np.triu(np.ones((M, M), dtype=bool))
    norms = np.linalg.norm(G, axis=1)
    bound = M * np.finfo(np.float32).eps * np.outer(norms, norms) / M
    assert np.all(np.abs(got - expected)[upper] <= bound[upper])
    assert np.abs(got - expected)[upper].max() > 0  # computed in float32, not float64
    left = np.kron(np.tril(np.ones((J, J), dtype=bool), -1), np.ones((m, m), dtype=bool))
    assert not got[left].any()  # the tiles left of the diagonal


def test_landmark_gram_in_the_factors_free_tiles(digits):
    # float32 Gram tiles W^T K_LL W, rounded from the float64 sections, kept two to a tile below the
    # diagonal of the preconditioner's float64 factor: after the in-place factorisation they are intact,
    # the factor is that same buffer, and the penalty's products match the dense ones
    X = digits[0]
    spec = KernelSpec("gaussian", BANDWIDTH)
    m, J, alpha, ridge = 64, 4, 1e-3, 1e-6
    M = J * m
    feats = NystroemFeatures(spec, X[:M], m, seed=0, dtype="float32", center=X.mean(axis=0))
    W = np.zeros((M, M))
    for j in range(J):
        W[j * m:(j + 1) * m, j * m:(j + 1) * m] = feats.normalization[j]
    gram = W.T @ kernel_matrix(spec, X[:M], X[:M]) @ W
    pre = LandmarkPreconditioner(feats, J, alpha, rkhs=True, ridge=ridge)
    assert pre.gram.hosted
    assert pre.gram.dtype == np.float32
    factor = pre.factor[0]
    assert all(np.shares_memory(pre.gram.tile(i, j), factor) for i in range(J) for j in range(i, J))
    np.testing.assert_allclose(pre.gram.dense(), gram, rtol=0, atol=np.finfo(np.float32).eps * np.abs(gram).max())
    # the factor's own triangle is untouched by the tiles: L L^T is the preconditioned matrix, the
    # moment to float32 round-off (as in test_landmark_moment_of_float32_features)
    L = np.tril(factor)
    K = kernel_matrix(spec, X[:M], X[:M])
    P = alpha * gram + ridge * W.T @ W
    want = W.T @ K @ K @ W / M + P + pre.floor * np.eye(M)
    np.testing.assert_allclose(L @ L.T, want, rtol=0, atol=M * np.finfo(np.float32).eps * np.abs(want).max())
    A = np.random.default_rng(0).normal(size=(M, 3))
    np.testing.assert_allclose(pre.penalty(A), P @ A + pre.floor * A, rtol=0, atol=1e-5 * np.abs(P @ A).max())


@pytest.mark.parametrize("spec", KERNEL_CASES, ids=kernel_id)
def test_landmark_kernel_rows(blobs, spec):
    # rows of the landmarks' own kernel matrix, in float64 whatever the features' precision
    # (distances from |x|^2 + |l|^2 - 2 x.l as the features compute them: the square root of
    # its round-off, 1e-7, on the diagonal for the Matérn and Laplacian-type kernels)
    feats = NystroemFeatures(spec, blobs[:96], 32, seed=0, dtype="float32", center=blobs.mean(axis=0))
    K = kernel_matrix(spec, blobs[:96])
    got = feats.landmark_kernel(32, 64)
    assert got.dtype == np.float64
    assert got.shape == (32, 96)
    np.testing.assert_allclose(got, K[32:64], rtol=0, atol=1e-6)
    np.testing.assert_allclose(feats.landmark_kernel(0, 64, n_blocks=2), K[:64, :64], rtol=0, atol=1e-6)


def test_repeated_landmarks_keep_the_preconditioner_defined(digits):
    # Landmarks repeated within a block and across blocks: K_LL is singular and the
    # whitenings have zero columns (features that vanish); the floor under alpha keeps the
    # Cholesky factor defined even at alpha = 0, and the preconditioner leaves the zero
    # features' coefficients at zero.
    X = digits[0]
    spec = KernelSpec("gaussian", BANDWIDTH)
    m = 64
    rows = np.concatenate([X[:32], X[:32], X[:64]])  # block 0: each row twice; block 1: block 0's rows
    feats = NystroemFeatures(spec, rows, m, seed=0, dtype="float64")
    assert np.all(feats.normalization[0][:, :32] == 0)
    for alpha in (0.0, 1e-6):
        pre = LandmarkPreconditioner(feats, 2, alpha)
        assert pre.floor >= alpha
        assert pre.floor > 0
        R = np.ones((2 * m, 3))
        R[:32] = 0  # no right-hand side on the vanishing features
        out = pre(R)
        assert np.isfinite(out).all()
        np.testing.assert_allclose(out[:32], 0, atol=1e-8 * np.abs(out).max())


def test_data_with_repeated_rows(digits):
    # every digit twice: the drawn landmarks repeat; both preconditioners solve the same system
    X, Y, Xh = digits
    X2, Y2 = np.concatenate([X[:500], X[:500]]), np.concatenate([Y[:500], Y[:500]])
    params = {"alpha": 1e-4, "solver": "cg", "n_features": 512, "block_size": 256, "compute_dtype": "float64",
              "bandwidth": BANDWIDTH, "random_state": 0, "tol": 1e-7}
    lm = KernelRidge(**params, preconditioner="landmarks", max_iter=40).fit(X2, Y2)
    assert len(np.unique(lm.model_.features.landmarks, axis=0)) < 512
    assert lm.convergence_[-1]["measure"] <= 1e-7
    dense = _dense(lm, X2, Y2, Xh, 1e-4)
    assert np.linalg.norm(lm.predict(Xh) - dense) / np.linalg.norm(dense) < 1e-5


def test_auto_and_bad_values(digits):
    X, Y, _ = digits
    X, Y = X[:600], Y[:600, :2]
    small = {"solver": "cg", "max_iter": 2, "bandwidth": BANDWIDTH, "random_state": 0}
    assert KernelRidge(**small, n_features=512, block_size=256).fit(X, Y).preconditioner_ == "landmarks"
    # one block: block-Jacobi is the whole system matrix
    assert KernelRidge(**small, n_features=256, block_size=256).fit(X, Y).preconditioner_ == "block"
    assert KernelRidge(**small, features="fourier", n_features=512).fit(X, Y).preconditioner_ == "block"
    with pytest.raises(ValueError, match="'preconditioner' parameter of KernelRidge must be a str among"):
        KernelRidge(**small, preconditioner="jacobi").fit(X, Y)
    with pytest.raises(ValueError, match="'preconditioner' parameter of KernelRidge must be a str among"):
        KernelRidge(**small, preconditioner=None).fit(X, Y)
    with pytest.raises(ValueError, match="needs Nyström features"):
        KernelRidge(**small, features="fourier", preconditioner="landmarks").fit(X, Y)


def test_rkhs_penalty_products(digits):
    # (alpha W^T K_LL W + ridge W^T W) A, regenerated from the landmarks or from the Gram
    # matrix the landmark preconditioner keeps, against the dense product (float64)
    X = digits[0]
    spec = KernelSpec("gaussian", BANDWIDTH)
    m, J, alpha, ridge = 64, 3, 1e-3, 1e-6
    feats = NystroemFeatures(spec, X[:J * m], m, seed=0, dtype="float64", center=X.mean(axis=0))
    W = np.zeros((J * m, J * m))
    for j in range(J):
        W[j * m:(j + 1) * m, j * m:(j + 1) * m] = feats.normalization[j]
    P = alpha * W.T @ kernel_matrix(spec, X[:J * m], X[:J * m]) @ W + ridge * W.T @ W
    A = np.random.default_rng(0).normal(size=(J * m, 4))
    regenerated = RKHSPenalty(feats, J, alpha, ridge)
    np.testing.assert_allclose(regenerated(A), P @ A, rtol=0, atol=1e-10 * np.abs(P @ A).max())
    pre = LandmarkPreconditioner(feats, J, alpha, rkhs=True, ridge=ridge)
    assert pre.gram.dtype == np.float64
    np.testing.assert_allclose(pre.penalty(A), P @ A + pre.floor * A, rtol=0, atol=1e-10 * np.abs(P @ A).max())
    blocks = regenerated.block_diagonal()
    for j in range(J):
        np.testing.assert_allclose(blocks[j], P[j * m:(j + 1) * m, j * m:(j + 1) * m], rtol=0, atol=1e-12)


def test_block_jacobi_is_the_block_diagonal_inverse_on_one_blas_thread(monkeypatch):
    """Each block's Cholesky solve of ``B_b + P_b + floor I``, factored and applied on one BLAS thread.

    OpenBLAS 0.3.31's threaded ``dpotrf`` crashes on matrices of 16,384 rows, so the
    factors must not be computed with more than one thread, whatever the caller's limit.
    """
    rng = np.random.default_rng(0)
    J, m = 3, 40
    A = rng.standard_normal((J, m, 2 * m))
    blocks = A @ A.transpose(0, 2, 1) / (2 * m)
    P = A[:, :, :5] @ A[:, :, :5].transpose(0, 2, 1)
    R = rng.standard_normal((J * m, 3))
    seen = []

    def recording(fn):
        def wrapped(*args, **kwargs):
            seen.append(blas_threads())
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(ridge_module, "cho_factor", recording(scipy.linalg.cho_factor))
    monkeypatch.setattr(ridge_module, "cho_solve", recording(scipy.linalg.cho_solve))
    with threadpool_limits(limits=2, user_api="blas"):
        for alpha, penalty in ((0.5, None), (0.0, P)):
            pre = BlockJacobi(blocks, alpha, penalty)
            floor = max(alpha, 1e-10 * max(float(np.trace(b)) / m for b in blocks))
            dense = scipy.linalg.block_diag(*(blocks + (0 if penalty is None else penalty)))
            expected = np.linalg.solve(dense + floor * np.eye(J * m), R)
            np.testing.assert_allclose(pre(R), expected, rtol=1e-6, atol=1e-8 * np.abs(expected).max())
    assert len(seen) == 4 * J
    assert set(seen) == {1}


def test_joint_blocks_average_to_the_nystroem_kernel_of_all_landmarks(digits):
    # the steps' Nyström features: sqrt(J) k(x, L) K_LL^{-1/2} split into J blocks. Their average
    # kernel sum_t z_t z_t^T / J is the Nyström kernel of all the landmarks, and J |A|^2 the squared
    # RKHS norm of f = z A (A in the span the root keeps): the norm the passes penalise (float64)
    from dsgd_dask.engine.ridge import JointNystroemBlocks

    X = digits[0]
    spec = KernelSpec("gaussian", BANDWIDTH)
    m, J = 64, 3
    M = J * m
    landmarks, rows = X[:M], X[M:M + 300]
    blocks = NystroemFeatures(spec, landmarks, m, seed=0, dtype="float64", center=X.mean(axis=0))
    joint = JointNystroemBlocks.of(blocks)
    assert not joint.raw_are_features
    assert joint.max_blocks == J
    Z = joint.transform(rows, 0, J)
    np.testing.assert_array_equal(joint.transform(rows, 1, 2), Z[:, m:2 * m])
    K_LL, K_xL = kernel_matrix(spec, landmarks), kernel_matrix(spec, rows, landmarks)
    nystroem = K_xL @ np.linalg.solve(K_LL, K_xL.T)
    np.testing.assert_allclose(Z @ Z.T / J, nystroem, rtol=0, atol=1e-6 * np.abs(nystroem).max())
    # the gram of the blocks in the RKHS, root K_LL root, is J times a projection
    P = joint.root @ K_LL @ joint.root / J
    np.testing.assert_allclose(P @ P, P, rtol=0, atol=1e-8)
    A = P @ np.random.default_rng(0).normal(size=(M, 2))
    C = joint.fold(A)  # the coefficients of the kernel sections
    np.testing.assert_allclose(np.einsum("ij,ij->j", C, K_LL @ C), J * (A * A).sum(axis=0), rtol=1e-8)
    np.testing.assert_allclose(K_xL @ C, Z @ A, rtol=0, atol=1e-10 * np.abs(Z @ A).max())
    with pytest.raises(ValueError, match=f"coefficients of all {M} features"):
        joint.fold(A[:m])


def test_float64_blocks_near_round_off_stop_with_a_warning():
    # 256 Gaussian landmarks in the unit square, float64 blocks of 128: each whitening keeps
    # eigenvalues down to m eps (its entries reach 5e6), so W^T K_LL W carries round-off of
    # order 1e-3 and the system E[z z^T] + alpha W^T K_LL W is indefinite by about 1e-7 in
    # directions the data do not reach. The landmark preconditioner's first floor does not hold
    # that up (the factorisation used to fail); a higher floor does. The conjugate gradients
    # then meet a direction of non-positive curvature: they stop there with a warning instead of
    # running every pass without moving. Whether and where they stop depends on the rounding of
    # the kernel sections and the BLAS kernels: at alpha = 5e-5, after 7 passes at a relative
    # residual of 2.3e-4 with OpenBLAS's SkylakeX kernels and of 2.5e-4 with
    # OPENBLAS_CORETYPE=Haswell (at 1e-4 the sections' rounding now leaves the system definite
    # and the gradients converge). The last iterate is then within 5e-3 of the targets' range
    # of the exact kernel ridge (measured 5.8e-4 and 5.9e-4), which the block-Jacobi solve
    # matches to 1e-6 here, and its R² on the training rows within 1e-4 of the exact one's
    # (measured 6.2e-6 and 4.6e-6).
    rng = np.random.default_rng(0)
    X, Xt = rng.uniform(size=(800, 2)), rng.uniform(size=(400, 2))
    y = np.sin(6 * X[:, 0]) + X[:, 1]
    alpha = 5e-5
    params = {"alpha": alpha, "solver": "cg", "compute_dtype": "float64", "n_features": 256, "block_size": 128,
              "random_state": 0}
    with pytest.warns(RuntimeWarning, match="not positive definite to round-off"):
        est = KernelRidge(preconditioner="landmarks", **params).fit(X, y)
    assert est.n_iter_ < 20
    assert est.convergence_[-1]["indefinite"] is True
    feats = est.model_.features
    pre = LandmarkPreconditioner(feats, 2, alpha, rkhs=True)
    first = 256 * np.finfo(np.float64).eps * float(np.trace(landmark_moment(feats, 2)))
    assert pre.floor > 100 * first
    dense = KernelRidge(alpha=alpha, solver="exact", compute_dtype="float64").fit(X, y)
    exact = dense.predict(Xt)
    np.testing.assert_allclose(KernelRidge(preconditioner="block", **params).fit(X, y).predict(Xt), exact,
                               rtol=0, atol=1e-6 * np.ptp(y))
    np.testing.assert_allclose(est.predict(Xt), exact, rtol=0, atol=5e-3 * np.ptp(y))
    assert abs(est.score(X, y) - dense.score(X, y)) < 1e-4
