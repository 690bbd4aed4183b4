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
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

__all__ = ["DSGDDataArrayAccessor", "DSGDDatasetAccessor"]

#: Default names of the outputs, by estimator method.
DEFAULT_NAMES = {"transform": "components", "predict": "prediction", "predict_proba": "probability",
                 "decision_function": "decision", "patterns": "patterns"}


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
                         "holds the samples and which the features, or dim= (the sample dimensions; every "
                         "other dimension is a feature)")
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


# -- fields: samples along ``dim``, every other dimension a feature ----------------------------


def _is_two_view(model) -> bool:
    from dsgd_dask.estimators.two_view import _TwoViewEstimator

    return isinstance(model, _TwoViewEstimator)


def _dim_tuple(obj: xr.DataArray, dim, what: str) -> tuple:
    dims = tuple(dim) if isinstance(dim, tuple | list) else (dim,)
    missing = [d for d in dims if d not in obj.dims]
    if not dims or missing:
        raise ValueError(f"dim={dim!r}: {missing or 'nothing'} is not a dimension of {what}; its dimensions are "
                         f"{tuple(obj.dims)}")
    if len(set(dims)) != len(dims):
        raise ValueError(f"dim={dim!r} names a dimension twice")
    if len(dims) == obj.ndim:
        raise ValueError(f"dim={dim!r} takes every dimension of {what} {tuple(obj.dims)} as samples: no dimension "
                         "is left for the features")
    return dims


def _index(obj: xr.DataArray, d) -> pd.Index:
    return (obj.indexes[d] if d in obj.indexes else pd.RangeIndex(obj.sizes[d])).rename(d)


def _joint_index(obj: xr.DataArray, dims: tuple) -> pd.Index:
    if len(dims) == 1:
        return _index(obj, dims[0])
    return pd.MultiIndex.from_product([_index(obj, d) for d in dims], names=list(dims))


def _point(index: pd.Index, k: int) -> str:
    """``"lat=-22.5, lon=117.5"``: the coordinates of position ``k`` of ``index``."""
    if isinstance(index, pd.MultiIndex):
        return ", ".join(f"{n}={v}" for n, v in zip(index.names, index[k], strict=True))
    return f"{index.name}={index[k]}"


def _labels(index: pd.Index) -> np.ndarray:
    """The feature coordinate handed to the estimators: the values, or ``"lat=..., lon=..."`` strings when stacked."""
    if isinstance(index, pd.MultiIndex):
        return np.array([_point(index, k) for k in range(len(index))], dtype=str)
    return np.asarray(index.values)


def _free_name(obj: xr.DataArray, name: str) -> str:
    while name in obj.dims or name in obj.coords:
        name += "_"
    return name


def _check_weights(obj: xr.DataArray, weights, feature_dims: tuple, what: str) -> xr.DataArray:
    if not isinstance(weights, xr.DataArray):
        raise TypeError(f"weights must be a DataArray over feature dimensions of {what} {feature_dims} (e.g. "
                        f"np.sqrt(np.cos(np.deg2rad(field['lat'])))), got {type(weights).__name__}")
    extra = [d for d in weights.dims if d not in feature_dims]
    if extra:
        raise ValueError(f"weights has dimensions {extra} that are not feature dimensions of {what} {feature_dims}")
    for d in weights.dims:
        if weights.sizes[d] != obj.sizes[d] or (d in weights.indexes and d in obj.indexes
                                                and not weights.indexes[d].equals(obj.indexes[d])):
            raise ValueError(f"weights and {what} have different lengths or coordinates along {d!r}; give weights "
                             "on the field's own grid (e.g. computed from its coordinates)")
    return weights


def _finite_chunk(block: np.ndarray, index, block_info=None) -> np.ndarray:
    """``block`` unchanged, or a ``ValueError`` naming the coordinates of its first NaN or infinity."""
    if block.dtype.kind == "f" and not np.isfinite(block).all():
        i, j = np.argwhere(~np.isfinite(block))[0]
        loc = block_info[0]["array-location"] if block_info else ((0, 0), (0, 0))
        samples, features = index
        value = "NaN" if np.isnan(block[i, j]) else "infinity"
        raise ValueError(f"the field holds {value} at {_point(samples, loc[0][0] + i)}, "
                         f"{_point(features, loc[1][0] + j)}, a point that is not NaN at every sample (only those "
                         "are masked); fill or drop these values, or set the point to NaN at every sample to mask it")
    return block


