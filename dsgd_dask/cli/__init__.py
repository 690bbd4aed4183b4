"""The ``dsgd-dask`` command line: preprocess, fit, transform, predict, evaluate, describe models on Zarr stores.

Run ``dsgd-dask --help`` (or ``python -m dsgd_dask --help``); see ``docs/cli.rst``.
Exit status: 0 on success, 2 for a command line that cannot work (usage), 1 for a data
or model error, 130 when interrupted. Every error is one line on stderr (``--debug`` shows
the traceback); a command line is checked before any work: numbers in range, a known
scheduler, outputs apart from the inputs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from pathlib import Path

from dsgd_dask.cli._commands import (
    METHODS,
    UsageError,
    cmd_evaluate,
    cmd_fit,
    cmd_info,
    cmd_predict,
    cmd_preprocess,
    cmd_transform,
    evaluate,
    model_info,
    parse_set,
    parse_storage_options,
)
from dsgd_dask.cli._demo import run_demo
from dsgd_dask.cli._io import is_path, open_input, write_output
from dsgd_dask.model.store import StoreError, local_path

__all__ = ["METHODS", "build_parser", "check_args", "evaluate", "main", "model_info", "open_input", "parse_set",
           "run_demo", "write_output"]

PROG = "dsgd-dask"
#: Errors reported as ``dsgd-dask: error: <message>`` with exit status 1.
DATA_ERRORS = (StoreError, ValueError, TypeError, KeyError, OSError, MemoryError)
#: The schedulers named by ``--scheduler``; anything else must be a scheduler address.
SCHEDULERS = ("threads", "synchronous", "processes", "local")
_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+|[^\s:/]+:\d+")

_FORMATTER = argparse.RawDescriptionHelpFormatter
_METHODS_HELP = ", ".join(f"{k} ({v})" for k, v in METHODS.items())
_METHODS_LIST = "\n".join(f"  {k:<9}{v}" for k, v in METHODS.items())
_INPUT_HELP = ("a Zarr store: an array, or a group with --var naming the array (variables written by xarray "
               "are opened with xarray and keep their coordinates); or a .npy file")


class _Once(argparse.Action):
    """Store an option's value, refusing the option given twice (argparse would keep the last one)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", set())
        if self.dest in given:
            raise argparse.ArgumentError(self, f"given twice ({getattr(namespace, self.dest)!r}, then {values!r}); "
                                         "give it once")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like the other errors of the command line."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def parse_args(self, args=None, namespace=None):
        args, extras = self.parse_known_args(args, namespace)
        if extras:  # reported by the subcommand's parser, whose --help lists its options
            commands = getattr(self, "commands", {})
            commands.get(getattr(args, "command", None), self).error(f"unrecognized arguments: {' '.join(extras)}")
        return args

    def error(self, message):
        self.exit(2, f"{PROG}: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def _cmd_demo(args) -> int:
    import tempfile

    if args.out is not None:
        run_demo(args.out, seed=args.seed, verbose=not args.quiet)
        return 0
    with tempfile.TemporaryDirectory(prefix="dsgd-dask-demo-") as tmp:
        run_demo(tmp, seed=args.seed, verbose=not args.quiet)
        if not args.quiet:
            print("(temporary folder removed; pass --out DIR to keep the data and the model)")
    return 0


def _common(p: argparse.ArgumentParser, compute: bool = True) -> None:
    g = p.add_argument_group("general")
    if compute:
        g.add_argument("--scheduler", default="threads", metavar="ADDRESS|local|threads|synchronous",
                       help="dask scheduler: threads (default), synchronous, processes, local (a LocalCluster of "
                       "--n-workers single-threaded workers for this command) or a scheduler address such as "
                       "tcp://host:8786")
        g.add_argument("--n-workers", type=int, metavar="N", help="workers of --scheduler local (default 2), or "
                       "threads of --scheduler threads or processes of --scheduler processes (at least 1)")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress bars or messages")
    g.add_argument("--debug", action="store_true", help="show the traceback of an error")


def _storage(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the fsspec filesystem of the paths that are URLs (s3://, gs://...), value read "
                   "as a Python literal else a string (repeat: --storage-option endpoint_url=http://127.0.0.1:9000 "
                   "--storage-option key=... --storage-option secret=...); models and checkpoints on such URLs are "
                   "written under a commit record")


def _data(p: argparse.ArgumentParser, y_help: str | None) -> None:
    p.add_argument("input", metavar="INPUT", help=_INPUT_HELP)
    p.add_argument("--var", metavar="NAME", help="the array or variable of INPUT's group (optional when it holds "
                   "a single 2-D array)")
    if y_help:
        p.add_argument("--y", metavar="PATH_OR_VAR", help=y_help)
        p.add_argument("--y-var", metavar="NAME", help="the variable of the --y store's group")
    p.add_argument("--feature-dim", metavar="DIM", help="xarray inputs: the dimension holding the features "
                   "(moved last; default: the variable's last dimension)")


def _output(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--out", required=True, metavar="STORE", help=f"the new Zarr store of {what}; written to a "
                   "hidden temporary sibling and renamed into place, so an error or interrupt leaves nothing")
    p.add_argument("--chunks", type=int, metavar="N", help="rows per task and per output chunk, at least 1 "
                   "(default: INPUT's row chunks; 8192 for .npy)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing STORE")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dsgd-dask`` and its subcommands.

    Returns
    -------
    argparse.ArgumentParser
    """
    from dsgd_dask import __version__

    parser = _Parser(
        prog=PROG, formatter_class=_FORMATTER,
        description="Kernel PCA, CCA, SVD, SIR and kernel machines on data larger than memory, from the shell:\n"
        "fit on Zarr stores, save the model, transform or predict other stores lazily, chunk by chunk.",
        epilog="example:\n"
        "  dsgd-dask demo --out demo\n"
        "  dsgd-dask preprocess train.zarr --var X --unit-norm --pca 100 --keep y --out train100.zarr\n"
        "  dsgd-dask fit pca data.zarr --var X --set n_components=10 --out kpca.zarr\n"
        "  dsgd-dask transform kpca.zarr new.zarr --var X --out components.zarr\n\n"
        "Run `dsgd-dask COMMAND --help` for the options of a command.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = sub.choices

    p = sub.add_parser("preprocess", formatter_class=_FORMATTER, help="unit-norm rows and a PCA fitted on a sample",
                       description="Write INPUT's rows scaled to unit Euclidean norm (--unit-norm) and/or projected "
                       "on the top --pca principal components of a seeded sample of them (after the scaling) to a "
                       "new Zarr store, lazily, one task per row chunk: the preprocessing of Dai et al. (2014) for "
                       "image rows. The store keeps the fitted projection (`pca_mean`, `pca_components`) and its "
                       "parameters, so that --like applies the same to other data (test rows).",
                       epilog="examples:\n"
                       "  dsgd-dask preprocess train.zarr --var X --unit-norm --pca 100 --pca-samples 100000 "
                       "--keep y --out train100.zarr\n"
                       "  dsgd-dask preprocess test.zarr --var X --like train100.zarr --keep y --out test100.zarr\n"
                       "  dsgd-dask fit logistic train100.zarr --var X --y y --set preconditioner=block "
                       "--out clf.zarr")
    _data(p, None)
    p.add_argument("--unit-norm", action="store_true", help="scale every row to unit Euclidean norm")
    p.add_argument("--pca", type=int, metavar="N", help="project on the top N principal components of a sample")
    p.add_argument("--pca-samples", type=int, default=10000, metavar="S",
                   help="rows of the seeded sample the components are fitted on (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    p.add_argument("--like", metavar="STORE", help="a store written by `dsgd-dask preprocess`: apply its fitted "
                   "preprocessing instead of fitting one")
    p.add_argument("--keep", action="append", default=[], metavar="NAME", help="copy the variable NAME of INPUT's "
                   "group (targets, labels) into the output, unchanged (repeat for several)")
    _output(p, "the preprocessed rows")
    _storage(p)
    _common(p)
    p.set_defaults(func=cmd_preprocess, y=None, y_var=None)

    p = sub.add_parser("fit", formatter_class=_FORMATTER, help="fit an estimator on a data store and save it",
                       description="Fit an estimator on INPUT and save it as a model store.\n\n"
                       f"methods:\n{_METHODS_LIST}",
                       epilog="examples:\n"
                       "  dsgd-dask fit pca data.zarr --var X --set n_components=5 --set kernel=laplacian "
                       "--out kpca.zarr\n"
                       "  dsgd-dask fit cca left.zarr --y right.zarr --set n_components=10 --out cca.zarr\n"
                       "  dsgd-dask fit svc train.zarr --var X --y y --set alpha=1e-4 --scheduler local "
                       "--n-workers 2 --out svc.zarr")
    p.add_argument("method", choices=list(METHODS), metavar="METHOD", help=", ".join(METHODS))
    _data(p, "sir, ridge, svc, logistic: the target; cca, svd: the second view. A path (a Zarr store or .npy "
          "file), or the name of another variable of INPUT's group")
    p.add_argument("--out", required=True, metavar="MODEL", help="the model store to write")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an estimator parameter, "
                   "value read as a Python literal else a string (repeat: --set n_components=5 --set "
                   "kernel=laplacian --set random_state=0)")
    p.add_argument("--checkpoint", metavar="PATH", help="Zarr checkpoint of the fit: written as the fit goes, "
                   "resumed when it exists")
    p.add_argument("--overwrite", action="store_true", help="replace an existing MODEL")
    _storage(p)
    _common(p)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("transform", formatter_class=_FORMATTER, help="project a data store with a model",
                       description="Project INPUT with a saved pca, cca, svd or sir model into a new Zarr store, "
                       "lazily, one task per row chunk.\nThe store holds `components` (pca, sir) or `U` and, with "
                       "--y, `V` (cca, svd); an xarray input gives an xarray Dataset with INPUT's coordinates.",
                       epilog="examples:\n"
                       "  dsgd-dask transform kpca.zarr new.zarr --var X --out components.zarr\n"
                       "  dsgd-dask transform cca.zarr left_test.zarr --y right_test.zarr --out variates.zarr")
    p.add_argument("model", metavar="MODEL", help="a model store written by `dsgd-dask fit` or an estimator's save")
    _data(p, "cca, svd: the second view, also transformed (into `V`)")
    _output(p, "the components")
    _storage(p)
    _common(p)
    p.set_defaults(func=cmd_transform)

    p = sub.add_parser("predict", formatter_class=_FORMATTER, help="predict with a kernel machine",
                       description="Predict INPUT with a saved ridge, svc or logistic model into a new Zarr store "
                       "(array `prediction`, or `proba` with --proba), lazily, one task per row chunk.",
                       epilog="example:\n  dsgd-dask predict svc.zarr test.zarr --var X --out labels.zarr")
    p.add_argument("model", metavar="MODEL", help="a model store of a ridge, svc or logistic model")
    _data(p, None)
    p.add_argument("--proba", action="store_true", help="logistic: the class probabilities (columns in the order "
                   "of classes_) instead of the classes")
    _output(p, "the predictions")
    _storage(p)
    _common(p)
    p.set_defaults(func=cmd_predict, y=None, y_var=None)

    p = sub.add_parser("evaluate", formatter_class=_FORMATTER, help="score a model on a data store",
                       description="Score a saved model on INPUT: cca, svd: the sum of the correlations of the "
                       "paired functions (--y the second view); svc, logistic: accuracy; ridge: R²; pca (no score): "
                       "the variance of each component on INPUT, to compare with eigenvalues_; sir: the share of "
                       "each direction's variance explained by the slices of --y.",
                       epilog="example:\n  dsgd-dask evaluate svc.zarr test.zarr --var X --y y --json")
    p.add_argument("model", metavar="MODEL", help="a model store")
    _data(p, "the target (sir, ridge, svc, logistic) or the second view (cca, svd): a path or a variable of "
          "INPUT's group")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    _storage(p)
    _common(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("info", formatter_class=_FORMATTER, help="describe a model store",
                       description="Describe a model store from its attributes, without loading the model: "
                       "estimator, format version, parameters, fitted attributes, arrays with their shapes and "
                       "SHA-256 digests.",
                       epilog="example:\n  dsgd-dask info kpca.zarr --verify")
    p.add_argument("model", metavar="MODEL", help="a model store")
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.add_argument("--verify", action="store_true", help="also load the model: check every array against its "
                   "digest and print the model fingerprint")
    _storage(p)
    _common(p, compute=False)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", formatter_class=_FORMATTER, help="kernel PCA of 1-D Gaussian data vs the closed form",
                       description="Write 32,768 draws of N(0, 1) to a local Zarr store, fit kernel PCA (k = 3, "
                       "Gaussian kernel) by full-data passes and by doubly stochastic steps, and compare the "
                       "eigenvalues with the closed form. About ten seconds.",
                       epilog="example:\n  dsgd-dask demo --out demo && dsgd-dask info demo/model.zarr")
    p.add_argument("--out", metavar="DIR", help="folder for data.zarr, model.zarr and demo.json (default: a "
                   "temporary folder, removed afterwards)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the fits (default 0)")
    _common(p, compute=False)
    p.set_defaults(func=_cmd_demo)
    return parser


def _resolved(path) -> Path | None:
    """``path`` absolute, its symbolic links resolved; None for a URL of another protocol than ``file://``."""
    try:
        return local_path(path).resolve()
    except (ValueError, TypeError):
        return None


def _relation(a: Path, b: Path) -> str | None:
    if a == b:
        return "is the same path as"
    if a.is_relative_to(b):
        return "is inside"
    if b.is_relative_to(a):
        return "contains"
    return None


def _check_paths(args) -> None:
    """Refuse an output path equal to, inside or containing an input or the other output."""
    inputs = {"MODEL": getattr(args, "model", None), "INPUT": args.input, "--like": getattr(args, "like", None)}
    if getattr(args, "y", None) is not None and is_path(args.y):
        inputs["--y"] = args.y
    outputs = {"--checkpoint": getattr(args, "checkpoint", None), "--out": args.out}
    named = [(name, path, _resolved(path)) for name, path in inputs.items() if path is not None]
    for name, path in outputs.items():
        if path is None:
            continue
        mine = _resolved(path)
        for other, their_path, theirs in named:
            relation = mine is not None and theirs is not None and _relation(mine, theirs)
            if relation:
                why = ("give them separate paths" if other in outputs
                       else "an output must be apart from the inputs; choose another path")
                raise UsageError(f"{name} {path} {relation} {other} {their_path}: {why}")
        named.append((name, path, mine))


def _replaceable(path: Path) -> bool:
    """Whether ``--overwrite`` may replace ``path``: an empty folder or a Zarr store."""
    if not path.is_dir() or path.is_symlink():
        return False
    return not any(path.iterdir()) or any((path / name).is_file() for name in ("zarr.json", ".zgroup", ".zarray"))


def check_args(args) -> None:
    """Refuse a command line that cannot work, before any work.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by :func:`build_parser`.

    Raises
    ------
    UsageError
        A number out of range (``--chunks``, ``--n-workers``, ``--seed``), an unknown
        ``--scheduler``, ``--n-workers`` with a scheduler address, ``--y-var`` without
        ``--y``, ``--set checkpoint=...`` (use ``--checkpoint``), a ``demo --out`` that is a
        file, an output path (``--out``, ``--checkpoint``) equal to, inside or containing
        an input (MODEL, INPUT, ``--y``) or the other output, or ``--overwrite`` of
        something else than an empty folder or a Zarr store. The message names the
        option.
    """
    for option, minimum in (("chunks", 1), ("n_workers", 1), ("seed", 0), ("pca", 1), ("pca_samples", 1)):
        value = getattr(args, option, None)
        if value is not None and value < minimum:
            what = "a positive integer" if minimum else "a non-negative integer"
            raise UsageError(f"--{option.replace('_', '-')} must be {what}, got {value}")
    scheduler = getattr(args, "scheduler", None)
    if scheduler is not None and scheduler not in SCHEDULERS:
        if not _ADDRESS.fullmatch(scheduler):
            raise UsageError(f"--scheduler must be one of {', '.join(SCHEDULERS)} or a scheduler address such as "
                             f"tcp://host:8786, got {scheduler!r}")
        if args.n_workers is not None:
            raise UsageError(f"--n-workers applies to --scheduler local, threads or processes; the scheduler at "
                             f"{scheduler} has its own workers")
    if getattr(args, "y_var", None) is not None and args.y is None:
        raise UsageError("--y-var names a variable of the --y store: give --y too")
    parse_storage_options(getattr(args, "storage_option", None))
    for item in getattr(args, "set", None) or ():
        if item.partition("=")[0].strip().replace("-", "_") == "checkpoint":
            raise UsageError(f"--set {item}: give the checkpoint with --checkpoint PATH")
    if args.command == "demo":
        if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
            raise UsageError(f"--out {args.out} is a file; the demo writes a folder")
    elif getattr(args, "out", None) is not None:
        _check_paths(args)
        try:
            out = local_path(args.out)
        except (ValueError, TypeError):
            out = None  # a URL: refused where the output is written
        if args.overwrite and out is not None and os.path.lexists(out) and not _replaceable(out):
            raise UsageError(f"--out {args.out} exists and is not a Zarr store: --overwrite replaces only a Zarr "
                             "store or an empty folder")


def _message(err: BaseException) -> str:
    text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    text = " ".join(str(text).split()) or type(err).__name__
    return text if isinstance(err, ValueError | OSError | KeyError) else f"{type(err).__name__}: {text}"


def main(argv=None) -> int:
    """Run ``dsgd-dask`` with the arguments ``argv`` (default: ``sys.argv[1:]``).

    Parameters
    ----------
    argv : list of str, optional

    Returns
    -------
    int
        The exit status: 0 success, 1 data or model error, 2 usage error, 130 interrupted.
        Argument errors found by the parser exit with status 2 (``SystemExit``).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_args(args)
        return args.func(args) or 0
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except UsageError as err:
        if args.debug:
            traceback.print_exc()
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except DATA_ERRORS as err:
        if args.debug:
            traceback.print_exc()
        print(f"{PROG}: error: {_message(err)}", file=sys.stderr)
        return 1
    except Exception as err:
        if args.debug:
            traceback.print_exc()
            print(f"{PROG}: error: {_message(err)}", file=sys.stderr)
        else:
            print(f"{PROG}: error: {_message(err)} (unexpected: run again with --debug for the traceback)",
                  file=sys.stderr)
        return 1
