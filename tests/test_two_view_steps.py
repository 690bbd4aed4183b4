"""Kernel SVD, CCA and SIR by doubly stochastic steps: exact references, the engine's guarantees, bad input."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import halves_stores, mnist_halves, worker_cluster

from dsgd_dask import KernelCCA, KernelSIR, KernelSVD, load
from dsgd_dask.datasets import load_sarcos
from dsgd_dask.metrics import principal_angle_sin2


@pytest.fixture(scope="module")
def halves():
    """Left and right 392-pixel halves of 600 real MNIST training digits (the papers' two views)."""
    return mnist_halves(600)


@pytest.fixture(scope="module")
def sarcos():
    """600 rows of the robot-arm data: 21 standardised joint readings and the first torque."""
    X, y = load_sarcos(sample=True)
    X, y = X[:600], y[:600]
    return (X - X.mean(axis=0)) / X.std(axis=0), y


def _raising_scheduler(*args, **kwargs):
    raise AssertionError("something was computed")


# -- against the exact references (default step settings) ---------------------------------------
# The thresholds of the steps against the dense references are set from the measured errors
# (earlier bounds: correlations within 0.02, subspaces sin^2 < 0.05). With
# n = 600 rows and n_features=600 one Nyström block holds every row, so the features span the
# exact solution and what remains is the solver's own error (for the steps: the optimiser's
# error and the final rotation on the sample).


@pytest.fixture(scope="module")
def exact_kcca(halves):
    return KernelCCA(5, solver="exact", reg=1e-3, random_state=0).fit(*halves)


# One objective: KernelCCA(reg=1e-3) under every solver has the exact kernel CCA as its
# destination. Relative error of the top-5 correlations and sin^2 of the ordered variates'
# subspaces (the first i components, i = 1..5), measured / bound:
# * "rca": the same problem in other coordinates: 2e-15 / 1e-15; 1e-10 for round-off and the
#   rank cutoffs of the whitenings (eigenvalues below n eps max);
# * "lobpcg": float32 kernel sections and the precision ridge (1e-10 against reg): 1.4e-5 /
#   1.3e-9; 1e-4 / 1e-6;
# * "dsgd": the noise of the default 500 steps, 1.5e-4 to 2.1e-4 / 1.4e-3 to 3.3e-3 over seeds
#   0-3; 1e-3 / 0.01 (the noise KernelCCA's Notes state).
@pytest.mark.parametrize(("solver", "rho_rtol", "max_sin2"), [
    ("rca", 1e-10, 1e-10),
    ("lobpcg", 1e-4, 1e-6),
    ("dsgd", 1e-3, 0.01),
])
def test_every_kcca_solver_reaches_the_exact_kernel_cca(halves, exact_kcca, solver, rho_rtol, max_sin2):
    A, B = halves
    est = KernelCCA(5, solver=solver, reg=1e-3, n_features=600, random_state=0).fit(A, B)
    assert (est.solver_, est.n_features_) == (solver, 600)
    assert est.bandwidth_ == exact_kcca.bandwidth_  # the same seeded sample
    np.testing.assert_allclose(est.correlations_, exact_kcca.correlations_, rtol=rho_rtol)
    (U, V), (Ue, Ve) = est.transform(A, B), exact_kcca.transform(A, B)
    for i in range(1, 6):  # ordered components, not just the subspace
        assert principal_angle_sin2(U[:, :i], Ue[:, :i]) < max_sin2
        assert principal_angle_sin2(V[:, :i], Ve[:, :i]) < max_sin2
    # the variates of each pair correlate as the regularised problem says (bounded by 1)
    assert 0 < est.score(A, B) <= 5


def test_kcca_steps_on_two_nystroem_blocks_reach_the_exact_kernel_cca(halves, exact_kcca):
    # Two blocks of 300 landmarks, whitened together and split: the blocks' average kernel is
    # the Nyström kernel of all 600 rows, the exact kernel here. Measured after 1000 steps
    # (seed 0): correlations 1.1e-3 to 2.4e-3 below the exact ones, sin^2 <= 2.2e-3 for the
    # first three ordered variates (the 4th and 5th, 0.05 and 0.10, are the steps' noise on
    # close correlations). Blocks whitened each on its own solve a more regularised problem:
    # 1.1 % to 1.3 % below the exact correlations over seeds 0-3, outside this bound.
    A, B = halves
    est = KernelCCA(5, solver="dsgd", reg=1e-3, n_features=600, block_size=300, max_iter=1000,
                    random_state=0).fit(A, B)
    assert est._params["whitening"] == "joint"
    assert est.n_features_ == 600
    np.testing.assert_allclose(est.correlations_, exact_kcca.correlations_, rtol=5e-3)
    (U, V), (Ue, Ve) = est.transform(A, B), exact_kcca.transform(A, B)
    for i in range(1, 4):
        assert principal_angle_sin2(U[:, :i], Ue[:, :i]) < 0.01
        assert principal_angle_sin2(V[:, :i], Ve[:, :i]) < 0.01


@pytest.mark.parametrize("features", ["fourier", "fourier_pairs"])
def test_kcca_steps_on_fourier_blocks_reach_rca_on_the_same_blocks(halves, features):
    # The dense reference of Fourier features: "rca" solves the steps' problem on the same
    # seeded blocks (their kernel z z^T / J). One block of 256: measured 1.7e-4 relative on the
    # correlations, sin^2 <= 1.8e-3 for the ordered subspaces ([cos, sin] pairs: 2.3e-4 and
    # 1.5e-3); bounds as for the Nyström steps.
    A, B = halves
    params = dict(features=features, n_features=256, reg=1e-3, random_state=0)
    est = KernelCCA(5, solver="dsgd", **params).fit(A, B)
    rca = KernelCCA(5, solver="rca", **params).fit(A, B)
    for f, g in zip(est._features, rca._features, strict=True):
        assert type(f).__name__ == ("FourierPairs" if features == "fourier_pairs" else "RandomFeatures")
        assert f.to_dict() == g.to_dict()
    np.testing.assert_allclose(est.correlations_, rca.correlations_, rtol=1e-3)
    U, Ur = est.transform(A), rca.transform(A)
    for i in range(1, 6):
        assert principal_angle_sin2(U[:, :i], Ur[:, :i]) < 0.01


def test_ksvd_steps_on_fourier_blocks_reach_the_dense_svd_of_the_blocks(halves):
    # The SVD of the cross-covariance of the same features, scaled to their average kernel
    # (z / sqrt(J)): measured 1.4e-4 relative on the singular values, sin^2 1e-4.
    from dsgd_dask.rules.solutions import cross_svd

    A, B = halves
    est = KernelSVD(4, features="fourier", n_features=256, random_state=0).fit(A, B)
    J = est.n_features_ // est._features[0].block_size
    zx, zy = (f.transform(V, 0, J).astype(np.float64) / np.sqrt(J) for f, V in zip(est._features, (A, B), strict=True))
    zx, zy = zx - zx.mean(axis=0), zy - zy.mean(axis=0)
    s, P, Q = cross_svd(zx.T @ zy / len(A), 4)
    np.testing.assert_allclose(est.singular_values_, s, rtol=1e-3)
    U, V = est.transform(A, B)
    assert principal_angle_sin2(U, zx @ P) < 1e-3
    assert principal_angle_sin2(V, zy @ Q) < 1e-3


def test_ksvd_matches_exact_kernel_svd(halves):
    A, B = halves
    k = 4
    est = KernelSVD(k, random_state=0).fit(A, B)
    assert est.solver_ == "dsgd"
    exact = KernelSVD(k, solver="exact", bandwidth_x=est.bandwidth_[0], bandwidth_y=est.bandwidth_[1]).fit(A, B)
    np.testing.assert_allclose(est.singular_values_, exact.singular_values_, rtol=0.02)
    U, V = est.transform(A, B)
    Ue, Ve = exact.transform(A, B)
    assert principal_angle_sin2(U, Ue) < 0.05
    assert principal_angle_sin2(V, Ve) < 0.05


def test_ksir_matches_exact_kernel_sir(sarcos):
    X, y = sarcos
    k = 4
    est = KernelSIR(k, random_state=0).fit(X, y[:, 0])
    exact = KernelSIR(k, solver="exact", bandwidth=est.bandwidth_, reg=est.reg, n_slices=est.n_slices).fit(X, y[:, 0])
    assert est.slicer_.kind == exact.slicer_.kind == "quantiles"
    np.testing.assert_allclose(est.eigenvalues_, exact.eigenvalues_, atol=0.02)
    assert principal_angle_sin2(est.transform(X), exact.transform(X)) < 0.05


def test_ksir_on_a_multi_output_response(sarcos):
    X, y = sarcos
    est = KernelSIR(3, n_slices=8, solver="dsgd", n_features=512, max_iter=200, random_state=0).fit(X, y[:, :3])
    assert est.slicer_.kind == "kmeans"
    exact = KernelSIR(3, solver="exact", bandwidth=est.bandwidth_, reg=est.reg, n_slices=8, random_state=0)
    exact.fit(X, y[:, :3])
    # 512 landmarks of 600 rows: the representation adds its own error, still small
    assert principal_angle_sin2(est.transform(X), exact.transform(X)) < 0.1


# -- the engine: data-parallel sums, schedulers, cluster, checkpoints --------------------------

SMALL = dict(n_features=256, block_size=64, batch_size=64, max_iter=40, random_state=3)


@pytest.mark.parametrize("make", [
    lambda: KernelCCA(3, **SMALL, features="fourier"),
    lambda: KernelSVD(3, **SMALL, features="fourier"),
    lambda: KernelSIR(3, **SMALL, features="fourier", solver="dsgd"),
])
def test_partial_sums_equal_the_step_on_the_union(halves, sarcos, make):
    """Each rule's sums over parts of a batch reduce to the step on the whole batch (to round-off)."""
    from dsgd_dask.engine.parallel import apply_sums, part_sums
    from dsgd_dask.engine.steps import StepConfig, rule_step
    from dsgd_dask.streams.inputs import paired_views, stacked_view

    est = make()
    X, Y = (sarcos[0], sarcos[1][:, 0]) if isinstance(est, KernelSIR) else halves
    est.fit(X, Y)
    slab = stacked_view(*paired_views(X, Y, allow_1d_y=True)).data[:96]
    features, coef, rule = est._feature_sets(), est.state_.coef, est._rule
    blocks = coef[0].shape[0] // 64
    for n_blocks in (blocks + 1, blocks):  # a growing step and a revisiting step
        cfg = StepConfig(n_blocks=n_blocks, batch_size=96, eta_decay=0.01)
        whole = rule_step(coef, slab, 40, est.state_.eta_scale, features, rule, cfg)
        target = blocks if n_blocks > blocks else 40 % blocks
        parts = [part_sums(coef, slab, rows, target, features, rule) for rows in np.array_split(np.arange(96), 3)]
        split = apply_sums(coef, parts[0] + parts[1] + parts[2], 40, est.state_.eta_scale, features, rule, cfg)
        # The parts evaluate the union's float32 features in products of 32 rows, not 96, which
        # a BLAS kernel may round differently (OpenBLAS's Haswell sgemm does, by shape and by a
        # row's place in the tile; SkylakeX's agrees here to 1e-15): each feature and function
        # value may move by a few eps32 relative. The step is a mean over the 96 rows of terms
        # whose mean is the step: their independent rounding errors add up to at most
        # ~ eps32 * sqrt(96) * |step| even where the terms cancel in the mean (measured with
        # Haswell's kernel: 0.08-0.4 of this bound). rtol still holds the float64 reduction.
        eps32 = np.finfo(np.float32).eps
        for a, b, c in zip(split, whole, coef, strict=True):
            step = np.abs(b - np.pad(c, ((0, b.shape[0] - c.shape[0]), (0, 0)))).max()
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=eps32 * np.sqrt(96) * step)


