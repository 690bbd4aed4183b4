"""Every pass solver of every estimator on the one pass driver.

For each pass solver: a fit checkpointed and interrupted after pass 2 (a callback that
raises), then resumed, ends bit for bit (``np.array_equal``) where an uninterrupted fit
does; the same model on the synchronous, threaded and a 2-worker ``distributed``
scheduler; a worker killed (SIGKILL) during a pass leaves the fitted model unchanged. One
section per estimator; the problems are small (a few hundred rows) and share the session's
2-worker ``LocalCluster`` (the ``cluster`` fixture); a test that kills a worker starts its own.
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
from conftest import worker_cluster
from distributed import Client

# what the tests define (e.g. feature sets that kill their worker) reaches the workers by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(local_clusters):
    """A client of the session's 2-worker ``LocalCluster`` (processes, one thread each), for the whole module."""
    with Client(local_clusters(2)) as client:
        yield client


@pytest.fixture
def victim_cluster():
    """A 2-worker ``LocalCluster`` of its own for a test that kills one of its workers.

    A killed worker's nanny restarts it, but not always before the cluster is used again; a
    cluster per test keeps the other tests independent of that timing.
    """
    with worker_cluster(2) as c, Client(c) as client:
        yield client


class Interrupt(Exception):
    """Raised by :func:`interrupt_after` to stop a fit."""


def interrupt_after(n: int):
    """A callback that raises :class:`Interrupt` after iteration ``n`` (its checkpoint is written by then)."""

    def callback(n_iter, model):
        if n_iter >= n:
            raise Interrupt(n_iter)

    return callback


def kill_worker_once(flag):
    """``os.kill(own pid, SIGKILL)`` once the file ``flag`` exists (deleted first: one kill only)."""
    try:
        os.unlink(flag)
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _read(block, flag):
    """A row chunk as read from the store; kills its worker (once) when the file ``flag`` exists."""
    if flag is not None:
        kill_worker_once(flag)
    return block


def same_records(a, b) -> None:
    """The same ``convergence_`` records but for the seconds.

    ``assert_equal``: NaN measures (those of "rca") are equal.
    """
    np.testing.assert_equal([{k: v for k, v in r.items() if k != "seconds"} for r in a.convergence_],
                            [{k: v for k, v in r.items() if k != "seconds"} for r in b.convergence_])


def zarr_store(path, data: np.ndarray, rows_per_chunk: int) -> str:
    """``data`` written as a Zarr array at ``path`` in chunks of ``rows_per_chunk`` rows; its path."""
    zarr.create_array(store=str(path), data=data, chunks=(rows_per_chunk, data.shape[1]))
    return str(path)


def lazy(path) -> da.Array:
    return da.from_zarr(str(path))


# -- KernelRidge: solver="cg" -------------------------------------------------------------------
#: Three systems: Nyström blocks with the landmark preconditioner ("auto" for several blocks),
#: with block-Jacobi, and Fourier blocks (block-Jacobi). tol=0: every fit takes max_iter passes.
RIDGE = dict(solver="cg", alpha=1e-3, n_features=256, block_size=64, tol=0.0, max_iter=5, random_state=0)
RIDGE_CASES = {"landmarks": {}, "block": {"preconditioner": "block"}, "fourier": {"features": "fourier"}}


def _ridge(case, **kw):
    from dsgd_dask import KernelRidge

    return KernelRidge(**{**RIDGE, **RIDGE_CASES[case], **kw})


