"""Atomic fits: a ``fit`` or ``partial_fit`` that raises leaves the estimator as it was.

Whatever stops a fit (a bad input found in a late chunk, a diverging solver, an exception
from the callback, a ``KeyboardInterrupt`` from Ctrl-C or a SIGINT during a dask
computation), the estimator keeps its previous model and every fitted attribute, or stays
unfitted when it had none: ``transform``, ``predict``, ``save`` and the fitted attributes
never mix two fits. A checkpoint written by the interrupted fit stays on disk, so that
``fit`` with the same ``checkpoint`` resumes it.

The snapshot is shallow and copies no array: the attributes are put back as they were,
and the lists, dicts and sets among them (``convergence_``, which a run of steps appends
to) get their contents back in place. That suffices because a fit replaces its fitted
objects rather than writing into them: each update step returns new coefficient arrays
(:func:`~dsgd_dask.engine.steps.run_chunk` leaves its input state as it was), and the
models, step states and feature sets are built anew by every fit.
"""

from __future__ import annotations

import functools

#: The mutable containers whose contents a snapshot keeps (attributes a fit may change in place).
_CONTAINERS = (list, dict, set)


def atomic_fit(method):
    """Decorate a ``fit`` or ``partial_fit`` method so that it changes the estimator only when it returns.

    On any exception, ``BaseException`` included (``KeyboardInterrupt``, ``SystemExit``),
    the estimator's attributes are restored to what they were on entry, then the
    exception propagates unchanged.

    Parameters
    ----------
    method : callable
        ``method(self, *args, **kwargs)``, a method of an estimator that keeps its state
        in its instance ``__dict__``.

    Returns
    -------
    callable
        The wrapped method, with the name, docstring and signature of ``method``.
    """

    @functools.wraps(method)
    def atomic(self, *args, **kwargs):
        saved = _snapshot(self)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            _restore(self, saved)
            raise

    atomic.__atomic_fit__ = True
    return atomic


def _snapshot(estimator) -> tuple[dict, list]:
    """The instance attributes, and a copy of the contents of each mutable container among them."""
    attrs = estimator.__dict__.copy()
    contents = [(value, value.copy()) for value in attrs.values() if type(value) in _CONTAINERS]
    return attrs, contents


def _restore(estimator, saved: tuple[dict, list]) -> None:
    """Put back the attributes of :func:`_snapshot`: the same objects, containers with their old contents."""
    attrs, contents = saved
    for value, old in contents:
        if isinstance(value, list):
            value[:] = old
        else:
            value.clear()
            value.update(old)
    current = estimator.__dict__
    for name in [name for name in current if name not in attrs]:
        del current[name]
    current.update(attrs)
