"""The pass driver and its one reduction kernel.

The kernel (``reduce_pass``) against dense numpy sums and, bit for bit, against the four
kernels it replaces (``full_pass``, ``cross_pass``, ``ridge_pass``, the rca moments); two toy
solvers (block subspace iteration, conjugate gradients) run through the driver: against
dense solutions, interrupted and resumed from a checkpoint, on the synchronous, threaded and
``distributed`` schedulers, and with a worker killed during a pass.
"""

from __future__ import annotations

import os
import signal
import sys

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from _old_kernels import cross_pass, feature_moments, full_pass, ridge_pass  # the old kernels, frozen
from conftest import worker_cluster
from distributed import Client, get_task_stream

from dsgd_dask.baselines._moments import FourierMap, NystroemMap
from dsgd_dask.engine import passes
from dsgd_dask.engine.checkpoint import Checkpointer, PassCheckpoint
from dsgd_dask.engine.driver import Update, run_passes
from dsgd_dask.engine.passes import (
    PassRequest,
    PassView,
    covariance_request,
    covariance_times,
    cross_covariances,
    cross_request,
    feature_covariance,
    gram_request,
    moment_request,
    reduce_pass,
    ridge_moments,
)
from dsgd_dask.engine.ridge import CGState
from dsgd_dask.engine.steps import StepState
from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.features.kernels import KernelSpec, kernel_matrix
from dsgd_dask.features.nystroem import NystroemFeatures, inverse_sqrt
from dsgd_dask.features.whitening import JointWhitening
from dsgd_dask.rules.subspace import orthonormal, ritz_step, subspace_sin2
from dsgd_dask.streams.inputs import DataView

# the features of the killed-worker test are defined here: the workers get them by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPEC = KernelSpec("gaussian", 2.0)
D, C = 4, 2  # input columns, target columns


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    y = np.c_[np.sin(X[:, 0]) + X[:, 1] ** 2 / 4, np.cos(X[:, 2])] + 0.1 * rng.normal(size=(n, C))
    return np.hstack([X, y])


def _view(S, chunk=None):
    return DataView(S if chunk is None else da.from_array(S, chunks=(chunk, S.shape[1])))


# -- the kernel against dense sums -------------------------------------------------------------
def test_kernel_matches_dense_sums():
    """Every sum of every kind of view, on float64 features, against the same sums in numpy.

    Tolerance: the kernel and numpy add the same float64 terms in other orders (rows in
    slices and chunks, features in pages), so each entry differs by at most
    ``gamma_k sum |terms|`` with ``gamma_k ~ k eps`` and ``k`` the terms added (rows, plus
    the features of the inner product for ``z^T z V``): the bound is computed entry by
    entry from the absolute values.
    """
    S = _data(2000)
    eps = np.finfo(np.float64).eps
    X, x_cols, y_cols = S[:, :D], slice(0, D), slice(D, D + C)
    fx = NystroemFeatures(SPEC, X[::37][:48], 16, 1, "float64", center=X.mean(0))  # 3 blocks
    fy = RandomFeatures(KernelSpec("laplacian", 1.0), D, 16, 2, "float64", center=X.mean(0))
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(48, 3)), rng.normal(size=(32, 2))
    sx, sy = rng.normal(size=48) * 0.1, rng.normal(size=32) * 0.1
    fmap = FourierMap(RandomFeatures(SPEC, D, 8, 3, "float64"), 2)
    sm = rng.normal(size=16) * 0.1
    request = PassRequest((
        PassView(fx, 3, cols=x_cols, space="raw", shift=sx, directions=A, products=True, sums=True, blocks=True,
                 targets=y_cols, gram=True),
        PassView(fy, 2, cols=x_cols, space="features", shift=sy, directions=B, products=True, sums=True),
        PassView(fmap, cols=x_cols, space="map", shift=sm, sums=True, gram=True),
    ), rows_per_slice=300, chunks=(0, 2, 3))
    totals = reduce_pass(_view(S, 250), request)
    rows = np.r_[0:250, 500:1000]
    Xr, Y = X[rows], S[rows][:, y_cols]
    zx = fx.raw_transform(Xr, 0, 3) - sx
    zy = fy.transform(Xr, 0, 2) - sy
    zm = fmap(Xr) - sm
    H = np.hstack([zx @ A, zy @ B])
    absH = np.hstack([np.abs(zx) @ np.abs(A), np.abs(zy) @ np.abs(B)])

    def check(got, want, scale, k):
        assert np.all(np.abs(got - want) <= k * eps * scale + 1e-300), np.abs(got - want).max()

    assert totals.n == len(rows)
    check(totals.directions, H.sum(0), absH.sum(0), len(rows) + 48)
    for t, z in ((totals.views[0], zx), (totals.views[1], zy)):
        check(t.products, z.T @ H, np.abs(z).T @ absH, len(rows) + 48)
        check(t.sums, z.sum(0), np.abs(z).sum(0), len(rows))
    t = totals.views[0]
    for b in range(3):
        zb = zx[:, b * 16:(b + 1) * 16]
        check(t.blocks[b], zb.T @ zb, np.abs(zb).T @ np.abs(zb), len(rows))
    check(t.targets, zx.T @ Y, np.abs(zx).T @ np.abs(Y), len(rows))
    for t, z in ((totals.views[0], zx), (totals.views[2], zm)):
        za = np.c_[z, np.ones(len(z))]
        check(t.gram, za.T @ za, np.abs(za).T @ np.abs(za), len(rows))
        np.testing.assert_array_equal(t.gram, t.gram.T)
    assert totals.views[2].products is None
    assert totals.views[1].gram is None