@dataclass
class Field:
    """A labelled field read as the 2-D ``(sample, feature)`` matrix the estimators take.

    ``matrix`` holds the kept feature points only (the points NaN at every sample, found
    at fit, are dropped), weighted, with a check that names the coordinates of any other
    NaN when a chunk is read. ``kept`` are the positions of the kept points among all the
    points of the feature dimensions (C order of ``feature_dims``).
    """

    obj: xr.DataArray
    matrix: xr.DataArray
    sample_dims: tuple
    feature_dims: tuple
    samples: pd.Index
    kept: np.ndarray

    @property
    def kept_grid(self) -> xr.DataArray:
        """A boolean DataArray over the feature dimensions: True at the kept points."""
        shape = tuple(self.obj.sizes[d] for d in self.feature_dims)
        grid = np.zeros(int(np.prod(shape)), dtype=bool)
        grid[self.kept] = True
        coords = {d: self.obj.indexes[d] for d in self.feature_dims if d in self.obj.indexes}
        return xr.DataArray(grid.reshape(shape), dims=self.feature_dims, coords=coords)

    def outputs(self, out):
        """An output of the estimator (dims ``(sample, ...)``) on the field's sample dimensions and coordinates."""
        if not isinstance(out, xr.DataArray) or len(self.sample_dims) == 1:
            return out
        sdim = out.dims[0]
        out = out.assign_coords(xr.Coordinates.from_pandas_multiindex(self.samples, sdim)).unstack(sdim)
        order = {d: self.obj.indexes[d] for d in self.sample_dims
                 if d in self.obj.indexes and not out.indexes[d].equals(self.obj.indexes[d])}
        if order:  # unstacking sorts the coordinates: back to the field's order
            out = out.reindex(order)
        out = out.drop_vars([d for d in self.sample_dims if d not in self.obj.indexes])
        out = out.transpose(*self.sample_dims, ...)
        extra = {k: v for k, v in self.obj.coords.items()
                 if k not in out.coords and set(v.dims) <= set(self.sample_dims)}
        return out.assign_coords(extra)