@pytest.fixture(scope="module")
def stores(tmp_path_factory, halves):
    return halves_stores(tmp_path_factory.mktemp("halves"), halves, (100, 160))


# the step engine's guarantees (the passes solver has its own, in test_two_view_passes.py)
CLUSTER = dict(n_features=256, block_size=128, batch_size=64, max_iter=60, random_state=5, solver="dsgd")


@pytest.fixture(scope="module")
def kcca_reference(stores):
    with dask.config.set(scheduler="sync"):
        return KernelCCA(3, **CLUSTER).fit(*stores)


def test_kcca_same_model_with_threads_and_numpy(stores, kcca_reference):
    with dask.config.set(scheduler="threads"):
        threads = KernelCCA(3, **CLUSTER).fit(*stores)
    for a, b in zip(threads.models_, kcca_reference.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)
    np.testing.assert_array_equal(threads.correlations_, kcca_reference.correlations_)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_kcca_same_model_on_local_cluster(stores, kcca_reference, n_workers, local_clusters):
    from distributed import Client

    with Client(local_clusters(n_workers)):
        model = KernelCCA(3, **CLUSTER).fit(*stores)
    for a, b in zip(model.models_, kcca_reference.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)
        np.testing.assert_array_equal(a.offset, b.offset)
    np.testing.assert_array_equal(model.correlations_, kcca_reference.correlations_)