def test_requests_are_checked():
    f = RandomFeatures(SPEC, D, 8, 0, "float64")
    with pytest.raises(ValueError, match="space"):
        PassView(f, space="rows")
    with pytest.raises(ValueError, match="feature map"):
        PassView(FourierMap(f, 1), space="map", blocks=True)
    with pytest.raises(ValueError, match="directions"):
        PassRequest((PassView(f, products=True),))


# -- the kernel against the kernels it replaces: bit for bit, or to float32 rounding --------------
@pytest.fixture(scope="module")
def old_kernel_case():
    S = _data(9000, seed=3).astype("float32")
    X = S[:, :D]
    rng = np.random.default_rng(4)
    centre = X.mean(0)
    fourier = RandomFeatures(SPEC, D, 32, 1, "float32", center=centre)
    landmarks = X[rng.choice(len(X), 96, replace=False)]
    nystroem = NystroemFeatures(SPEC, landmarks, 32, 2, "float32", center=centre)
    sections = NystroemFeatures(SPEC, landmarks, 32, 2, "float32", center=centre, whiten=False)
    fy = NystroemFeatures(KernelSpec("gaussian", 1.0), S[rng.choice(len(S), 64, replace=False), D:], 32, 3,
                          "float32", center=S[:, D:].mean(0))
    return S, fourier, nystroem, sections, JointWhitening(sections), fy


def _float32_close(new, old, ref=None):
    """``new`` within 1e-5 of ``old``'s largest entry, or within twice ``old``'s distance from a float64 ``ref``."""
    atol = 1e-5 * np.abs(old).max()
    if ref is not None:
        atol = max(atol, 2 * np.abs(old - ref).max())
    np.testing.assert_allclose(new, old, rtol=0, atol=atol)


def _float64_twin(f):
    """The Nyström feature set ``f`` in float64 (same landmarks, centre and whitening choice); None for others."""
    if not isinstance(f, NystroemFeatures):
        return None
    return NystroemFeatures(f.kernel, f.landmarks, f.block_size, f.seed, "float64", center=f.center, whiten=f.whiten)


