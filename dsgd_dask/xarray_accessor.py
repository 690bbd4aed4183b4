"""The ``.dsgd`` accessor: fit and apply dsgd_dask estimators on xarray DataArrays and Datasets.

``import dsgd_dask`` registers it. The accessor chooses which dimension holds the samples
and which the features (transposing lazily), and hands the estimators a 2-D DataArray;
the estimators' own xarray support does the rest (labelled outputs, lazy on dask-backed
data, the fitted feature dimension and coordinates checked). Outputs keep the coordinates
of the sample dimension, name their new dimension ``"component"`` (``"class"`` for
probabilities), and do not copy the input's attributes, which describe the input's
values, not the components'.

Examples
--------
>>> import numpy as np
>>> import xarray as xr
>>> import dsgd_dask
>>> rng = np.random.default_rng(0)
>>> ds = xr.Dataset({"X": (("time", "band"), rng.normal(size=(300, 4)))},
...                 coords={"time": np.arange(300)}, attrs={"units": "K"})
>>> model = ds.dsgd.fit(dsgd_dask.KernelPCA(2, n_features=256, random_state=0), "X")
>>> out = ds.dsgd.transform(model, "X")
>>> out["components"].dims
('time', 'component')
>>> out.attrs, out["components"].attrs
({}, {})
"""

from __future__ import annotations

from collections.abc import Hashable

import xarray as xr

__all__ = ["DSGDDataArrayAccessor", "DSGDDatasetAccessor"]

#: Default names of the outputs, by estimator method.
DEFAULT_NAMES = {"transform": "components", "predict": "prediction", "predict_proba": "probability",
                 "decision_function": "decision"}


def _check_dim(obj: xr.DataArray, arg: str, dim, what: str) -> None:
    if dim is not None and dim not in obj.dims:
        raise ValueError(f"{arg}={dim!r} is not a dimension of {what}; its dimensions are {tuple(obj.dims)}")


def resolve_dims(obj: xr.DataArray, sample_dim=None, feature_dim=None, model=None,
                 what: str = "the DataArray") -> tuple[Hashable, Hashable]:
    """``(sample_dim, feature_dim)`` of ``obj``: given, implied, or those of a fitted model.

    A 2-D array needs neither (its dimensions in order are taken as samples, features),
    or one of them (the other is implied). With more dimensions both are required; the
    others must have length 1. When ``feature_dim`` is not given and ``model`` was
    fitted on a DataArray whose feature dimension ``obj`` has, that dimension is used.

    Raises
    ------
    ValueError
        A named dimension is missing, both names are the same dimension, the array has
        fewer than two dimensions, or which dimensions to use is ambiguous.
    """
    dims = tuple(obj.dims)
    _check_dim(obj, "sample_dim", sample_dim, what)
    _check_dim(obj, "feature_dim", feature_dim, what)
    if obj.ndim < 2:
        raise ValueError(f"{what} has dimensions {dims}: (samples, features) are needed; give a single feature "
                         "a dimension of its own, e.g. .expand_dims('feature', axis=-1)")
    if feature_dim is None and model is not None:
        fitted = getattr(model, "feature_dim_", None)
        if fitted is not None and fitted in dims and fitted != sample_dim:
            feature_dim = fitted
    if sample_dim is not None and sample_dim == feature_dim:
        raise ValueError(f"sample_dim and feature_dim are both {sample_dim!r}; they must be two different "
                         f"dimensions of {what} {dims}")
    if obj.ndim == 2:
        if sample_dim is None and feature_dim is None:
            return dims[0], dims[1]
        if sample_dim is None:
            sample_dim = dims[0] if dims[1] == feature_dim else dims[1]
        if feature_dim is None:
            feature_dim = dims[0] if dims[1] == sample_dim else dims[1]
        return sample_dim, feature_dim
    if sample_dim is None or feature_dim is None:
        missing = " and ".join(a for a, d in (("sample_dim", sample_dim), ("feature_dim", feature_dim)) if d is None)
        raise ValueError(f"{what} has {obj.ndim} dimensions {dims}: pass {missing} to say which dimension "
                         "holds the samples and which the features")
    rest = {d: obj.sizes[d] for d in dims if d not in (sample_dim, feature_dim) and obj.sizes[d] != 1}
    if rest:
        raise ValueError(f"{what} has dimensions {rest} (with their lengths) besides sample_dim={sample_dim!r} and "
                         f"feature_dim={feature_dim!r}; select one position of them (.isel/.sel) or stack them "
                         f"into the features (.stack({feature_dim}_stacked=({feature_dim!r}, ...)))")
    return sample_dim, feature_dim