def test_state_reaches_the_client_only_when_needed(stores, tmp_path, monkeypatch, local_clusters):
    """On a cluster the client fetches the state at checkpoints and at the end, not per chunk task."""
    from distributed import Client
    from distributed.client import Future

    from dsgd_dask.engine.steps import StepState

    fetched = []
    result = Future.result

    def counting(self, *args, **kwargs):
        out = result(self, *args, **kwargs)
        if isinstance(out, StepState):
            fetched.append(out.step)
        return out

    monkeypatch.setattr(Future, "result", counting)
    params = {**CLUSTER, "max_iter": 100}
    with Client(local_clusters(2)):
        plain = KernelCCA(3, **params).fit(*stores)
        n_tasks = len(fetched)
        fetched.clear()
        ckpt = KernelCCA(3, **params, checkpoint=str(tmp_path / "ckpt.zarr"), checkpoint_every=50).fit(*stores)
    assert n_tasks == 1  # the end only: 100 steps in 50 chunk tasks of two steps ran on the workers
    assert fetched[-1] == 100
    assert 2 <= len(fetched) <= 4  # checkpoints after >= 50 steps each, and the end
    for a, b in zip(plain.models_, ckpt.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)


def test_killed_worker_leaves_the_kcca_fit_unchanged(stores, kcca_reference):
    """No callback, no checkpoint: the chain of tasks is re-run from the start after a worker dies."""
    import os
    import signal
    import threading
    import time

    from distributed import Client

    with worker_cluster(2) as cluster, Client(cluster) as client:
        victim = sorted(client.run(os.getpid).values())[0]
        done, killed, lock = threading.Event(), threading.Event(), threading.Lock()

        def kill_when_running():
            # kill a worker once the first chunk tasks of steps are on the cluster, never after the fit
            while not done.is_set():
                keys = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))
                if any(str(k).startswith("dsgd-step-") for k in keys):
                    with lock:
                        if not done.is_set():
                            os.kill(victim, signal.SIGKILL)
                            killed.set()
                    return
                time.sleep(0.01)

        watcher = threading.Thread(target=kill_when_running, daemon=True)
        watcher.start()
        model = KernelCCA(3, **CLUSTER).fit(*stores)
        with lock:
            done.set()
        watcher.join(timeout=10)
        assert killed.is_set()  # the worker died during the fit
    for a, b in zip(model.models_, kcca_reference.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)