@pytest.fixture(scope="module")
def ridge_store(tmp_path_factory):
    """600 rows of 5 inputs and 2 targets, stacked, in 4 chunks of 150 rows."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(600, 5))
    y = np.c_[np.sin(X[:, 0]) + X[:, 1] ** 2 / 4, np.cos(X[:, 2]) * X[:, 3]] + 0.1 * rng.normal(size=(600, 2))
    return zarr_store(tmp_path_factory.mktemp("ridge") / "S.zarr", np.hstack([X, y]), 150)


def _xy(path):
    S = lazy(path)
    return S[:, :5], S[:, 5:]


@pytest.fixture(scope="module")
def ridge_references(ridge_store):
    with dask.config.set(scheduler="sync"):
        return {case: _ridge(case).fit(*_xy(ridge_store)) for case in RIDGE_CASES}


def _same_ridge(est, ref):
    np.testing.assert_array_equal(est.model_.coef, ref.model_.coef)
    assert est.n_iter_ == ref.n_iter_
    same_records(est, ref)


@pytest.mark.parametrize("case", list(RIDGE_CASES))
def test_ridge_cg_interrupted_after_pass_two_resumes_bit_identically(ridge_store, ridge_references, case,
                                                                     tmp_path):
    ref = ridge_references[case]
    assert ref.n_iter_ == RIDGE["max_iter"]
    assert ref.solver_ == "cg"
    assert ref.preconditioner_ == ("landmarks" if case == "landmarks" else "block")
    ckpt = str(tmp_path / "ckpt.zarr")
    with dask.config.set(scheduler="sync"):
        with pytest.raises(Interrupt):
            _ridge(case, checkpoint=ckpt).fit(*_xy(ridge_store), callback=interrupt_after(2))
        seen = []
        resumed = _ridge(case, checkpoint=ckpt).fit(*_xy(ridge_store), callback=lambda n, model: seen.append(n))
        assert seen == [3, 4, 5]  # the passes after the second: the first two were not taken again
        _same_ridge(resumed, ref)
        assert resumed.solver_ == "cg"
        # a checkpoint of the last pass returns the model without a pass
        again = _ridge(case, checkpoint=ckpt).fit(*_xy(ridge_store), callback=lambda n, model: seen.append(n))
        assert seen == [3, 4, 5]
        _same_ridge(again, ref)
        # another solver's fit (another fingerprint) refuses the checkpoint
        with pytest.raises(ValueError, match="different fit"):
            _ridge(case, checkpoint=ckpt, solver="dsgd").fit(*_xy(ridge_store))


def test_ridge_cg_checkpoint_with_random_state_none_resumes_its_seed(ridge_store, tmp_path):
    ckpt = str(tmp_path / "ckpt.zarr")
    X, y = (np.asarray(a) for a in _xy(ridge_store))
    with pytest.raises(Interrupt):
        _ridge("landmarks", random_state=None, checkpoint=ckpt).fit(X, y, callback=interrupt_after(2))
    resumed = _ridge("landmarks", random_state=None, checkpoint=ckpt).fit(X, y)
    # the seed drawn by the interrupted fit, saved with the checkpoint: the fit of that seed
    _same_ridge(resumed, _ridge("landmarks", random_state=resumed.seed_).fit(X, y))


def test_ridge_cg_same_model_on_threads_and_a_local_cluster(ridge_store, ridge_references, cluster):
    from distributed import get_task_stream

    with dask.config.set(scheduler="threads"):
        for case, ref in ridge_references.items():
            _same_ridge(_ridge(case).fit(*_xy(ridge_store)), ref)
    with get_task_stream(cluster) as stream:
        for case, ref in ridge_references.items():
            _same_ridge(_ridge(case).fit(*_xy(ridge_store)), ref)
    # both kinds of pass ran as chunk tasks on both workers
    for name in ("('dsgd-ridge-pass-", "('dsgd-pass-"):
        assert len({t["worker"] for t in stream.data if str(t["key"]).startswith(name)}) == 2, name


def test_ridge_cg_killed_worker_during_a_pass_leaves_the_fit_unchanged(ridge_store, ridge_references,
                                                                        victim_cluster, tmp_path):
    """SIGKILL of the worker reading a row chunk in pass 2: the pass runs again, the model is the same."""
    import warnings

    flag = tmp_path / "kill"
    cluster = victim_cluster
    pids = _worker_pids(cluster)
    X, y = _xy(ridge_store)
    X = X.map_blocks(_read, str(flag), dtype=X.dtype)  # the rows' reading kills once the flag is there

    def arm(n_iter, model):
        if n_iter == 1:
            flag.touch()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the driver's note of a pass run again
        est = _ridge("landmarks").fit(X, y, callback=arm)
    assert not flag.exists()  # a worker read it and killed itself
    assert len(pids - set(cluster.run(os.getpid).values())) == 1  # that worker process is gone
    _same_ridge(est, ridge_references["landmarks"])



# -- KernelCCA: solver="lobpcg" and solver="rca"; KernelSIR: solver="rca" ------------------------
#
# 600 rows of two views (5 + 2 columns, stacked in one Zarr array of 6 chunks): a pass is six
# chunk tasks. "rca" is one pass and takes no checkpoint (its state is M^2, and one pass has
# nothing to resume): its item-4 tests are the schedulers and the killed worker.

CCA_LOBPCG = dict(n_components=2, solver="lobpcg", n_features=128, block_size=64, reg=1e-4, tol=1e-12, max_iter=5,
                  random_state=3)
CCA_RCA = dict(n_components=2, solver="rca", features="fourier", n_features=128, block_size=64, reg=1e-3,
               random_state=3)
SIR_RCA = dict(n_components=2, solver="rca", n_features=96, n_slices=5, reg=1e-3, random_state=3)
#: The prefix of the pass tasks of each fit (the chunk tasks of ``reduce_pass``).
PASS_TASKS = {"cca-lobpcg": "dsgd-cross-pass-", "cca-rca": "rcca-moments-", "sir-rca": "sir-moments-"}


def _two_views(n=600, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(-2, 2, size=n)
    X = np.c_[np.cos(t), np.sin(t), rng.normal(size=(n, 3))] + 0.05 * rng.normal(size=(n, 5))
    Y = np.c_[t ** 2, np.sin(2 * t)] + 0.1 * rng.normal(size=(n, 2))
    return np.hstack([X, Y]).astype("float32")


@pytest.fixture(scope="module")
def two_view_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("two-view-passes")
    return root, zarr_store(root / "S.zarr", _two_views(), 100)


def _fit(which, path, flag=None, callback=None, **params):
    """The fit ``which`` on the lazy rows of ``path`` (each chunk read through :func:`_read`)."""
    from dsgd_dask import KernelCCA, KernelSIR

    S = lazy(path)
    S = S.map_blocks(_read, None if flag is None else str(flag), dtype=S.dtype)
    X, Y = S[:, :5], S[:, 5:]
    if which == "cca-lobpcg":
        return KernelCCA(**CCA_LOBPCG, **params).fit(X, Y, callback=callback)
    if which == "cca-rca":
        return KernelCCA(**CCA_RCA, **params).fit(X, Y)
    return KernelSIR(**SIR_RCA, **params).fit(X, Y[:, 0])


def _worker_pids(client) -> set:
    """The pids of the cluster's two workers, once both run (a worker killed by an earlier test is restarted)."""
    import time

    for _ in range(1200):  # two minutes at most: a worker restarts in seconds on an idle machine
        pids = set(client.run(os.getpid, on_error="ignore").values())
        if len(pids) == 2:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"the cluster has {len(pids)} worker(s) running, not 2")