@pytest.mark.parametrize("chunk", [None, 4500, 500])
def test_kernel_equals_the_old_kernels(old_kernel_case, chunk):
    """The new kernel and its result helpers give the sums of full_pass, cross_pass, ridge_pass and the moments.

    Those of ridge_pass and the moments exactly. Those of full_pass and cross_pass to
    float32 rounding: the new passes take their products in slices of 1024 rows (not
    4096) and their sums from the products' column of ones, in float32 per slice (not in
    float64), so each slice's terms are rounded differently. The two may differ by 1e-5 of
    their largest entry (float32 sums of up to 4096 terms: a few 1e-7 of their scale,
    ``sqrt(4096) * 6e-8``, before the whitening's condition multiplies them), or, for
    Nyström features, by twice the old kernel's own distance from the same pass in float64
    (the joint whitening's condition makes both about 1e-2 from it): never farther from
    the float64 pass than the old kernel was. Chunks of 4500 rows take two slices each (4096
    rows, then the rest; the moments three of 2048); chunks of 500 make 18 row chunks, a
    tree of depth 3 (fan-in 4) or 5 (fan-in 2). Numpy input is one slab here (9000 rows):
    see the next test beyond it.
    """
    S, fourier, nystroem, sections, joint, fy = old_kernel_case
    X = S[:, :D]
    view, xview = _view(S, chunk), _view(np.ascontiguousarray(X), chunk)
    x_cols, y_cols = slice(0, D), slice(D, D + C)
    rng = np.random.default_rng(5)
    V = orthonormal(rng.normal(size=(96, 5)))
    subsets = [None] if chunk != 500 else [None, (0, 2, 3, 5, 7, 8, 9, 11, 12, 16, 17)]
    for f, whitening in ((fourier, None), (nystroem, None), (sections, joint)):
        shift = f.raw_transform(X[:500], 0, 3).mean(0, dtype=np.float64)
        f64 = _float64_twin(f)
        w64 = None if whitening is None else JointWhitening(f64)
        for center in (True, False):
            for chunks in subsets:
                old = full_pass(xview, f, 3, V, shift, center, whitening=whitening, chunks=chunks)
                totals = reduce_pass(xview, covariance_request(f, 3, V, shift, whitening=whitening, chunks=chunks))
                new = covariance_times(totals, f, V, shift, center, whitening=whitening)
                ref = None
                if f64 is not None:
                    ref = covariance_times(reduce_pass(xview, covariance_request(f64, 3, V, shift, whitening=w64,
                                                                                 chunks=chunks)),
                                           f64, V, shift, center, whitening=w64)
                _float32_close(new.cov_times, old.cov_times, None if ref is None else ref.cov_times)
                _float32_close(new.mean, old.mean, None if ref is None else ref.mean)
                assert new.n == old.n
        # the same pass on the stacked rows, taking the input columns: the same sums as on the input alone
        totals = reduce_pass(view, covariance_request(f, 3, V, shift, whitening=whitening, cols=x_cols))
        alone = reduce_pass(xview, covariance_request(f, 3, V, shift, whitening=whitening))
        np.testing.assert_array_equal(totals.views[0].products, alone.views[0].products)
        np.testing.assert_array_equal(totals.views[0].sums, alone.views[0].sums)
    # two views
    A, B = rng.normal(size=(64, 4)), rng.normal(size=(64, 4))
    cols = (x_cols, y_cols)
    shifts = (nystroem.raw_transform(X[:300], 0, 2).mean(0, dtype=np.float64),
              fy.raw_transform(S[:300, D:], 0, 2).mean(0, dtype=np.float64))
    old = cross_pass(view, (nystroem, fy), 2, A, B, shifts, cols)
    new = cross_covariances(reduce_pass(view, cross_request((nystroem, fy), 2, A, B, shifts, cols)), (nystroem, fy),
                            shifts)
    twins = (_float64_twin(nystroem), _float64_twin(fy))
    ref = cross_covariances(reduce_pass(view, cross_request(twins, 2, A, B, shifts, cols)), twins, shifts)
    assert new.n == old.n
    for name in ("xx", "xy", "yy", "yx", "mean_x", "mean_y"):
        _float32_close(getattr(new, name), getattr(old, name), getattr(ref, name))
    # ridge regression's first pass
    for f in (nystroem, fourier):
        for with_blocks in (True, False):
            old = ridge_pass(view, f, 3, x_cols, y_cols, with_blocks=with_blocks)
            new = ridge_moments(reduce_pass(view, moment_request(f, 3, x_cols, y_cols, with_blocks)), f,
                                with_blocks)
            np.testing.assert_array_equal(new.cross, old.cross)
            if with_blocks:
                np.testing.assert_array_equal(new.blocks, old.blocks)
            assert new.n == old.n
    # the rca moments, of random Fourier and Nyström feature maps
    L = X[:40].astype(np.float64)
    for fmap in (FourierMap(fourier, 3), NystroemMap(SPEC, L, inverse_sqrt(kernel_matrix(SPEC, L, L)))):
        shift = fmap(X[:300]).mean(axis=0, dtype=np.float64)
        for center in (True, False):
            n_old, mean_old, cov_old = feature_moments(xview, fmap, shift, center)
            n_new, mean_new, cov_new = feature_covariance(reduce_pass(xview, gram_request(fmap, shift)), shift, center)
            np.testing.assert_array_equal(mean_new, mean_old)
            np.testing.assert_array_equal(cov_new, cov_old)
            assert n_new == n_old