def test_kcca_resumes_from_a_checkpoint(stores, kcca_reference, tmp_path):
    ckpt = str(tmp_path / "ckpt.zarr")

    class Stop(Exception):
        pass

    def stop_at(step, models):
        assert len(models) == 2
        if step >= 30:
            raise Stop

    with dask.config.set(scheduler="sync"):
        with pytest.raises(Stop):
            KernelCCA(3, **CLUSTER, checkpoint=ckpt, checkpoint_every=10).fit(*stores, callback=stop_at)
        resumed = KernelCCA(3, **CLUSTER, checkpoint=ckpt, checkpoint_every=10).fit(*stores)
    for a, b in zip(resumed.models_, kcca_reference.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)


def test_saved_models_load_and_transform_identically(halves, sarcos, tmp_path):
    A, B = halves
    X, y = sarcos
    cca = KernelCCA(2, **SMALL).fit(A, B)
    svd = KernelSVD(2, **SMALL, features="fourier").fit(A, B)
    sir = KernelSIR(2, **SMALL, solver="dsgd").fit(X, y[:, :2])
    for i, est in enumerate((cca, svd)):
        back = load(est.save(tmp_path / f"m{i}.zarr"))
        assert type(back) is type(est)
        for a, b in zip(back.transform(A, B), est.transform(A, B), strict=True):
            np.testing.assert_array_equal(a, b)
    back = load(sir.save(tmp_path / "sir.zarr"))
    np.testing.assert_array_equal(back.transform(X), sir.transform(X))
    np.testing.assert_array_equal(back.slicer_.assign(y[:, :2]), sir.slicer_.assign(y[:, :2]))
    np.testing.assert_array_equal(back.eigenvalues_, sir.eigenvalues_)
    np.testing.assert_array_equal(load(tmp_path / "m0.zarr").correlations_, cca.correlations_)
    # a loaded model continues a stream
    back.partial_fit(X, y[:, :2])