def as_matrix(obj: xr.DataArray, sample_dim=None, feature_dim=None, model=None,
              what: str = "the DataArray") -> xr.DataArray:
    """``obj`` as a 2-D ``(sample_dim, feature_dim)`` DataArray (length-1 dimensions dropped; lazy).

    See :func:`resolve_dims` for how the dimensions are chosen.
    """
    sdim, fdim = resolve_dims(obj, sample_dim, feature_dim, model, what)
    extra = [d for d in obj.dims if d not in (sdim, fdim)]
    if extra:
        obj = obj.isel(dict.fromkeys(extra, 0), drop=True)
    return obj.transpose(sdim, fdim)


def as_rows(obj, sample_dim: Hashable, like: xr.DataArray | None = None, what: str = "y"):
    """A second view or target with its samples first; anything but a DataArray unchanged.

    A DataArray must have the sample dimension (and at most one other); when both it and
    ``like`` have an index on the sample dimension, the indexes must be equal.
    """
    if not isinstance(obj, xr.DataArray):
        return obj
    dims = tuple(obj.dims)
    if sample_dim not in dims:
        raise ValueError(f"{what} has dimensions {dims}, without the sample dimension {sample_dim!r}")
    if obj.ndim > 2:
        raise ValueError(f"{what} has dimensions {dims}: it must be 1-D ({sample_dim!r},) or 2-D "
                         f"({sample_dim!r}, features)")
    if (like is not None and sample_dim in obj.indexes and sample_dim in like.indexes
            and not obj.indexes[sample_dim].equals(like.indexes[sample_dim])):
        raise ValueError(f"{what} and X have different coordinates along {sample_dim!r}; align them first, "
                         "e.g. X, y = xr.align(X, y, join='inner')")
    return obj.transpose(sample_dim, ...)


def _bare(out, name: Hashable):
    """An output DataArray named ``name`` (the estimators' outputs carry no input attributes)."""
    return out.rename(name) if isinstance(out, xr.DataArray) else out


def _method(model, method: str):
    fn = getattr(model, method, None)
    if fn is None:
        raise TypeError(f"{type(model).__name__} has no {method}()")
    return fn


def _two_names(name, method: str) -> tuple[Hashable, Hashable]:
    if name is None:
        name = DEFAULT_NAMES[method]
    if isinstance(name, tuple | list):
        if len(name) != 2:
            raise ValueError(f"name must be one name or two (one per view), got {name!r}")
        return tuple(name)
    return f"{name}_x", f"{name}_y"


