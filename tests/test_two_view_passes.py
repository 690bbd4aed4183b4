"""Kernel CCA by full-data passes: the pass's products, the solve against dense references, the guarantees.

(Checkpoints, schedulers and a killed worker for every pass solver: tests/test_pass_solvers.py.)"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import halves_stores, mnist_halves

from dsgd_dask import KernelCCA
from dsgd_dask.engine.passes import cross_covariances, cross_request, reduce_pass
from dsgd_dask.engine.ridge import JointNystroemBlocks, LandmarkPreconditioner
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.rules.solutions import ridge_cca
from dsgd_dask.streams.inputs import DataView


def _curve(n: int, seed: int = 0):
    """A noisy circle and a function of its angle: correlated only through a nonlinear map."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(-2, 2, size=n)
    X = np.c_[np.cos(t), np.sin(t)] + 0.05 * rng.normal(size=(n, 2))
    Y = np.c_[t ** 2, rng.normal(size=n)]
    return X, Y


def _pass_features(f):
    """The features of the passes on the landmarks of ``f``: each Nyström block whitened on its own.

    The steps (``solver="dsgd"``) whiten Nyström blocks together; the passes' products and
    preconditioner take blocks whitened each on its own, on the same landmarks and centre.
    """
    if isinstance(f, JointNystroemBlocks):
        return NystroemFeatures(f.kernel, f.landmarks, f.block_size, f.seed, f.dtype, center=f.center)
    return f


@pytest.fixture(scope="module")
def halves():
    return mnist_halves(1200)


@pytest.mark.parametrize("kind", ["nystroem", "fourier"])
@pytest.mark.parametrize("lazy", [False, True])
def test_cross_request_gives_the_dense_covariance_products(kind, lazy):
    X, Y = _curve(700)
    est = KernelCCA(2, n_features=256, block_size=64, max_iter=4, features=kind, solver="dsgd",
                    compute_dtype="float64", random_state=0).fit(X, Y)
    fx, fy = (_pass_features(f) for f in est._features)
    J = 4
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(256, 3)), rng.normal(size=(256, 3))
    shifts = (fx.raw_transform(X[:50], 0, J).mean(axis=0), fy.raw_transform(Y[:50], 0, J).mean(axis=0))
    S = np.hstack([X, Y])
    data = da.from_array(S, chunks=(200, 4)) if lazy else S
    totals = reduce_pass(DataView(data), cross_request((fx, fy), J, A, B, shifts, (slice(0, 2), slice(2, 4))))
    sums = cross_covariances(totals, (fx, fy), shifts)
    Zx, Zy = fx.transform(X, 0, J), fy.transform(Y, 0, J)
    Zxc, Zyc = Zx - Zx.mean(axis=0), Zy - Zy.mean(axis=0)
    n = len(X)
    for got, want in ((sums.xx, Zxc.T @ Zxc @ A / n), (sums.xy, Zxc.T @ Zyc @ B / n),
                      (sums.yy, Zyc.T @ Zyc @ B / n), (sums.yx, Zyc.T @ Zxc @ A / n),
                      (sums.mean_x, Zx.mean(axis=0)), (sums.mean_y, Zy.mean(axis=0))):
        # float64 features; the Nyström whitening amplifies round-off by its largest entry
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-8 * np.abs(want).max())
    assert sums.n == n


def test_landmark_gram_is_the_rkhs_gram_of_the_features():
    X, Y = _curve(700)
    est = KernelCCA(2, n_features=256, block_size=64, max_iter=4, solver="dsgd", compute_dtype="float64",
                    random_state=0).fit(X, Y)
    f = _pass_features(est._features[0])
    pre = LandmarkPreconditioner(f, 4, 1e-3, rkhs=True, ridge=1e-9)
    W = np.zeros((256, 256))
    for j in range(4):
        W[j * 64:(j + 1) * 64, j * 64:(j + 1) * 64] = f.normalization[j]
    want = W.T @ f.landmark_kernel(0, 256, 4) @ W
    # the whitenings of near-singular K_LL blocks amplify round-off: the dense product is itself
    # only symmetric to |want - want^T|; the tiles below the diagonal are those above, transposed
    asymmetry = np.abs(want - want.T).max()
    got = pre.gram.dense()
    upper = np.kron(np.triu(np.ones((4, 4), dtype=bool)), np.ones((64, 64), dtype=bool))
    np.testing.assert_allclose(got[upper], want[upper], rtol=0, atol=1e-6 * np.abs(want).max())
    np.testing.assert_allclose(got, (want + want.T) / 2, rtol=0, atol=max(1e-6 * np.abs(want).max(), asymmetry))


def _dense_solution(est, X, Y):
    """The passes' problem solved densely: the features of all rows, their covariances, the penalties."""
    J = est._params["n_blocks"]
    m = est._params["block_size"]
    Z, P = [], []
    for v, (f, rows) in enumerate(zip(est._features, (X, Y), strict=True)):
        z = f.transform(rows, 0, J).astype(np.float64)
        Z.append(z - z.mean(axis=0))
        W = np.zeros((J * m, J * m))
        for j in range(J):
            W[j * m:(j + 1) * m, j * m:(j + 1) * m] = f.normalization[j]
        pre = LandmarkPreconditioner(f, J, est.reg, rkhs=True, ridge=est._ridges[v])
        P.append(est.reg * W.T @ f.landmark_kernel(0, J * m, J) @ W + est._ridges[v] * W.T @ W
                 + pre.floor * np.eye(J * m))
    n = len(X)
    return ridge_cca(Z[0].T @ Z[0] / n + P[0], Z[1].T @ Z[1] / n + P[1], Z[0].T @ Z[1] / n, 0.0,
                     est.n_components)