def test_numpy_input_sums_as_dask_input_chunked_by_slabs(monkeypatch, old_kernel_case):
    """Numpy input is cut in slabs of SLAB_ROWS rows, added by the same tree as dask chunks: the same totals.

    The old kernels added numpy slabs one after the other (``full_pass`` and the others)
    or took all rows as one slab (the moments): beyond four slabs (one for the moments)
    their sums differ from the tree's in the order of the float64 additions of the slabs'
    partial sums only, relative ``~ slabs * eps``.
    """
    S, fourier, *_ = old_kernel_case
    X = np.ascontiguousarray(S[:5500, :D])
    monkeypatch.setattr(passes, "SLAB_ROWS", 1000)  # six slabs
    V = orthonormal(np.random.default_rng(6).normal(size=(96, 3)))
    shift = fourier.raw_transform(X[:300], 0, 3).mean(0, dtype=np.float64)
    request = covariance_request(fourier, 3, V, shift)
    a, b = reduce_pass(_view(X), request), reduce_pass(_view(X, 1000), request)
    np.testing.assert_array_equal(a.views[0].products, b.views[0].products)
    np.testing.assert_array_equal(a.views[0].sums, b.views[0].sums)
    np.testing.assert_array_equal(a.directions, b.directions)
    old = full_pass(_view(X), fourier, 3, V, shift, True)
    new = covariance_times(a, fourier, V, shift, True)
    # slices and sums rounded in float32 as in the test above
    _float32_close(new.cov_times, old.cov_times)


# -- toy solvers on the driver ------------------------------------------------------------------
class PowerIteration:
    """Block subspace iteration with Rayleigh–Ritz for the top ``k`` eigenvectors of ``Cov(z)``."""

    name = "toy-subspace"
    measure_name = "change"

    def __init__(self, features, n_blocks, shift, k=3, width=6, tol=1e-13, cols=slice(0, D)):
        self.features, self.n_blocks, self.shift = features, n_blocks, shift
        self.k, self.width, self.tol, self.cols = k, width, tol, cols

    def start(self):
        M = self.n_blocks * self.features.block_size
        V = orthonormal(np.random.default_rng(0).normal(size=(M, self.width)))
        return {"V": V, "top": V[:, :self.k]}

    def plan(self, state):
        return covariance_request(self.features, self.n_blocks, state["V"], self.shift, cols=self.cols)

    def update(self, state, totals):
        CV = covariance_times(totals, self.features, state["V"], self.shift, True).cov_times
        R, lam, V_next = ritz_step(state["V"], CV)
        top = R[:, :self.k]
        return Update({"V": V_next, "top": top, "lam": lam}, subspace_sin2(state["top"], top),
                      extra={"eigenvalues": lam[:self.k].tolist()})

    def done(self, rec):
        return rec["measure"] <= self.tol

    def model(self, state):
        return state["top"]


class RidgeCG:
    """Conjugate gradients for ``(E[z z^T] + alpha I) x = E[z y]``: a first pass for ``E[z y]``, then one per step."""

    name = "toy-cg"
    measure_name = "relative_residual"

    def __init__(self, features, n_blocks, shift, alpha=1e-2, tol=1e-10):
        self.features, self.n_blocks, self.shift, self.alpha, self.tol = features, n_blocks, shift, alpha, tol

    def start(self):
        return {}

    def plan(self, state):
        if "b" not in state:  # the right-hand side
            return moment_request(self.features, self.n_blocks, slice(0, D), slice(D, D + C), with_blocks=False)
        return covariance_request(self.features, self.n_blocks, state["p"], self.shift, cols=slice(0, D))

    def update(self, state, totals):
        if "b" not in state:
            b = ridge_moments(totals, self.features, with_blocks=False).cross
            cg = CGState.start(b, np.copy)
            return Update({"b": b, "x": cg.x, "r": cg.r, "p": cg.p, "rz": cg.rz}, cg.relative_residual(b),
                          counted=False)
        Ap = covariance_times(totals, self.features, state["p"], self.shift, False).cov_times
        cg = CGState(*(state[k].copy() for k in ("x", "r", "p", "rz")))
        cg.advance(Ap + self.alpha * state["p"], np.copy)
        return Update({"b": state["b"], "x": cg.x, "r": cg.r, "p": cg.p, "rz": cg.rz},
                      cg.relative_residual(state["b"]))

    def done(self, rec):
        return rec["measure"] <= self.tol

    def model(self, state):
        return state["x"]


def _fourier(dtype="float64", cls=RandomFeatures, **kw):
    return cls(SPEC, D, 16, 7, dtype, center=np.zeros(D), **kw)


def _solvers(S, features):
    shift = features.raw_transform(S[:200, :D], 0, 3).mean(0, dtype=np.float64)
    return {"subspace": lambda: PowerIteration(features, 3, shift), "cg": lambda: RidgeCG(features, 3, shift)}