def as_field(obj: xr.DataArray, dim, fitted=None, weights=None, what: str = "the DataArray",
             fitted_dim=None) -> Field:
    """``obj`` as a :class:`Field`: samples along ``dim`` (one or several dimensions), features all the others.

    The sample dimensions (when several) and the feature dimensions (when several) are
    stacked lazily, into ``"sample"`` and ``"feature"``; a stacked feature dimension has
    the coordinates ``"lat=-22.5, lon=117.5"`` as strings, which the estimators record and
    check. ``fitted`` are the fitted feature coordinates (``feature_coords_``): the same
    points are kept, in the same order. Without them (at fit), the points NaN at every
    sample are found (one reduction over the samples, computed now) and dropped.
    ``weights`` multiply the field (broadcast over the feature dimensions). ``fitted_dim``
    is the model's feature dimension, which the field's features must stack into.
    """
    if not isinstance(obj, xr.DataArray):
        raise TypeError(f"{what} must be a DataArray, got {type(obj).__name__}")
    sample_dims = _dim_tuple(obj, dim, what)
    feature_dims = tuple(d for d in obj.dims if d not in sample_dims)
    field = obj
    if weights is not None:
        field = obj * _check_weights(obj, weights, feature_dims, what)
    data = field.transpose(*sample_dims, *feature_dims).data
    n_samples = int(np.prod([obj.sizes[d] for d in sample_dims]))
    data = data.reshape(n_samples, int(np.prod([obj.sizes[d] for d in feature_dims])))
    samples, features = _joint_index(obj, sample_dims), _joint_index(obj, feature_dims)
    sdim = sample_dims[0] if len(sample_dims) == 1 else _free_name(obj, "sample")
    fdim = feature_dims[0] if len(feature_dims) == 1 else _free_name(obj, "feature")
    if fitted_dim is not None and fitted_dim != fdim:
        raise ValueError(f"the model was fitted on the feature dimension {fitted_dim!r}, but the features of {what} "
                         f"{feature_dims} stack into {fdim!r}; give dim= so that the same dimensions are features")
    labels = _labels(features)
    if fitted is None:
        empty = da.isnan(data).all(axis=0).compute() if isinstance(data, da.Array) else np.isnan(data).all(axis=0)
        kept = np.flatnonzero(~np.asarray(empty, dtype=bool))
        if not kept.size:
            raise ValueError(f"{what} is NaN at every point of {feature_dims} at every sample: nothing to fit")
    elif not features.is_unique:
        kept = np.arange(len(labels))
    else:
        kept = pd.Index(labels).get_indexer(np.asarray(fitted))
        if (kept < 0).any():
            lost = np.asarray(fitted)[kept < 0]
            raise ValueError(f"{what} lacks {lost.size} feature points the model was fitted on (first: "
                             f"{lost[0].item()!r} along {feature_dims}); give a field on the grid it was fitted on")
    if kept.size != len(labels) or (kept != np.arange(len(labels))).any():
        data = data[:, kept]
    if isinstance(data, da.Array):
        data = data.map_blocks(_finite_chunk, dask.delayed((samples, features[kept]), traverse=False),
                               dtype=data.dtype, meta=np.empty((0, 0), dtype=data.dtype))
    else:
        _finite_chunk(data, (samples, features[kept]))
    coords = {} if len(sample_dims) > 1 else {
        k: v.variable for k, v in obj.coords.items() if set(v.dims) <= {sdim}}
    coords[fdim] = labels[kept]
    matrix = xr.DataArray(data, dims=(sdim, fdim), coords=coords, name=obj.name)
    return Field(obj, matrix, sample_dims, feature_dims, samples, kept)


def as_target(y, sample_dims: tuple, field: Field, what: str = "y"):
    """A target or second view (not a field) with the field's samples first, several sample dimensions stacked."""
    if not isinstance(y, xr.DataArray) or len(sample_dims) == 1:
        return as_rows(y, field.matrix.dims[0], field.matrix, what)
    missing = [d for d in sample_dims if d not in y.dims]
    if missing:
        raise ValueError(f"{what} has dimensions {tuple(y.dims)}, without the sample dimensions {missing}")
    for d in sample_dims:
        if d in y.indexes and d in field.obj.indexes and not y.indexes[d].equals(field.obj.indexes[d]):
            raise ValueError(f"{what} and X have different coordinates along {d!r}; align them first, "
                             "e.g. X, y = xr.align(X, y, join='inner')")
    rest = [d for d in y.dims if d not in sample_dims]
    if len(rest) > 1:
        raise ValueError(f"{what} has dimensions {tuple(y.dims)}: at most one besides the sample dimensions "
                         f"{sample_dims}")
    sdim = field.matrix.dims[0]
    data = y.transpose(*sample_dims, *rest).data
    data = data.reshape(len(field.samples), *[y.sizes[d] for d in rest])
    return xr.DataArray(data, dims=(sdim, *rest))


def _same_samples(fy: Field, field: Field, what: str) -> None:
    for d in field.sample_dims:
        if fy.obj.sizes[d] != field.obj.sizes[d] or (d in fy.obj.indexes and d in field.obj.indexes
                                                    and not fy.obj.indexes[d].equals(field.obj.indexes[d])):
            raise ValueError(f"{what} and X have different lengths or coordinates along {d!r}; align them first, "
                             "e.g. X, Y = xr.align(X, Y, join='inner')")


def _fitted_y(model):
    """The second view's fitted feature coordinates, when :func:`fit_field` recorded them."""
    coords = getattr(model, "xarray_feature_coords_y_", None)
    if coords is None or len(coords) != getattr(model, "n_features_in_y_", -1):
        return None
    return coords


def _second_field(model, other, dim, weights_y, what: str, fitting: bool = False) -> Field:
    fitted = None if fitting else _fitted_y(model)
    return as_field(other, dim, fitted, weights_y, what)