def _same_fit(a, b):
    """Bit for bit the same functions, values, iterations and records (but for the seconds)."""
    for ma, mb in zip(a.models_, b.models_, strict=True):
        np.testing.assert_array_equal(ma.coef, mb.coef)
        np.testing.assert_array_equal(ma.offset, mb.offset)
    values = "correlations_" if hasattr(b, "correlations_") else "eigenvalues_"
    np.testing.assert_array_equal(getattr(a, values), getattr(b, values))
    assert (a.n_iter_, a.solver_) == (b.n_iter_, b.solver_)
    same_records(a, b)


@pytest.fixture(scope="module")
def two_view_references(two_view_store):
    _, path = two_view_store
    with dask.config.set(scheduler="sync"):
        return {which: _fit(which, path) for which in PASS_TASKS}


def test_cca_lobpcg_interrupted_after_pass_two_resumes_bit_identically(two_view_store, two_view_references,
                                                                      tmp_path):
    _, path = two_view_store
    reference = two_view_references["cca-lobpcg"]
    assert reference.n_iter_ == CCA_LOBPCG["max_iter"]  # tol=1e-12: every pass runs
    ckpt = str(tmp_path / "ckpt.zarr")
    with dask.config.set(scheduler="sync"):
        with pytest.raises(Interrupt):
            _fit("cca-lobpcg", path, checkpoint=ckpt, callback=interrupt_after(2))
        seen = []
        resumed = _fit("cca-lobpcg", path, checkpoint=ckpt, callback=lambda n, models: seen.append(n))
    assert seen == [3, 4, 5]  # the resumed fit went on from its third pass
    _same_fit(resumed, reference)
    # resumed from the checkpoint of its last pass: no pass, the same model (the state's arrays
    # are contiguous in the fit as they are when read back, so the offsets' products match too)
    with dask.config.set(scheduler="sync"):
        again = _fit("cca-lobpcg", path, checkpoint=ckpt, callback=lambda n, models: seen.append(n))
    assert seen == [3, 4, 5]
    _same_fit(again, reference)