@xr.register_dataarray_accessor("dsgd")
class DSGDDataArrayAccessor:
    """``da.dsgd``: fit and apply dsgd_dask estimators on a DataArray of samples × features.

    ``sample_dim`` and ``feature_dim`` say which dimensions hold the samples and the
    features: a 2-D array needs neither (dimensions in order), a ``(feature, sample)``
    array one of them, an array with more dimensions both (the others must have length
    1). The array is transposed lazily; nothing is computed before the estimator reads it.
    Outputs are DataArrays with dimensions ``(sample_dim, "component")`` (``"class"`` for
    probabilities, ``(sample_dim,)`` for predictions), the sample coordinates of the
    input, no attributes, lazy when the input is dask-backed.

    Examples
    --------
    >>> import numpy as np
    >>> import xarray as xr
    >>> from dsgd_dask import KernelPCA
    >>> X = xr.DataArray(np.random.default_rng(0).normal(size=(3, 200)), dims=("band", "pixel"))
    >>> model = X.dsgd.fit(KernelPCA(2, n_features=128, random_state=0), sample_dim="pixel")
    >>> X.dsgd.transform(model).dims
    ('pixel', 'component')
    """

    def __init__(self, obj: xr.DataArray):
        self._obj = obj

    def _matrix(self, sample_dim, feature_dim, model=None) -> xr.DataArray:
        return as_matrix(self._obj, sample_dim, feature_dim, model)

    def fit(self, estimator, y=None, *, sample_dim=None, feature_dim=None, **fit_params):
        """Fit ``estimator`` on this array's samples.

        Parameters
        ----------
        estimator : dsgd_dask estimator
            Any estimator of the package (or one with the same ``fit``).
        y : DataArray or array-like, optional
            The target (SIR, kernel machines) or the second view (CCA, SVD), row-aligned
            with the samples. A DataArray is oriented by ``sample_dim`` and must have the
            same sample coordinates.
        sample_dim, feature_dim : hashable, optional
            The dimensions of the samples and of the features (see the class notes).
        **fit_params
            Passed to ``estimator.fit`` (e.g. ``callback``).

        Returns
        -------
        estimator
            The fitted estimator (``estimator`` itself).
        """
        X = self._matrix(sample_dim, feature_dim)
        if y is None:
            return estimator.fit(X, **fit_params)
        return estimator.fit(X, as_rows(y, X.dims[0], X, "y"), **fit_params)

    def _apply(self, model, method: str, name, sample_dim, feature_dim):
        X = self._matrix(sample_dim, feature_dim, model)
        return _bare(_method(model, method)(X), DEFAULT_NAMES[method] if name is None else name)

    def transform(self, model, other=None, *, name=None, sample_dim=None, feature_dim=None):
        """The fitted components on this array's samples.

        Parameters
        ----------
        model : fitted transformer
            KernelPCA, KernelSIR, or a two-view estimator (KernelCCA,
            KernelSVD).
        other : DataArray or array-like, optional
            Two-view models: the second view (its dimensions other than the sample one
            are its features); the functions of both views are returned.
        name : hashable or pair of hashables, optional
            Name of the output (default ``"components"``); with ``other``, two names or
            one prefix (default ``("components_x", "components_y")``).
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`; ``feature_dim`` defaults to the model's fitted one.

        Returns
        -------
        DataArray of dims (sample_dim, "component"), or a tuple ``(U, V)`` of two with ``other``
        """
        if other is None:
            return self._apply(model, "transform", name, sample_dim, feature_dim)
        X = self._matrix(sample_dim, feature_dim, model)
        U, V = _method(model, "transform")(X, as_rows(other, X.dims[0], X, "other"))
        nx, ny = _two_names(name, "transform")
        return _bare(U, nx), _bare(V, ny)

    def predict(self, model, *, name=None, sample_dim=None, feature_dim=None):
        """The fitted machine's predictions: dims ``(sample_dim,)``, or ``(sample_dim, "component")`` (multi-output).

        Parameters
        ----------
        model : fitted KernelRidge, KernelSVC or KernelLogisticRegression
        name : hashable, default="prediction"
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        DataArray
        """
        return self._apply(model, "predict", name, sample_dim, feature_dim)

    def predict_proba(self, model, *, name=None, sample_dim=None, feature_dim=None):
        """Class probabilities: a DataArray of dims ``(sample_dim, "class")``, columns in the order of ``classes_``.

        Parameters
        ----------
        model : fitted KernelLogisticRegression
        name : hashable, default="probability"
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        DataArray
        """
        return self._apply(model, "predict_proba", name, sample_dim, feature_dim)

    def decision_function(self, model, *, name=None, sample_dim=None, feature_dim=None):
        """A classifier's outputs ``f(x)``: dims ``(sample_dim,)`` (binary) or ``(sample_dim, "component")``.

        Parameters
        ----------
        model : fitted KernelSVC or KernelLogisticRegression
        name : hashable, default="decision"
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        DataArray
        """
        return self._apply(model, "decision_function", name, sample_dim, feature_dim)


