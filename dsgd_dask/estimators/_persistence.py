"""Loading saved estimators."""

from __future__ import annotations

from dsgd_dask.model.store import StoreError, read_store


def _registry() -> dict:
    import dsgd_dask.estimators  # noqa: F401  (importing the estimators registers them)
    from dsgd_dask.estimators._steps import REGISTRY

    return dict(REGISTRY)


def load(path, *, storage_options=None):
    """Load an estimator saved with ``save(path)``.

    Parameters
    ----------
    path : str, os.PathLike or URL
        A store written by an estimator's ``save``: a local path or ``file://`` URL, or any
        other fsspec URL (``s3://``, ``memory://``...) with ``storage_options``.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL (``endpoint_url``, ``key``, ``secret``...
        for ``s3://``; ``{}`` for its defaults).

    Returns
    -------
    estimator
        The fitted estimator, ready to ``transform`` (and to continue with ``partial_fit``).

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ValueError
        ``path`` is a ``file://`` URL of another host; or it is not a saved model (e.g. a
        data store), was written in another format version, is truncated or corrupt, or
        its attributes were edited (they do not match their checksum); on an object store
        also: it has no valid commit record (a save that did not finish), or does not
        match it.
    """
    attrs, arrays = read_store(path, "model", storage_options)
    name = attrs.get("estimator")
    registry = _registry()
    if isinstance(name, str) and name.startswith("DSGD") and name[4:] in registry:
        # stores written before the estimators took their problems' names hold the same payload
        name = name[4:]
    if name not in registry:
        raise StoreError(f"{path} holds an unknown estimator {name!r}; known: {sorted(registry)}")
    return registry[name]._from_payload(attrs, arrays)