def test_passes_converge_to_the_dense_solve_of_the_same_problem(halves):
    """Several blocks of landmarks, fewer than the rows: the passes solve the problem without forming it."""
    A, B = halves
    est = KernelCCA(5, n_features=512, block_size=128, reg=1e-4, tol=1e-6, random_state=0).fit(A, B)
    rho, Wa, Wb = _dense_solution(est, A, B)
    # measured 2e-7; the pass products are float32 sums accumulated in float64
    assert np.abs(est.correlations_ - rho).max() < 1e-4
    U, V = est.transform(A, B)
    Za = est._features[0].transform(A, 0, 4).astype(np.float64)
    Zb = est._features[1].transform(B, 0, 4).astype(np.float64)
    assert principal_angle_sin2(U, (Za - Za.mean(axis=0)) @ Wa) < 1e-4
    assert principal_angle_sin2(V, (Zb - Zb.mean(axis=0)) @ Wb) < 1e-4
    assert est.solver_ == "lobpcg"
    assert est.n_iter_ < 30
    # one record per pass: the passes so far, the rows read so far, the change of the correlations
    records = est.convergence_
    assert [r["iteration"] for r in records] == list(range(1, est.n_iter_ + 1))
    assert [r["rows"] for r in records] == [1200 * i for i in range(1, est.n_iter_ + 1)]
    assert list(records[0])[:4] == ["iteration", "rows", "seconds", "measure"]
    assert records[0]["measure"] == np.inf
    assert records[-1]["measure"] <= 1e-6 < records[-2]["measure"]
    np.testing.assert_array_equal(records[-1]["correlations"], est.correlations_)
    assert not hasattr(est, "n_passes_")


def test_passes_match_the_exact_kernel_cca_with_every_row_a_landmark():
    X, Y = _curve(1024)
    est = KernelCCA(3, n_features=1024, block_size=256, reg=1e-3, random_state=0).fit(X, Y)
    exact = KernelCCA(3, solver="exact", reg=1e-3, random_state=0).fit(X, Y)
    assert exact.bandwidth_ == est.bandwidth_  # the same seeded sample
    # the same problem but for the precision ridge (1e-10 here) and the float32 features
    assert np.abs(est.correlations_ - exact.correlations_).max() < 1e-3
    U, V = est.transform(X, Y)
    Ue, Ve = exact.transform(X, Y)
    assert principal_angle_sin2(U, Ue) < 1e-3
    assert principal_angle_sin2(V, Ve) < 1e-3


@pytest.fixture(scope="module")
def stores(tmp_path_factory, halves):
    return halves_stores(tmp_path_factory.mktemp("halves"), halves, (200, 300))


PASSES = dict(n_features=512, block_size=128, reg=1e-4, max_iter=6, random_state=3)


@pytest.fixture(scope="module")
def reference(stores):
    with dask.config.set(scheduler="sync"):
        return KernelCCA(3, **PASSES).fit(*stores)


def _same(a, b):
    for ma, mb in zip(a.models_, b.models_, strict=True):
        np.testing.assert_array_equal(ma.coef, mb.coef)
        np.testing.assert_array_equal(ma.offset, mb.offset)
    np.testing.assert_array_equal(a.correlations_, b.correlations_)


def test_passes_same_model_with_threads(stores, reference):
    with dask.config.set(scheduler="threads"):
        _same(KernelCCA(3, **PASSES).fit(*stores), reference)


# the same model on a 2-worker LocalCluster (and a worker killed during a pass):
# tests/test_pass_solvers.py, on the module's one cluster


def test_passes_resume_from_a_checkpoint(stores, reference, tmp_path):
    ckpt = str(tmp_path / "ckpt.zarr")

    class Stop(Exception):
        pass

    seen = []

    def stop_at(n_passes, models):
        assert len(models) == 2
        seen.append(n_passes)
        if n_passes == 3 and seen.count(3) == 1:
            raise Stop

    with dask.config.set(scheduler="sync"):
        with pytest.raises(Stop):
            KernelCCA(3, **PASSES, checkpoint=ckpt).fit(*stores, callback=stop_at)
        resumed = KernelCCA(3, **PASSES, checkpoint=ckpt).fit(*stores, callback=stop_at)
    assert seen[:4] == [1, 2, 3, 4]  # the resumed fit starts after the third pass
    _same(resumed, reference)


def test_passes_transform_is_lazy(stores, reference):
    a = da.from_zarr(stores[0])

    def raising(*args, **kwargs):
        raise AssertionError("something was computed")

    with dask.config.set(scheduler=raising):
        U = reference.transform(a)
    assert isinstance(U, da.Array)
    assert U.shape == (a.shape[0], 3)


def test_passes_bad_parameters_fail_before_work():
    X, Y = _curve(300)
    with pytest.raises(ValueError, match=r"KernelCCA\(solver='lobpcg'\) takes features in \['nystroem'\]"):
        KernelCCA(2, solver="lobpcg", features="fourier").fit(X, Y)
    with pytest.raises(ValueError, match=r"'solver' parameter of KernelCCA must be a str among .*Got 'passes'"):
        KernelCCA(2, solver="passes").fit(X, Y)
    with pytest.raises(ValueError, match="partial_fit takes doubly stochastic steps"):
        KernelCCA(2, solver="lobpcg").partial_fit(X, Y)
    with pytest.raises(ValueError, match="tol"):
        KernelCCA(2, tol=-1.0).fit(X, Y)
    with pytest.raises(ValueError, match="max_iter"):
        KernelCCA(2, max_iter=0).fit(X, Y)