def test_two_views_use_different_feature_seeds(halves):
    A, _ = halves
    est = KernelSVD(2, **SMALL, features="fourier").fit(A, A)
    fx, fy = est._feature_sets()
    assert fx.seed != fy.seed
    assert not np.allclose(fx.transform(A[:5], 0, 1), fy.transform(A[:5], 0, 1))


# -- lazy results, labels ---------------------------------------------------------------------


def test_transform_is_lazy_and_labelled(stores, kcca_reference):
    a, b = da.from_zarr(stores[0]), da.from_zarr(stores[1])
    with dask.config.set(scheduler=_raising_scheduler):
        U, V = kcca_reference.transform(a, b)
        assert isinstance(U, da.Array)
        assert U.chunks[0] == a.chunks[0]
        assert V.chunks[0] == b.chunks[0]
        xa = xr.DataArray(a, dims=("digit", "pixel"), coords={"digit": np.arange(600)})
        XU = kcca_reference.transform(xa)
        assert XU.dims == ("digit", "component")
        assert isinstance(XU.data, da.Array)
    np.testing.assert_array_equal(XU.values, U.compute())
    # rows evaluated at fixed places whatever the chunks: the numpy transform's bits on any BLAS kernel
    np.testing.assert_array_equal(U.compute(), kcca_reference.transform(np.asarray(a)))


def test_fit_on_xarray_views_sharing_the_sample_dim(halves):
    A, B = halves
    xa = xr.DataArray(da.from_array(A, chunks=(200, -1)), dims=("digit", "left"))
    xb = xr.DataArray(B, dims=("digit", "right"))
    est = KernelCCA(2, **SMALL).fit(xa, xb)
    ref = KernelCCA(2, **SMALL).fit(da.from_array(A, chunks=(200, -1)), B)
    np.testing.assert_array_equal(est.models_[0].coef, ref.models_[0].coef)
    with pytest.raises(ValueError, match="different sample dimensions"):
        KernelCCA(2, **SMALL).fit(xa, xr.DataArray(B, dims=("other", "right")))


# -- bad input: clear errors before any work --------------------------------------------------


def test_bad_two_view_input_fails_before_work(halves, sarcos, tmp_path):
    A, B = halves
    X, y = sarcos
    lazy_a = da.from_array(A, chunks=(100, -1))
    with dask.config.set(scheduler=_raising_scheduler):
        with pytest.raises(ValueError, match="X has 600 rows, Y has 599"):
            KernelCCA(2).fit(lazy_a, da.from_array(B[:-1], chunks=(100, -1)))
        with pytest.raises(ValueError, match="2-D"):
            KernelCCA(2).fit(lazy_a[:, 0], B)
    with pytest.raises(ValueError, match="X has 600 rows, y has 500"):
        KernelSIR(2).fit(X, y[:500, 0])
    bad = y[:, 0].copy()
    bad[17] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity in y"):
        KernelSIR(2).fit(X, bad)
    B_bad = B.copy()
    B_bad[3, 3] = np.inf
    with pytest.raises(ValueError, match="NaN or infinity in Y"):
        KernelCCA(2).fit(A, B_bad)
    with pytest.raises(ValueError, match="n_slices=10 must be <= n_samples=5"):
        KernelSIR(2, n_slices=10).fit(X[:5], y[:5, 0])
    assert KernelSIR(2).fit(X[:5], y[:5, 0]).slicer_.n_slices == 5  # "auto": at most one slice per row
    with pytest.raises(ValueError, match="n_components=5 must be <= n_slices - 1 = 4"):
        KernelSIR(5, n_slices=5).fit(X, y[:, 0])
    with pytest.raises(ValueError, match="y gives only 3 slices"):
        KernelSIR(3, n_slices=6).fit(X, np.arange(600) % 3)
    with pytest.raises(TypeError, match="numeric"):
        KernelSIR(2).fit(X, np.array(["a", "b"] * 300))
    with pytest.raises(ValueError, match=r"'reg' parameter of KernelCCA must be a float in the range \(0\.0, inf\)"):
        KernelCCA(2, reg=0).fit(A, B)
    with pytest.raises(ValueError, match="n_components=300 must be <= block_size"):
        KernelCCA(300, n_features=256, block_size=256).fit(A, B)
    fitted = KernelCCA(2, **SMALL).fit(A, B)
    with pytest.raises(ValueError, match="Y has 10 features, but KernelCCA is expecting 392"):
        fitted.transform(A, B[:, :10])
    with pytest.raises(ValueError, match="X has 10 features"):
        fitted.transform(A[:, :10])


