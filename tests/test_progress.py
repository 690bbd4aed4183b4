"""Progress: the engine reports steps to a plain callable; verbose fits show tqdm bars that always close."""

from __future__ import annotations

import dask
import dask.array as da
import pytest
from tqdm import tqdm

from dsgd_dask import KernelPCA, KernelRidge
from dsgd_dask.engine import run_plan
from dsgd_dask.progress import pass_bar, step_bar
from dsgd_dask.streams.batches import chunk_tasks
from dsgd_dask.streams.inputs import as_view

OJA = dict(n_components=2, solver="dsgd", features="fourier", n_features=256, block_size=64, batch_size=32,
           random_state=0)


def _open_bars() -> int:
    return len([b for b in list(tqdm._instances) if not b.disable])


@pytest.mark.parametrize("scheduler", ["local", "distributed"])
def test_run_plan_reports_every_step_to_a_callable(blobs, scheduler):
    X = da.from_array(blobs, chunks=(100, 5))
    est = KernelPCA(**OJA, max_iter=5).fit(X)
    view = as_view(X)
    n_steps = 37  # several chunk tasks, the last one cut short
    tasks = chunk_tasks(view, 32, est.seed_, est.state_.step, n_steps)
    calls = []
    if scheduler == "local":
        with dask.config.set(scheduler="sync"):
            state = run_plan(est.state_, view, tasks, (est._features,), est._rule, est._config, calls.append)
    else:
        from distributed import Client

        from dsgd_dask.engine.distributed import local_cluster

        with local_cluster(1, processes=False) as cluster, Client(cluster):
            state = run_plan(est.state_, view, tasks, (est._features,), est._rule, est._config, calls.append)
    assert len(calls) > 1
    assert all(isinstance(n, int) and n > 0 for n in calls)
    assert sum(calls) == n_steps
    assert state.step == est.state_.step + n_steps


def test_verbose_steps_fit_writes_a_tqdm_bar(blobs, capsys):
    y = blobs[:, 0] - blobs[:, 1]
    KernelRidge(alpha=1e-3, solver="dsgd", n_features=256, block_size=64, batch_size=32, max_iter=30,
                random_state=0).fit(blobs, y)
    assert capsys.readouterr().err == ""
    KernelRidge(alpha=1e-3, solver="dsgd", n_features=256, block_size=64, batch_size=32, max_iter=30,
                verbose=True, random_state=0).fit(blobs, y)
    err = capsys.readouterr().err
    assert "30/30" in err
    assert "step" in err
    assert "samples/s" in err
    assert _open_bars() == 0


def test_verbose_subspace_fit_writes_a_pass_bar(blobs, capsys):
    model = KernelPCA(3, n_features=256, max_iter=6, tol=1e-12, verbose=True, random_state=0).fit(blobs)
    err = capsys.readouterr().err
    assert f"{model.n_iter_}/6" in err
    assert "pass" in err
    # the postfix of the last pass: how far the subspace moved and the estimated error
    last = model.convergence_[-1]
    assert f"change={last['change']:.2e}" in err
    assert f"est. error={last['measure']:.2e}" in err
    assert _open_bars() == 0


def test_bars_close_on_error(blobs):
    def fail(n_steps, model):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        KernelPCA(**OJA, max_iter=40, verbose=True).fit(blobs, callback=fail)
    assert _open_bars() == 0
    with pytest.raises(RuntimeError, match="stop"):
        KernelPCA(3, n_features=256, max_iter=4, verbose=True, random_state=0).fit(blobs, callback=fail)
    assert _open_bars() == 0
    def interrupted(bar, *update):
        with bar as progress:
            progress(*update)
            seen.append(progress)
            raise KeyError("x")

    seen = []
    with pytest.raises(KeyError):
        interrupted(step_bar(10, 32), 3)
    with pytest.raises(KeyError):
        interrupted(pass_bar(5), 1, 0.1, None, 400)
    assert [p.bar.disable for p in seen] == [True, True]  # both closed


def test_resumed_step_bar_starts_where_the_fit_was(capsys):
    with step_bar(100, 32, done=60) as progress:
        progress(40)
    assert progress.n == 100
    assert "100/100" in capsys.readouterr().err