def test_toy_solvers_reach_the_dense_solutions():
    S = _data(3000)
    f = _fourier()
    solvers = _solvers(S, f)
    Z = f.transform(S[:, :D], 0, 3)
    n = len(Z)
    # subspace iteration: the top-3 eigenvectors of the dense covariance
    run = run_passes(solvers["subspace"](), _view(S, 700), max_iter=200, verbose=True)
    Zc = Z - Z.mean(0)
    lam, U = np.linalg.eigh(Zc.T @ Zc / n)
    assert run.converged
    assert run.n_iter == run.n_passes == len(run.records)
    # Stopped once a pass moved the top space by sin^2 <= 1e-13; it contracts by
    # (lam_7 / lam_3)^2 per pass (rho below), so the limit is within 1e-13 / (1 - sqrt(rho))^2,
    # and the limit differs from the dense eigenvectors by float64 round-off over the gap.
    rho = (lam[-7] / lam[-3]) ** 2
    assert subspace_sin2(U[:, -3:], run.state["top"]) <= 1e-13 / (1 - np.sqrt(rho)) ** 2 + 1e-12
    # Ritz values err by about sin^2 times the spread of the spectrum: below 1e-12 relative here
    np.testing.assert_allclose(run.records[-1]["eigenvalues"], lam[::-1][:3], rtol=1e-12)
    # conjugate gradients: the dense solve; ||x - x*|| / ||x*|| <= cond(A) ||r|| / ||b|| (r the
    # recursive residual: a factor 10 for its drift from the true one over the iterations)
    run = run_passes(solvers["cg"](), _view(S), max_iter=200)
    A = Z.T @ Z / n + 1e-2 * np.eye(Z.shape[1])
    x = np.linalg.solve(A, Z.T @ S[:, D:] / n)
    assert run.converged
    assert run.n_passes == run.n_iter + 1
    assert np.linalg.norm(run.state["x"] - x) <= 10 * np.linalg.cond(A) * 1e-10 * np.linalg.norm(x)
    first = run.records[0]
    assert list(first)[:4] == ["iteration", "rows", "seconds", "measure"]
    assert first["stage"] is True
    assert (first["iteration"], first["rows"]) == (0, n)
    assert all("stage" not in r for r in run.records[1:])
    assert [r["iteration"] for r in run.records[1:]] == list(range(1, run.n_iter + 1))
    assert [r["rows"] for r in run.records] == [n * (i + 1) for i in range(run.n_passes)]  # rows read so far


class Interrupt(Exception):
    pass


def _interrupt_after(iteration):
    def callback(n_iter, model):
        if n_iter == iteration:
            raise Interrupt
    return callback


@pytest.mark.parametrize("which", ["subspace", "cg"])
def test_interrupted_fit_resumes_bit_identical(tmp_path, which):
    S = _data(3000)
    make = _solvers(S, _fourier("float32"))[which]
    view = _view(S, 500)
    whole = run_passes(make(), view, max_iter=6)
    assert whole.n_iter > 3
    ckpt = PassCheckpoint(tmp_path / "ckpt", "fit-1")
    ckpt.seed = 42
    with pytest.raises(Interrupt):
        run_passes(make(), view, max_iter=6, checkpoint=ckpt, callback=_interrupt_after(2))
    resumed_ckpt = PassCheckpoint(tmp_path / "ckpt", "fit-1")
    saved = resumed_ckpt.load()
    assert (saved.n_iter, resumed_ckpt.seed) == (2, 42)
    seen = []
    resumed = run_passes(make(), view, max_iter=6, checkpoint=resumed_ckpt, callback=lambda i, m: seen.append(i))
    assert seen[0] == 3  # the interrupted fit went on from its third iteration
    assert resumed.state.keys() == whole.state.keys()
    for key in whole.state:
        np.testing.assert_array_equal(resumed.state[key], whole.state[key])
    assert (resumed.n_iter, resumed.n_passes) == (whole.n_iter, whole.n_passes)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in whole.records]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in resumed.records] == strip
    seconds = [r["seconds"] for r in resumed.records]
    assert seconds == sorted(seconds)  # the resumed run's seconds go on from the saved ones
    # a fit resumed from a checkpoint of its last pass takes no pass
    again = run_passes(make(), view, max_iter=6, checkpoint=PassCheckpoint(tmp_path / "ckpt", "fit-1"))
    np.testing.assert_array_equal(again.state["x" if which == "cg" else "top"],
                                  whole.state["x" if which == "cg" else "top"])