@pytest.mark.parametrize("which", list(PASS_TASKS))
def test_two_view_pass_solvers_same_model_on_threads_and_a_local_cluster(two_view_store, two_view_references,
                                                                          cluster, which):
    from distributed import get_task_stream

    _, path = two_view_store
    with dask.config.set(scheduler="threads"):
        _same_fit(_fit(which, path), two_view_references[which])
    _worker_pids(cluster)
    with get_task_stream(cluster) as stream:
        model = _fit(which, path)
    _same_fit(model, two_view_references[which])
    # the chunk tasks of the passes ran on both workers
    assert len({t["worker"] for t in stream.data if PASS_TASKS[which] in str(t["key"])}) == 2


@pytest.mark.parametrize("which", list(PASS_TASKS))
def test_two_view_pass_solvers_killed_worker_leaves_the_model_unchanged(two_view_store, two_view_references,
                                                                         victim_cluster, which, monkeypatch):
    """A worker killed (SIGKILL) while it reads a row chunk of pass 2 ("lobpcg") or of the one pass ("rca")."""
    cluster = victim_cluster
    root, path = two_view_store
    flag = root / f"kill-{which}"
    pids = _worker_pids(cluster)
    kw = {}
    if which == "cca-lobpcg":
        def arm(n_iter, models):
            if n_iter == 1:
                flag.touch()
        kw["callback"] = arm
    else:  # armed once the sample and the landmarks are read, as the moments pass starts
        import dsgd_dask.baselines.rcca as rcca
        import dsgd_dask.estimators.sir as sir

        module = rcca if which == "cca-rca" else sir
        moments = module.rca_moments

        def armed(*args, **kwargs):
            flag.touch()
            return moments(*args, **kwargs)

        monkeypatch.setattr(module, "rca_moments", armed)
    model = _fit(which, path, flag=flag, **kw)
    assert not flag.exists()  # a worker read it, and died
    assert len(pids - set(cluster.run(os.getpid, on_error="ignore").values())) == 1  # one worker process is gone
    _same_fit(model, two_view_references[which])