def model_field(model, obj: xr.DataArray, dim, weights, what: str) -> Field:
    """The field ``obj`` for the fitted ``model``: its fitted feature points, in its order."""
    return as_field(obj, dim, getattr(model, "feature_coords_", None), weights, what,
                    getattr(model, "feature_dim_", None))


def fit_field(estimator, X: xr.DataArray, y, dim, weights, weights_y, what: str, fit_params: dict,
              second: str = "y"):
    """Fit ``estimator`` on the field ``X`` (samples along ``dim``); ``y`` a target, or a second field (two views)."""
    field = as_field(X, dim, None, weights, what)
    if hasattr(estimator, "xarray_feature_coords_y_"):
        del estimator.xarray_feature_coords_y_
    if y is None:
        return estimator.fit(field.matrix, **fit_params)
    if _is_two_view(estimator) and isinstance(y, xr.DataArray):
        fy = _second_field(estimator, y, dim, weights_y, second, fitting=True)
        _same_samples(fy, field, second)
        estimator.fit(field.matrix, fy.matrix, **fit_params)
        estimator.xarray_feature_coords_y_ = fy.matrix[fy.matrix.dims[1]].values
        return estimator
    return estimator.fit(field.matrix, as_target(y, field.sample_dims, field, second), **fit_params)


def regression_maps(field: xr.DataArray, scores: xr.DataArray, sample_dims: tuple, kind: str,
                    kept: xr.DataArray) -> xr.DataArray:
    """Each component's regression (``cov(field, score) / var(score)``) or correlation map of ``field``.

    Sums over the samples of the field, the scores, their squares and products: one pass
    over the field (lazy on dask), shifted by the field's first sample for accuracy.
    NaN where ``kept`` is False.
    """
    n = int(np.prod([field.sizes[d] for d in sample_dims]))
    f = field - field.isel(dict.fromkeys(sample_dims, 0), drop=True)
    f = f.drop_vars([k for k, v in f.coords.items() if set(v.dims) & set(sample_dims)])
    s = scores.drop_vars([k for k, v in scores.coords.items() if set(v.dims) & set(sample_dims)])
    sf, ss = f.sum(sample_dims, skipna=False), s.sum(sample_dims, skipna=False)
    cov = ((f * s).sum(sample_dims, skipna=False) - sf * ss / n) / n
    var_s = ((s * s).sum(sample_dims, skipna=False) - ss * ss / n) / n
    if kind == "regression":
        maps = cov / var_s
    else:
        var_f = ((f * f).sum(sample_dims, skipna=False) - sf * sf / n) / n
        maps = cov / np.sqrt(var_f * var_s)
    maps = maps.where(kept).transpose(scores.dims[-1], *[d for d in field.dims if d not in sample_dims])
    return maps.drop_attrs()


_KINDS = ("regression", "correlation")


def field_patterns(model, X: xr.DataArray, other, dim, kind, weights, weights_y, names, what: str,
                   second: str = "other"):
    """The patterns of ``model`` on ``X`` (and on ``other``, two views): see ``DSGDDataArrayAccessor.patterns``."""
    if kind not in _KINDS:
        raise ValueError(f"kind={kind!r}: use 'regression' or 'correlation'")
    field = model_field(model, X, dim, weights, what)
    if other is None:
        if _is_two_view(model):
            raise ValueError(f"{type(model).__name__} has two views: give the second view's field as "
                             f"{second}= to have a map per view")
        scores = field.outputs(_method(model, "transform")(field.matrix))
        return (_maps(field, scores, kind, names[0]),)
    fy = _second_field(model, other, dim, weights_y, second)
    _same_samples(fy, field, second)
    U, V = _method(model, "transform")(field.matrix, fy.matrix)
    return (_maps(field, field.outputs(U), kind, names[0]), _maps(fy, fy.outputs(V), kind, names[1]))


def _maps(field: Field, scores, kind: str, name) -> xr.DataArray:
    return regression_maps(field.obj, scores, field.sample_dims, kind, field.kept_grid).rename(name)