def test_checkpoint_of_another_fit_is_refused(tmp_path):
    S = _data(600)
    make = _solvers(S, _fourier())["subspace"]
    path = tmp_path / "ckpt"
    run_passes(make(), _view(S), max_iter=1, checkpoint=PassCheckpoint(path, "fit-1"))
    with pytest.raises(ValueError, match="different fit"):
        run_passes(make(), _view(S), max_iter=2, checkpoint=PassCheckpoint(path, "fit-2"))
    other = _solvers(S, _fourier())["cg"]
    with pytest.raises(ValueError, match="toy-subspace"):
        run_passes(other(), _view(S), max_iter=2, checkpoint=PassCheckpoint(path, "fit-1"))
    with pytest.raises(ValueError, match="pass driver"):  # the step engine's checkpointer refuses it too
        Checkpointer(path, 10, "fit-1").existing()
    steps = Checkpointer(tmp_path / "steps", 10, "fit-1")
    steps.seed = 0
    steps.save(StepState((np.zeros((4, 2)),), 3, 1.0))
    with pytest.raises(ValueError, match="written by steps"):
        run_passes(make(), _view(S), max_iter=2, checkpoint=PassCheckpoint(tmp_path / "steps", "fit-1"))


# -- schedulers and a killed worker -------------------------------------------------------------
class KillingFeatures(RandomFeatures):
    """Fourier features whose evaluation kills its own process (SIGKILL) once the file ``flag`` exists (once)."""

    def __init__(self, *args, flag=None, **kw):
        super().__init__(*args, **kw)
        self.flag = flag

    def raw(self, Xp, page, out=None):
        if self.flag is not None:
            try:
                os.unlink(self.flag)
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().raw(Xp, page, out=out)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("pass-driver")
    path = str(root / "S.zarr")
    zarr.create_array(store=path, data=_data(3000, seed=8).astype("float32"), chunks=(500, D + C))
    return root, path


@pytest.fixture(scope="module")
def references(store):
    root, path = store
    S = np.asarray(zarr.open_array(path))
    features = _fourier("float32", KillingFeatures, flag=str(root / "kill"))
    with dask.config.set(scheduler="sync"):
        return features, {name: run_passes(make(), DataView(da.from_zarr(path)), max_iter=4)
                          for name, make in _solvers(S, features).items()}


@pytest.fixture(scope="module")
def cluster():
    with worker_cluster(2) as c, Client(c) as client:
        yield client


def _assert_same(run, ref):
    for key in ref.state:
        np.testing.assert_array_equal(run.state[key], ref.state[key])
    assert [r["measure"] for r in run.records] == [r["measure"] for r in ref.records]


def test_same_state_on_threads_and_a_local_cluster(store, references, cluster):
    _, path = store
    features, refs = references
    S = np.asarray(zarr.open_array(path))
    with dask.config.set(scheduler="threads"):
        for name, make in _solvers(S, features).items():
            _assert_same(run_passes(make(), DataView(da.from_zarr(path)), max_iter=4), refs[name])
    with get_task_stream(cluster) as stream:
        for name, make in _solvers(S, features).items():
            _assert_same(run_passes(make(), DataView(da.from_zarr(path)), max_iter=4), refs[name])
    # the chunk tasks of the passes ran on both workers
    assert len({t["worker"] for t in stream.data if str(t["key"]).startswith("('dsgd-pass-")}) == 2


def test_killed_worker_leaves_the_state_unchanged(store, references, cluster):
    """A worker killed during pass 2: the pass runs again from the solver's state after pass 1; same result."""
    root, path = store
    features, refs = references
    S = np.asarray(zarr.open_array(path))
    pids = set(cluster.run(os.getpid).values())
    # no retry by the scheduler: the killed task fails the pass, and the driver runs it again
    cluster.run_on_scheduler(lambda dask_scheduler: setattr(dask_scheduler, "allowed_failures", 0))
    flag = root / "kill"

    def arm(n_iter, model):
        if n_iter == 1:
            flag.touch()

    make = _solvers(S, features)["subspace"]
    with pytest.warns(RuntimeWarning, match="pass 2 lost a worker"):
        run = run_passes(make(), DataView(da.from_zarr(path)), max_iter=4, callback=arm)
    assert not flag.exists()
    assert len(pids - set(cluster.run(os.getpid).values())) == 1  # one worker process is gone
    _assert_same(run, refs["subspace"])
