"""What every random-feature estimator shares: input validation, seeds, kernel set-up."""

from __future__ import annotations

import functools
import inspect
import re

import numpy as np
from sklearn.utils.validation import validate_data

from dsgd_dask._validation import root_seed
from dsgd_dask.features.bandwidth import MEDIAN_SAMPLE, DataScale, check_resolution, check_scale, median_bandwidth
from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.features.kernels import KernelSpec, parse_kernel
from dsgd_dask.model.store import using_storage_options
from dsgd_dask.streams.inputs import (
    DataView,
    as_view,
    check_dtype,
    check_finite_block,
    is_lazy_input,
    numeric_array,
    paired_views,
)


class RandomFeatureEstimatorMixin:
    """Input validation and feature set-up shared by the dsgd_dask estimators.

    Expects the parameters ``kernel``, ``bandwidth``, ``kernel_params``, ``block_size``,
    ``compute_dtype``, ``cache_bytes`` and ``random_state``.
    """

    def _validate_input(self, X, reset: bool) -> DataView:
        """Validate ``X`` (numpy, dask, Zarr, xarray) and record or check its shape.

        Lazy inputs are checked without computing; values are checked chunk by chunk
        when they are read.
        """
        import xarray as xr

        if is_lazy_input(X) or isinstance(X, xr.DataArray):
            view = as_view(X)
            if not view.is_dask:
                check_finite_block(view.data, "X")
            self._check_n_features(view, reset)
            self._check_dims(view, reset)
            return view
        ndim = getattr(X, "ndim", None)
        if ndim is not None and ndim != 2:
            raise ValueError(
                f"X must be 2-D (n_samples, n_features); got {ndim}-D with shape {X.shape}. "
                "Reshape your data with X.reshape(-1, 1) (one feature) or X.reshape(1, -1) (one sample)."
            )
        dtype = getattr(X, "dtype", None)
        if isinstance(dtype, np.dtype) and dtype.kind != "O":
            check_dtype(dtype, "X")
        data = validate_data(self, X, reset=reset, dtype=[np.float64, np.float32])
        if reset:
            self.feature_dim_ = None
            self.feature_coords_ = None
        return DataView(data)

    def _validate_views(self, X, Y, reset: bool, what: tuple[str, str] = ("X", "Y"),
                        target=None) -> tuple[DataView, DataView]:
        """Row-aligned views of ``X`` (validated as by :meth:`_validate_input`) and ``Y`` (2-D, or 1-D as one column).

        Nothing of a lazy input is computed; numpy values are checked here, a lazy
        input's chunk by chunk when read. ``target``, when given, maps ``Y`` (e.g. class
        labels to codes) once ``X`` has passed its checks.
        """
        import xarray as xr

        if Y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        vx = self._validate_input(X, reset)
        if target is not None:
            Y = target(Y)
        if not (is_lazy_input(Y) or isinstance(Y, xr.DataArray)):
            Y = numeric_array(np.asarray(Y), what[1])
        vx, vy = paired_views(X if vx.is_dask or vx.dims else vx.data, Y, what, allow_1d_y=True)
        if not vy.is_dask:
            check_finite_block(vy.data, what[1])
            if vy.data.dtype.kind != "f":
                vy.data = vy.data.astype(np.float64)
        return vx, vy

    def _check_n_features_y(self, view: DataView, reset: bool, what: str = "Y") -> None:
        """Record (``reset``) or check the columns of the second view or target (as ``_check_n_features`` for X)."""
        if reset:
            self.n_features_in_y_ = view.n_features
        elif view.n_features != self.n_features_in_y_:
            raise ValueError(f"{what} has {view.n_features} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_y_} features as input.")

    def _check_n_features(self, view: DataView, reset: bool) -> None:
        name = type(self).__name__
        if reset:
            self.n_features_in_ = view.n_features
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        elif view.n_features != self.n_features_in_:
            raise ValueError(
                f"X has {view.n_features} features, but {name} is expecting "
                f"{self.n_features_in_} features as input."
            )

    def _check_dims(self, view: DataView, reset: bool) -> None:
        if reset:
            self.feature_dim_ = view.dims[1] if view.dims else None
            self.feature_coords_ = view.feature_coords
            return
        if view.dims is None or self.feature_dim_ is None:
            return
        if view.dims[1] != self.feature_dim_:
            raise ValueError(
                f"X has feature dimension {view.dims[1]!r} but the model was fitted on "
                f"{self.feature_dim_!r}; transpose or rename the DataArray"
            )
        if self.feature_coords_ is not None and view.feature_coords is not None and not np.array_equal(
            np.asarray(self.feature_coords_), np.asarray(view.feature_coords)
        ):
            raise ValueError(
                f"the coordinates of dimension {self.feature_dim_!r} differ from those seen in fit; "
                "select the same features in the same order"
            )

    def _kernel_spec(self, sample: np.ndarray) -> KernelSpec:
        """The kernel with its bandwidth: a number, or the median trick on ``sample``."""
        return kernel_spec(self.kernel, self.bandwidth, self.kernel_params, sample)

    def _make_features(self, spec: KernelSpec, sample: np.ndarray, seed: int, block_size: int) -> RandomFeatures:
        center = sample.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None
        # the features multiply the inputs (about their mean) by frequencies omega / bandwidth
        check_scale(DataScale.of(sample, spec.shift_invariant), spec.bandwidth, self.compute_dtype, power=1)
        return RandomFeatures(spec, sample.shape[1], block_size, seed, self.compute_dtype, center=center,
                              cache_bytes=self.cache_bytes)

    @staticmethod
    def _seed(random_state) -> int:
        return root_seed(random_state)