@xr.register_dataset_accessor("dsgd")
class DSGDDatasetAccessor:
    """``ds.dsgd``: fit and apply dsgd_dask estimators on variables of a Dataset.

    Variables are named (``"X"``) or passed as DataArrays. The methods that apply a model
    return a new Dataset holding only the outputs, with the sample coordinates and without
    the input's attributes: merge it (``ds.merge(out)``) or write it next to the input
    (``out.to_zarr(store, mode="a")``). They are lazy on dask-backed variables.

    Examples
    --------
    >>> import numpy as np
    >>> import xarray as xr
    >>> from dsgd_dask import KernelCCA
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(-1, 1, size=300)
    >>> ds = xr.Dataset({"left": (("sample", "a"), np.c_[t, rng.normal(size=300)]),
    ...                  "right": (("sample", "b"), np.c_[t ** 2, rng.normal(size=300)])})
    >>> cca = ds.dsgd.fit(KernelCCA(2, n_features=128, max_iter=50, random_state=0), "left", Y="right")
    >>> sorted(ds.dsgd.transform(cca, "left", Y="right").data_vars)
    ['components_x', 'components_y']
    """

    def __init__(self, obj: xr.Dataset):
        self._obj = obj

    def _variable(self, key, what: str):
        if isinstance(key, xr.DataArray):
            return key
        try:
            var = self._obj[key]
        except (KeyError, TypeError):
            var = None
        if not isinstance(var, xr.DataArray):
            raise ValueError(f"{what}={key!r} is not a variable of the Dataset; its variables are "
                             f"{list(self._obj.data_vars)}")
        return var

    def _matrix(self, X, sample_dim, feature_dim, model=None) -> xr.DataArray:
        return as_matrix(self._variable(X, "X"), sample_dim, feature_dim, model, what=f"variable {X!r}")

    def _second(self, key, what: str, X: xr.DataArray):
        if isinstance(key, Hashable) and not isinstance(key, xr.DataArray):
            key = self._variable(key, what)
        return as_rows(key, X.dims[0], X, what)

    def fit(self, estimator, X, y=None, *, Y=None, sample_dim=None, feature_dim=None, **fit_params):
        """Fit ``estimator`` on the variable ``X`` (and ``y`` or ``Y``).

        Parameters
        ----------
        estimator : dsgd_dask estimator
        X : hashable or DataArray
            The variable of the samples × features.
        y : hashable, DataArray or array-like, optional
            The target (SIR, kernel machines): a variable name, or values row-aligned with
            ``X``.
        Y : hashable, DataArray or array-like, optional
            The second view (CCA, SVD); same kinds as ``y``. Pass ``y`` or ``Y``, not both.
        sample_dim, feature_dim : hashable, optional
            The dimensions of the samples and the features of ``X``: needed when ``X`` has
            more than two dimensions or is stored (features, samples) (see
            :class:`DSGDDataArrayAccessor`).
        **fit_params
            Passed to ``estimator.fit``.

        Returns
        -------
        estimator
            The fitted estimator.
        """
        if y is not None and Y is not None:
            raise ValueError("pass y (a target) or Y (a second view), not both")
        second = Y if Y is not None else y
        data = self._matrix(X, sample_dim, feature_dim)
        if second is None:
            return estimator.fit(data, **fit_params)
        return estimator.fit(data, self._second(second, "Y" if Y is not None else "y", data), **fit_params)

    def _apply(self, model, method: str, X, name, sample_dim, feature_dim) -> xr.Dataset:
        data = self._matrix(X, sample_dim, feature_dim, model)
        name = DEFAULT_NAMES[method] if name is None else name
        return xr.Dataset({name: _bare(_method(model, method)(data), name)})

    def transform(self, model, X, Y=None, *, name=None, sample_dim=None, feature_dim=None) -> xr.Dataset:
        """The fitted components on the variable ``X`` (and ``Y`` for two-view models), as a new Dataset.

        Parameters
        ----------
        model : fitted transformer
        X : hashable or DataArray
        Y : hashable, DataArray or array-like, optional
            Two-view models: the second view.
        name : hashable or pair of hashables, optional
            Name of the output variable (default ``"components"``); with ``Y``, two names
            or one prefix (default ``"components_x"``, ``"components_y"``).
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`; ``feature_dim`` defaults to the model's fitted one.

        Returns
        -------
        Dataset
            The output variable(s), dims ``(sample_dim, "component")``, with the sample
            coordinates; lazy on dask-backed input.
        """
        if Y is None:
            return self._apply(model, "transform", X, name, sample_dim, feature_dim)
        data = self._matrix(X, sample_dim, feature_dim, model)
        U, V = _method(model, "transform")(data, self._second(Y, "Y", data))
        nx, ny = _two_names(name, "transform")
        return xr.Dataset({nx: _bare(U, nx), ny: _bare(V, ny)})

    def predict(self, model, X, *, name=None, sample_dim=None, feature_dim=None) -> xr.Dataset:
        """Predictions of a fitted machine on the variable ``X``: a Dataset with ``name`` (default ``"prediction"``).

        Parameters
        ----------
        model : fitted KernelRidge, KernelSVC or KernelLogisticRegression
        X : hashable or DataArray
        name : hashable, default="prediction"
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        Dataset
        """
        return self._apply(model, "predict", X, name, sample_dim, feature_dim)

    def predict_proba(self, model, X, *, name=None, sample_dim=None, feature_dim=None) -> xr.Dataset:
        """Class probabilities on the variable ``X``: dims ``(sample_dim, "class")``, name ``"probability"``.

        Parameters
        ----------
        model : fitted KernelLogisticRegression
        X : hashable or DataArray
        name : hashable, default="probability"
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        Dataset
        """
        return self._apply(model, "predict_proba", X, name, sample_dim, feature_dim)

    def decision_function(self, model, X, *, name=None, sample_dim=None, feature_dim=None) -> xr.Dataset:
        """A classifier's outputs ``f(x)`` on the variable ``X`` (name ``"decision"``).

        Parameters
        ----------
        model : fitted KernelSVC or KernelLogisticRegression
        X : hashable or DataArray
        name : hashable, default="decision"
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        Dataset
        """
        return self._apply(model, "decision_function", X, name, sample_dim, feature_dim)