# -- KernelPCA: solver="subspace" and solver="rca" ----------------------------------------------
#
# 2400 rows of a 6-cluster mixture in 5-D, in 12 chunks of 200 rows. The seeded sample and
# the warm start take 100 rows (N_SAMPLE and N_INIT patched down, as if the data were
# large): the subspace fits take one sampled stage (400 rows, two chunks) before their
# passes, so the stages go through the driver too. "rca" is one pass and takes no
# checkpoint (its state is M^2, and one pass has nothing to resume).

PCA_SUBSPACE = dict(n_components=3, solver="subspace", n_features=128, block_size=64, tol=0.0, max_iter=4,
                    random_state=5)
PCA_CASES = {
    "subspace-nystroem": PCA_SUBSPACE,  # two blocks whitened jointly
    "subspace-fourier": {**PCA_SUBSPACE, "features": "fourier"},
    "rca-nystroem": dict(n_components=3, solver="rca", n_features=100, random_state=5),
    "rca-fourier": dict(n_components=3, solver="rca", features="fourier", n_features=128, block_size=64,
                        random_state=5),
}
#: The prefix of the pass tasks of each solver (the chunk tasks of ``reduce_pass``).
PCA_TASKS = {"subspace": "dsgd-pass-", "rca": "feature-moments-"}


@pytest.fixture(scope="module")
def pca_store(tmp_path_factory):
    rng = np.random.default_rng(9)
    centres = rng.normal(size=(6, 5)) * 2.0
    X = (centres[rng.integers(6, size=2400)] + rng.normal(size=(2400, 5))).astype("float32")
    root = tmp_path_factory.mktemp("pca-passes")
    return root, zarr_store(root / "X.zarr", X, 200)


def _pca(case, path, flag=None, callback=None, **params):
    """``KernelPCA`` of ``case`` fitted on the lazy rows of ``path`` (each chunk read through :func:`_read`)."""
    from dsgd_dask import KernelPCA
    from dsgd_dask.estimators import kpca

    X = lazy(path)
    X = X.map_blocks(_read, None if flag is None else str(flag), dtype=X.dtype)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kpca, "N_SAMPLE", 100)
        mp.setattr(kpca, "N_INIT", 100)
        return KernelPCA(**{**PCA_CASES[case], **params}).fit(X, callback=callback)


def _same_pca(a, b):
    """Bit for bit the same model, eigenvalues, iterations and records (but for the seconds)."""
    for name in ("coef", "offset"):
        np.testing.assert_array_equal(getattr(a.model_, name), getattr(b.model_, name))
    np.testing.assert_array_equal(a.eigenvalues_, b.eigenvalues_)
    assert (a.n_iter_, a.solver_) == (b.n_iter_, b.solver_)
    same_records(a, b)


@pytest.fixture(scope="module")
def pca_references(pca_store):
    _, path = pca_store
    with dask.config.set(scheduler="sync"):
        return {case: _pca(case, path) for case in PCA_CASES}


@pytest.mark.parametrize("case", ["subspace-nystroem", "subspace-fourier"])
def test_pca_subspace_interrupted_after_pass_two_resumes_bit_identically(pca_store, pca_references, case,
                                                                         tmp_path):
    _, path = pca_store
    reference = pca_references[case]
    # a sampled stage (not an iteration), then max_iter passes (tol=0)
    assert [r["stage"] for r in reference.convergence_] == [True] + [False] * PCA_SUBSPACE["max_iter"]
    assert reference.n_iter_ == PCA_SUBSPACE["max_iter"]
    ckpt = str(tmp_path / "ckpt.zarr")
    models = []
    with dask.config.set(scheduler="sync"):
        with pytest.raises(Interrupt):
            _pca(case, path, checkpoint=ckpt, callback=interrupt_after(2))
        assert zarr.open_group(ckpt, mode="r").attrs["n_passes"] == 3  # the stage and two passes
        seen = []
        resumed = _pca(case, path, checkpoint=ckpt, callback=lambda n, model: (seen.append(n), models.append(model)))
        assert seen == [3, 4]  # the passes after the second: the stage and the first two were not taken again
        _same_pca(resumed, reference)
        # the callback's model: the raw functions on the model's features, what the fit ends with up to
        # its centring and signs
        assert models[-1].features is resumed.model_.features
        np.testing.assert_array_equal(np.abs(models[-1].coef), np.abs(resumed.model_.coef))
        # a checkpoint of the last pass returns the model without a pass
        again = _pca(case, path, checkpoint=ckpt, callback=lambda n, model: seen.append(n))
        assert seen == [3, 4]
        _same_pca(again, reference)
        # another fit (other parameters: another fingerprint) refuses the checkpoint
        with pytest.raises(ValueError, match="different fit"):
            _pca(case, path, checkpoint=ckpt, solver="dsgd")