def test_budgets_are_met_exactly_or_refused(halves):
    A, B = halves
    # an integer budget is the model's: block_size="auto" splits it into the fewest equal blocks
    # of 512 to 1024 Nyström landmarks or 128 to 256 Fourier features (before, 256 Nyström
    # features on 600 rows fitted one block of all 600)
    for solver, features, budget, blocks in (("dsgd", "nystroem", 256, 1), ("lobpcg", "nystroem", 500, 1),
                                             ("rca", "fourier", 1000, 4), ("rca", "nystroem", 384, 1),
                                             ("dsgd", "fourier", 640, 4)):
        est = KernelCCA(2, solver=solver, features=features, n_features=budget, max_iter=blocks, random_state=0)
        est.fit(A, B)
        assert est.n_features_ == budget
        assert est.models_[0].coef.shape[0] == est.models_[1].coef.shape[0] == budget
        if solver != "rca" or features == "fourier":
            assert est._features[0].block_size * blocks == budget
    # "exact": every training row a landmark, whatever the budget
    assert KernelSVD(2, solver="exact", n_features=4096, random_state=0).fit(A[:100], B[:100]).n_features_ == 100
    with pytest.raises(ValueError, match="n_features=601 asks for more Nyström landmarks than the n_samples=600 "
                                         "rows: use n_features <= 600"):
        KernelCCA(2, n_features=601).fit(A, B)
    with pytest.raises(ValueError, match="n_features=300 is not a multiple of block_size=128: use n_features=256 "
                                         "or 384"):
        KernelSVD(2, n_features=300, block_size=128).fit(A, B)
    with pytest.raises(ValueError, match=r"n_features=1027 does not split into equal blocks of 128 to 256 "
                                         r"features \(block_size='auto'\): use n_features=1026 or 1029"):
        KernelCCA(2, features="fourier", n_features=1027).fit(A, B)
    with pytest.raises(ValueError, match="max_iter=3 steps grow only 3 of the 4 blocks of n_features=640: use "
                                         "max_iter >= 4"):
        KernelCCA(2, solver="dsgd", features="fourier", n_features=640, max_iter=3).fit(A, B)
    with pytest.raises(ValueError, match="n_components=300 must be <= n_features=256"):
        KernelCCA(300, solver="rca", features="fourier", n_features=256).fit(A, B)


def test_partial_fit_takes_steps_and_says_so(halves):
    A, B = halves
    with pytest.raises(ValueError, match="partial_fit takes doubly stochastic steps over the rows given; "
                                         "solver='rca'"):
        KernelCCA(2, solver="rca").partial_fit(A, B)
    rca = KernelCCA(2, solver="rca", n_features=128, random_state=0).fit(A, B)
    with pytest.raises(ValueError, match="fitted by solver='rca'; partial_fit continues fits of doubly stochastic"):
        rca.set_params(solver="auto").partial_fit(A, B)
    # "auto" fits by passes; steps on that model would switch algorithm silently: refused, model unchanged
    est = KernelCCA(2, n_features=128, block_size=64, max_iter=2, random_state=0).fit(A, B)
    assert (est.solver_, est.n_iter_, len(est.convergence_)) == ("lobpcg", 2, 2)
    before = [m.coef.copy() for m in est.models_]
    with pytest.raises(ValueError, match="fitted by solver='lobpcg'; partial_fit continues fits of doubly stochastic"):
        est.partial_fit(A[:256], B[:256])
    assert est.solver_ == "lobpcg"
    assert all(np.array_equal(m.coef, b) for m, b in zip(est.models_, before, strict=True))
    # a stream from scratch: one record per chunk task of steps, steps counted by n_iter_
    svd = KernelSVD(2, **SMALL).partial_fit(A[:256], B[:256]).partial_fit(A[256:512], B[256:512])
    assert (svd.solver_, svd.n_iter_) == ("dsgd", 8)
    records = svd.convergence_
    assert all(list(r) == ["iteration", "rows", "seconds", "measure"] for r in records)
    assert records[-1]["iteration"] == 8
    assert records[-1]["rows"] == 8 * 64
    assert all(np.isnan(r["measure"]) for r in records)
    assert not hasattr(svd, "n_passes_")