def transform_fields(model, X: xr.DataArray, other, dim, weights, weights_y, what: str, second: str):
    """``(U, V)``: a two-view model's functions on the field ``X`` and the second view's field ``other``."""
    field = model_field(model, X, dim, weights, what)
    fy = _second_field(model, other, dim, weights_y, second)
    _same_samples(fy, field, second)
    U, V = _method(model, "transform")(field.matrix, fy.matrix)
    return field.outputs(U), fy.outputs(V)


def _check_api(dim, sample_dim, feature_dim, weights, weights_y=None) -> None:
    if dim is not None and (sample_dim is not None or feature_dim is not None):
        raise ValueError("pass dim= (the sample dimensions; all others are features) or sample_dim/feature_dim, "
                         "not both")
    if dim is None and (weights is not None or weights_y is not None):
        raise ValueError("weights need dim= (the sample dimensions): they are given over the feature dimensions")


_FIELD_PARAMS = """dim : hashable or sequence of hashables, optional
            The sample dimension(s) of a field: every other dimension is a feature, the
            feature points NaN at every sample (a land mask) are dropped, as at fit.
            Outputs keep the sample dimensions and their coordinates. Not with
            ``sample_dim``/``feature_dim``.
        weights : DataArray, optional
            With ``dim``: weights over the feature dimensions multiplying the field (the
            same as at fit)."""