def test_pca_subspace_checkpoint_with_random_state_none_resumes_its_seed(pca_store, tmp_path):
    _, path = pca_store
    ckpt = str(tmp_path / "ckpt.zarr")
    with dask.config.set(scheduler="sync"):
        with pytest.raises(Interrupt):
            _pca("subspace-nystroem", path, random_state=None, checkpoint=ckpt, callback=interrupt_after(2))
        resumed = _pca("subspace-nystroem", path, random_state=None, checkpoint=ckpt)
        # the seed drawn by the interrupted fit, saved with the checkpoint: the fit of that seed
        _same_pca(resumed, _pca("subspace-nystroem", path, random_state=resumed.seed_))


def test_pca_rca_takes_no_checkpoint(pca_store, tmp_path):
    _, path = pca_store
    ckpt = tmp_path / "ckpt.zarr"
    with dask.config.set(scheduler="sync"):
        est = _pca("rca-fourier", path, checkpoint=str(ckpt))
    assert not ckpt.exists()
    assert est.n_iter_ == len(est.convergence_) == 1
    assert est.convergence_[0]["rows"] == 2400


@pytest.mark.parametrize("case", list(PCA_CASES))
def test_pca_pass_solvers_same_model_on_threads_and_a_local_cluster(pca_store, pca_references, cluster, case):
    from distributed import get_task_stream

    _, path = pca_store
    with dask.config.set(scheduler="threads"):
        _same_pca(_pca(case, path), pca_references[case])
    _worker_pids(cluster)
    with get_task_stream(cluster) as stream:
        model = _pca(case, path)
    _same_pca(model, pca_references[case])
    # the chunk tasks of the passes ran on both workers
    prefix = PCA_TASKS[case.split("-")[0]]
    assert len({t["worker"] for t in stream.data if prefix in str(t["key"])}) == 2


@pytest.mark.parametrize("case", ["subspace-nystroem", "rca-nystroem"])
def test_pca_pass_solvers_killed_worker_leaves_the_model_unchanged(pca_store, pca_references, victim_cluster,
                                                                    case, monkeypatch):
    """A worker killed (SIGKILL) while it reads a row chunk of pass 2 ("subspace") or of the one pass ("rca")."""
    cluster = victim_cluster
    root, path = pca_store
    flag = root / f"kill-{case}"
    pids = _worker_pids(cluster)
    kw = {}
    if case.startswith("subspace"):
        def arm(n_iter, model):
            if n_iter == 1:
                flag.touch()
        kw["callback"] = arm
    else:  # armed once the sample and the landmarks are read, as the moments pass starts
        import dsgd_dask.baselines.rca as rca

        moments = rca.rca_moments

        def armed(*args, **kwargs):
            flag.touch()
            return moments(*args, **kwargs)

        monkeypatch.setattr(rca, "rca_moments", armed)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the driver's note of a pass run again
        model = _pca(case, path, flag=flag, **kw)
    assert not flag.exists()  # a worker read it, and died
    assert len(pids - set(cluster.run(os.getpid).values())) == 1  # one worker process is gone
    _same_pca(model, pca_references[case])