def kernel_spec(kernel, bandwidth, kernel_params, sample: np.ndarray, what: str = "bandwidth") -> KernelSpec:
    """The kernel ``kernel`` with its validated bandwidth: a number, or ``"median"``, the median trick on ``sample``.

    The scales of ``sample`` and of the bandwidth are checked against float64, the precision
    of the median, of the dense solvers and the best of the features (squared distances,
    and a bandwidth above the rounding of the data's distances): extreme scales are refused
    here with a ``ValueError`` saying what to do. The features check their own precision
    when they are made.
    """
    spec = parse_kernel(kernel, 1.0, kernel_params)
    if isinstance(bandwidth, str):
        if sample.shape[0] < 2 and spec.distance_metric != "norm":
            raise ValueError(f"{what}='median' needs at least 2 samples, got {sample.shape[0]} sample")
        spec = spec.with_bandwidth(median_bandwidth(sample[:MEDIAN_SAMPLE], spec.distance_metric))
    else:
        spec = spec.with_bandwidth(bandwidth)
    if sample.shape[0]:
        rows = {"bandwidth_y": "Y's rows"}.get(what, "X's rows")
        scale = DataScale.of(sample, spec.shift_invariant, rows)
        check_scale(scale, spec.bandwidth, "float64", power=2)
        check_resolution(scale, spec.bandwidth)
    return spec


_STORAGE_OPTIONS_DOC = """storage_options : dict, optional
    Options of the fsspec filesystem (``endpoint_url``, ``key``, ``secret``... for
    ``s3://``) of the inputs given as URLs of Zarr arrays, and of the ``checkpoint`` when
    it is a URL (``{}``: the filesystem's defaults). Used for this call only: never stored
    with the model or the checkpoint.
"""


def accepts_storage_options(method):
    """Decorate a public method so that it takes ``storage_options=None``, in force while it runs.

    Inputs given as paths are opened, and a checkpoint on an object store is written, with
    these options (:func:`~dsgd_dask.model.store.using_storage_options`); the keyword is
    added to the method's signature and to the Parameters section of its docstring.
    """

    @functools.wraps(method)
    def with_options(self, *args, storage_options=None, **kwargs):
        with using_storage_options(storage_options):
            return method(self, *args, **kwargs)

    signature = inspect.signature(method)
    params = list(signature.parameters.values())
    keyword = inspect.Parameter("storage_options", inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    with_options.__signature__ = signature.replace(parameters=[*params[:at], keyword, *params[at:]])
    with_options.__doc__ = _with_parameter_doc(method.__doc__, _STORAGE_OPTIONS_DOC)
    return with_options


def _with_parameter_doc(doc: str | None, entry: str) -> str | None:
    """``doc`` with ``entry`` appended to its numpydoc Parameters section, or as a paragraph without one."""
    if not doc:
        return doc
    lines = doc.splitlines()
    heads = [i for i in range(len(lines) - 1) if lines[i].strip() == "Parameters" and re.fullmatch(
        r"\s*-+", lines[i + 1])]
    if not heads:
        name, _, text = entry.partition("\n")
        return f"{doc.rstrip()}\n\n{lines[-1] if len(lines) > 1 and not lines[-1].strip() else ''}" \
            f"``{name.split(' : ')[0]}`` ({name.split(' : ')[1]}): {' '.join(text.split())}"
    indent = lines[heads[0]][: len(lines[heads[0]]) - len(lines[heads[0]].lstrip())]
    end = heads[0] + 2
    while end < len(lines) and not (end + 1 < len(lines) and lines[end].strip()
                                    and re.fullmatch(r"\s*-+", lines[end + 1])):
        end += 1
    while end > heads[0] + 2 and not lines[end - 1].strip():
        end -= 1
    added = [indent + line if line else "" for line in entry.rstrip("\n").splitlines()]
    return "\n".join([*lines[:end], *added, *lines[end:]])