@xr.register_dataarray_accessor("dsgd")
class DSGDDataArrayAccessor:
    """``da.dsgd``: fit and apply dsgd_dask estimators on a DataArray of samples × features.

    Two ways to say which dimensions hold the samples and which the features:

    * ``dim``: the sample dimension(s) of a field, e.g. ``dim="time"`` on a
      ``(time, lat, lon)`` array; every other dimension is a feature. Several feature
      (or sample) dimensions are stacked lazily, the feature points NaN at every sample
      (a land mask) are dropped at fit and at transform, and optional ``weights`` over
      the feature dimensions multiply the field. Outputs keep the sample dimensions and
      coordinates (several are unstacked back); :meth:`patterns` gives the maps.
    * ``sample_dim`` and ``feature_dim``: one dimension each. A 2-D array needs neither
      (dimensions in order), a ``(feature, sample)`` array one of them, an array with
      more dimensions both (the others must have length 1).

    The array is transposed lazily; nothing is computed before the estimator reads it
    (with ``dim``, fitting computes the mask once: one reduction over the samples).
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

    def fit(self, estimator, y=None, *, dim=None, weights=None, weights_y=None, sample_dim=None, feature_dim=None,
            **fit_params):
        """Fit ``estimator`` on this array's samples.

        Parameters
        ----------
        estimator : dsgd_dask estimator
            Any estimator of the package (or one with the same ``fit``).
        y : DataArray or array-like, optional
            The target (SIR, kernel machines) or the second view (CCA, SVD), row-aligned
            with the samples. A DataArray is oriented by the sample dimension(s) and must
            have the same sample coordinates; with ``dim``, a second view is a field of
            its own (its other dimensions are its features, its mask dropped).
        {field}
        weights_y : DataArray, optional
            With ``dim``: the second view's weights.
        sample_dim, feature_dim : hashable, optional
            The dimensions of the samples and of the features (see the class notes).
        **fit_params
            Passed to ``estimator.fit`` (e.g. ``callback``).

        Returns
        -------
        estimator
            The fitted estimator (``estimator`` itself).
        """
        _check_api(dim, sample_dim, feature_dim, weights, weights_y)
        if dim is not None:
            return fit_field(estimator, self._obj, y, dim, weights, weights_y, "the DataArray", fit_params)
        X = self._matrix(sample_dim, feature_dim)
        if y is None:
            return estimator.fit(X, **fit_params)
        return estimator.fit(X, as_rows(y, X.dims[0], X, "y"), **fit_params)

    def _apply(self, model, method: str, name, sample_dim, feature_dim, dim=None, weights=None):
        _check_api(dim, sample_dim, feature_dim, weights)
        name = DEFAULT_NAMES[method] if name is None else name
        if dim is not None:
            field = model_field(model, self._obj, dim, weights, "the DataArray")
            return _bare(field.outputs(_method(model, method)(field.matrix)), name)
        X = self._matrix(sample_dim, feature_dim, model)
        return _bare(_method(model, method)(X), name)

    def transform(self, model, other=None, *, name=None, dim=None, weights=None, weights_y=None, sample_dim=None,
                  feature_dim=None):
        """The fitted components on this array's samples.

        Parameters
        ----------
        model : fitted transformer
            KernelPCA, KernelSIR, or a two-view estimator (KernelCCA,
            KernelSVD).
        other : DataArray or array-like, optional
            Two-view models: the second view (its dimensions other than the sample ones
            are its features); the functions of both views are returned.
        name : hashable or pair of hashables, optional
            Name of the output (default ``"components"``); with ``other``, two names or
            one prefix (default ``("components_x", "components_y")``).
        {field}
        weights_y : DataArray, optional
            With ``dim`` and ``other``: the second view's weights.
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`; ``feature_dim`` defaults to the model's fitted one.

        Returns
        -------
        DataArray of dims (sample dims..., "component"), or a tuple ``(U, V)`` of two with ``other``
        """
        if other is None:
            _check_api(dim, sample_dim, feature_dim, weights, weights_y)
            return self._apply(model, "transform", name, sample_dim, feature_dim, dim, weights)
        _check_api(dim, sample_dim, feature_dim, weights, weights_y)
        nx, ny = _two_names(name, "transform")
        if dim is not None:
            U, V = transform_fields(model, self._obj, other, dim, weights, weights_y, "the DataArray", "other")
            return _bare(U, nx), _bare(V, ny)
        X = self._matrix(sample_dim, feature_dim, model)
        U, V = _method(model, "transform")(X, as_rows(other, X.dims[0], X, "other"))
        return _bare(U, nx), _bare(V, ny)

    def patterns(self, model, other=None, *, dim, kind="regression", name=None, weights=None, weights_y=None):
        """The spatial patterns of the components: each one's regression or correlation map of this field.

        The map of component ``k`` at a feature point is ``cov(field, score_k) /
        var(score_k)`` (``kind="regression"``, in the field's units per unit score) or the
        correlation of the field with ``score_k`` (``kind="correlation"``), over the
        samples, where the scores are :meth:`transform`'s (of the weighted field); the
        field regressed is this array, unweighted. Lazy on dask-backed input: the scores
        and the sums over the samples are computed in one pass over the field when the
        result is.

        Parameters
        ----------
        model : fitted KernelPCA, KernelSIR, KernelCCA or KernelSVD
            Fitted on a field with ``dim`` (the same grid).
        other : DataArray, optional
            Two-view models: the second view's field; one map per view is returned.
        dim : hashable or sequence of hashables
            The sample dimension(s); every other dimension is a feature.
        kind : {"regression", "correlation"}, default="regression"
        name : hashable or pair of hashables, optional
            Default ``"patterns"`` (``("patterns_x", "patterns_y")`` with ``other``).
        weights, weights_y : DataArray, optional
            The weights given at fit (to compute the scores).

        Returns
        -------
        DataArray of dims ``("component", feature dims...)``, or a tuple of two with ``other``
            With the feature coordinates; NaN exactly at the points dropped at fit (the
            mask), and no attributes.
        """
        if other is None:
            return field_patterns(model, self._obj, None, dim, kind, weights, None,
                                  (DEFAULT_NAMES["patterns"] if name is None else name,), "the DataArray")[0]
        return field_patterns(model, self._obj, other, dim, kind, weights, weights_y, _two_names(name, "patterns"),
                              "the DataArray")

    def predict(self, model, *, name=None, dim=None, weights=None, sample_dim=None, feature_dim=None):
        """The fitted machine's predictions: dims ``(sample_dim,)``, or ``(sample_dim, "component")`` (multi-output).

        Parameters
        ----------
        model : fitted KernelRidge, KernelSVC or KernelLogisticRegression
        name : hashable, default="prediction"
        {field}
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        DataArray
        """
        return self._apply(model, "predict", name, sample_dim, feature_dim, dim, weights)

    def predict_proba(self, model, *, name=None, dim=None, weights=None, sample_dim=None, feature_dim=None):
        """Class probabilities: a DataArray of dims ``(sample_dim, "class")``, columns in the order of ``classes_``.

        Parameters
        ----------
        model : fitted KernelLogisticRegression
        name : hashable, default="probability"
        {field}
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        DataArray
        """
        return self._apply(model, "predict_proba", name, sample_dim, feature_dim, dim, weights)

    def decision_function(self, model, *, name=None, dim=None, weights=None, sample_dim=None, feature_dim=None):
        """A classifier's outputs ``f(x)``: dims ``(sample_dim,)`` (binary) or ``(sample_dim, "component")``.

        Parameters
        ----------
        model : fitted KernelSVC or KernelLogisticRegression
        name : hashable, default="decision"
        {field}
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        DataArray
        """
        return self._apply(model, "decision_function", name, sample_dim, feature_dim, dim, weights)


@xr.register_dataset_accessor("dsgd")
class DSGDDatasetAccessor:
    """``ds.dsgd``: fit and apply dsgd_dask estimators on variables of a Dataset.

    Variables are named (``"X"``) or passed as DataArrays. The methods that apply a model
    return a new Dataset holding only the outputs, with the sample coordinates and without
    the input's attributes: merge it (``ds.merge(out)``) or write it next to the input
    (``out.to_zarr(store, mode="a")``). They are lazy on dask-backed variables. ``dim``
    (the sample dimensions of a field), ``weights`` and :meth:`patterns` are as on the
    DataArray accessor (:class:`DSGDDataArrayAccessor`).

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

    def _named(self, key, what: str):
        """A variable by name, or a DataArray; anything else unchanged."""
        if key is not None and isinstance(key, Hashable) and not isinstance(key, xr.DataArray):
            return self._variable(key, what)
        return key

    @staticmethod
    def _what(X) -> str:
        return "the DataArray X" if isinstance(X, xr.DataArray) else f"variable {X!r}"

    def fit(self, estimator, X, y=None, *, Y=None, dim=None, weights=None, weights_y=None, sample_dim=None,
            feature_dim=None, **fit_params):
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
            With ``dim``, a field of its own (its mask dropped).
        {field}
        weights_y : DataArray, optional
            With ``dim``: the weights of ``Y``.
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
        _check_api(dim, sample_dim, feature_dim, weights, weights_y)
        second = Y if Y is not None else y
        which = "Y" if Y is not None else "y"
        if dim is not None:
            return fit_field(estimator, self._variable(X, "X"), self._named(second, which), dim, weights, weights_y,
                             self._what(X), fit_params, which)
        data = self._matrix(X, sample_dim, feature_dim)
        if second is None:
            return estimator.fit(data, **fit_params)
        return estimator.fit(data, self._second(second, which, data), **fit_params)

    def _apply(self, model, method: str, X, name, sample_dim, feature_dim, dim=None, weights=None) -> xr.Dataset:
        _check_api(dim, sample_dim, feature_dim, weights)
        name = DEFAULT_NAMES[method] if name is None else name
        if dim is not None:
            field = model_field(model, self._variable(X, "X"), dim, weights, self._what(X))
            return xr.Dataset({name: _bare(field.outputs(_method(model, method)(field.matrix)), name)})
        data = self._matrix(X, sample_dim, feature_dim, model)
        return xr.Dataset({name: _bare(_method(model, method)(data), name)})

    def transform(self, model, X, Y=None, *, name=None, dim=None, weights=None, weights_y=None, sample_dim=None,
                  feature_dim=None) -> xr.Dataset:
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
        {field}
        weights_y : DataArray, optional
            With ``dim`` and ``Y``: the weights of ``Y``.
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`; ``feature_dim`` defaults to the model's fitted one.

        Returns
        -------
        Dataset
            The output variable(s), dims ``(sample dims..., "component")``, with the sample
            coordinates; lazy on dask-backed input.
        """
        _check_api(dim, sample_dim, feature_dim, weights, weights_y)
        if Y is None:
            return self._apply(model, "transform", X, name, sample_dim, feature_dim, dim, weights)
        nx, ny = _two_names(name, "transform")
        if dim is not None:
            U, V = transform_fields(model, self._variable(X, "X"), self._named(Y, "Y"), dim, weights, weights_y,
                                    self._what(X), "Y")
            return xr.Dataset({nx: _bare(U, nx), ny: _bare(V, ny)})
        data = self._matrix(X, sample_dim, feature_dim, model)
        U, V = _method(model, "transform")(data, self._second(Y, "Y", data))
        return xr.Dataset({nx: _bare(U, nx), ny: _bare(V, ny)})

    def patterns(self, model, X, Y=None, *, dim, kind="regression", name=None, weights=None,
                 weights_y=None) -> xr.Dataset:
        """The components' regression or correlation maps of the variable ``X`` (and ``Y``), as a new Dataset.

        As :meth:`DSGDDataArrayAccessor.patterns`: variables of dims ``("component",
        feature dims...)``, NaN at the mask, lazy on dask-backed input (write them with
        ``to_zarr``).

        Parameters
        ----------
        model : fitted KernelPCA, KernelSIR, KernelCCA or KernelSVD
        X : hashable or DataArray
        Y : hashable or DataArray, optional
            Two-view models: the second view's field.
        dim : hashable or sequence of hashables
            The sample dimension(s).
        kind : {"regression", "correlation"}, default="regression"
        name : hashable or pair of hashables, optional
            Default ``"patterns"`` (``"patterns_x"``, ``"patterns_y"`` with ``Y``).
        weights, weights_y : DataArray, optional
            The weights given at fit.

        Returns
        -------
        Dataset
        """
        names = (DEFAULT_NAMES["patterns"] if name is None else name,) if Y is None else _two_names(name, "patterns")
        maps = field_patterns(model, self._variable(X, "X"), None if Y is None else self._named(Y, "Y"), dim, kind,
                              weights, weights_y, names, self._what(X), "Y")
        return xr.Dataset({m.name: m for m in maps})

    def predict(self, model, X, *, name=None, dim=None, weights=None, sample_dim=None,
                feature_dim=None) -> xr.Dataset:
        """Predictions of a fitted machine on the variable ``X``: a Dataset with ``name`` (default ``"prediction"``).

        Parameters
        ----------
        model : fitted KernelRidge, KernelSVC or KernelLogisticRegression
        X : hashable or DataArray
        name : hashable, default="prediction"
        {field}
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        Dataset
        """
        return self._apply(model, "predict", X, name, sample_dim, feature_dim, dim, weights)

    def predict_proba(self, model, X, *, name=None, dim=None, weights=None, sample_dim=None,
                      feature_dim=None) -> xr.Dataset:
        """Class probabilities on the variable ``X``: dims ``(sample_dim, "class")``, name ``"probability"``.

        Parameters
        ----------
        model : fitted KernelLogisticRegression
        X : hashable or DataArray
        name : hashable, default="probability"
        {field}
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        Dataset
        """
        return self._apply(model, "predict_proba", X, name, sample_dim, feature_dim, dim, weights)

    def decision_function(self, model, X, *, name=None, dim=None, weights=None, sample_dim=None,
                          feature_dim=None) -> xr.Dataset:
        """A classifier's outputs ``f(x)`` on the variable ``X`` (name ``"decision"``).

        Parameters
        ----------
        model : fitted KernelSVC or KernelLogisticRegression
        X : hashable or DataArray
        name : hashable, default="decision"
        {field}
        sample_dim, feature_dim : hashable, optional
            As in :meth:`fit`.

        Returns
        -------
        Dataset
        """
        return self._apply(model, "decision_function", X, name, sample_dim, feature_dim, dim, weights)


for _cls in (DSGDDataArrayAccessor, DSGDDatasetAccessor):
    for _fn in vars(_cls).values():
        if callable(_fn) and _fn.__doc__ and "{field}" in _fn.__doc__:
            _fn.__doc__ = _fn.__doc__.replace("{field}", _FIELD_PARAMS)
