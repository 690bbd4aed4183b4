"""Progress bars for fits: tqdm bars behind the plain callbacks the engine calls.

The engine reports progress through a callable, ``progress(n_steps)``, called with the
number of steps just completed; it holds no user interface. This module turns such
calls into :mod:`tqdm` bars (:func:`tqdm.auto.tqdm`: a terminal bar, or a widget in a
notebook). The estimators use it when ``verbose=True``; any other caller (a command
line, a script) may use it too.

Examples
--------
>>> import io
>>> from dsgd_dask.progress import pass_bar, step_bar
>>> out = io.StringIO()
>>> with step_bar(10, batch_size=256, file=out) as progress:
...     progress(4)
...     progress(6)
>>> progress.n
10
>>> with pass_bar(20, file=out) as progress:
...     progress(1, change=0.1, estimated_error=1e-3)
...     progress(2, change=1e-4, estimated_error=1e-6)
>>> progress.n
2
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PassCallback", "StepCallback", "pass_bar", "step_bar"]


class StepCallback:
    """Advance a step bar: ``callback(n_steps)`` after ``n_steps`` more update steps.

    The postfix shows the throughput in samples (rows) per second since the bar opened.

    Parameters
    ----------
    bar : tqdm.tqdm
        The bar to advance (its unit is one step).
    batch_size : int
        Rows per step.

    Attributes
    ----------
    bar : tqdm.tqdm
    n : int
        Steps counted so far (including those done before the bar opened).
    """

    def __init__(self, bar, batch_size: int):
        self.bar = bar
        self.batch_size = int(batch_size)
        self._start = bar.n
        self._t0 = time.perf_counter()

    @property
    def n(self) -> int:
        return int(self.bar.n)

    def __call__(self, n_steps: int) -> None:
        elapsed = time.perf_counter() - self._t0
        rate = (self.bar.n + n_steps - self._start) * self.batch_size / elapsed if elapsed > 0 else 0.0
        self.bar.set_postfix_str(f"{rate:,.0f} samples/s", refresh=False)
        self.bar.update(n_steps)


class PassCallback:
    """Advance a bar over full-data passes of the subspace solver.

    ``callback(n_passes, change, estimated_error, rows=None)`` after every full pass
    (``rows`` is ``None``) or sampled stage (``rows``: the rows of the stage; the bar does
    not advance). The postfix shows how far the top subspace moved (``sin²``) and the
    estimated error.

    Parameters
    ----------
    bar : tqdm.tqdm
        The bar to advance (its unit is one pass).

    Attributes
    ----------
    bar : tqdm.tqdm
    n : int
        Full passes counted so far.
    """

    def __init__(self, bar):
        self.bar = bar

    @property
    def n(self) -> int:
        return int(self.bar.n)

    def __call__(self, n_passes: int, change: float | None, estimated_error: float | None,
                 rows: int | None = None, **shown: float) -> None:
        err = "-" if estimated_error is None else f"{estimated_error:.2e}"
        what = {} if rows is None else {"stage rows": f"{rows:,}"}
        if change is not None:
            what |= {"change": f"{change:.2e}", "est. error": err}
        what |= {name.replace("_", " "): f"{value:.2e}" for name, value in shown.items()}
        self.bar.set_postfix(what, refresh=False)
        if n_passes > self.bar.n:
            self.bar.update(n_passes - self.bar.n)
        else:
            self.bar.refresh()


def _tqdm(**kwargs):
    from tqdm.auto import tqdm

    return tqdm(dynamic_ncols=True, **kwargs)


@contextmanager
def step_bar(total: int, batch_size: int, done: int = 0, *, desc: str | None = None, file=None,
             leave: bool = True) -> Iterator[StepCallback]:
    """A tqdm bar over update steps, as a context manager yielding its callback.

    Parameters
    ----------
    total : int
        Steps of the run.
    batch_size : int
        Rows per step (for the samples/s postfix).
    done : int, default=0
        Steps already taken (a resumed fit): the bar starts there.
    desc : str, optional
        Prefix of the bar.
    file : file-like, optional
        Where to write (default: standard error).
    leave : bool, default=True
        Keep the finished bar on screen.

    Yields
    ------
    StepCallback
        ``callback(n_steps)``, to pass as ``progress`` to
        :func:`dsgd_dask.engine.run_plan`. The bar is closed on exit, also on error.
    """
    bar = _tqdm(total=max(int(total), 1), initial=int(done), unit="step", desc=desc, file=file, leave=leave)
    try:
        yield StepCallback(bar, batch_size)
    finally:
        bar.close()


@contextmanager
def pass_bar(max_passes: int, *, desc: str | None = None, file=None,
             leave: bool = True) -> Iterator[PassCallback]:
    """A tqdm bar over the full-data passes of the subspace solver, yielding its callback.

    Parameters
    ----------
    max_passes : int
        Most passes the fit may take (it stops earlier once converged: the bar then
        ends short of its total).
    desc : str, optional
        Prefix of the bar.
    file : file-like, optional
        Where to write (default: standard error).
    leave : bool, default=True
        Keep the finished bar on screen.

    Yields
    ------
    PassCallback
        ``callback(n_passes, change, estimated_error, rows=None)``. The bar is closed on
        exit, also on error.
    """
    bar = _tqdm(total=max(int(max_passes), 1), unit="pass", desc=desc, file=file, leave=leave)
    try:
        yield PassCallback(bar)
    finally:
        bar.close()
