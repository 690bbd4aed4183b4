"""The benchmark runner: named comparisons of DSGD estimators and their peers, each in one process.

A :class:`Comparison` declares its data, its methods (DSGD estimators and peers) and its
budgets, and a function that measures them all in the same run and returns a
:class:`Report`. :func:`run` prints the machine, waits for an idle machine (timed
comparisons, full runs), runs the comparison and writes, in ``benchmarks/results/``
(or ``--out``):

* ``<name>.json``: the machine, the parameters, every measurement;
* ``<name>.md``: the table with its title, date, machine and the command that reproduces it
  (what the README's *Results* section includes);
* ``<name>.png``: the figure.

While a long comparison runs, the rows measured so far are kept in
``<name>.partial.json`` (removed when the run completes), so a stopped run loses nothing.

``--quick`` runs every comparison on the real subsets shipped with the package, small
budgets, no waiting: it checks the plumbing (the test suite runs it) and writes
``<name>_quick.*``, never overwriting a full run. Entry point: ``python -m benchmarks``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks._common import RESULTS_DIR, _jsonable, machine_info, run_clean, wait_for_idle


@dataclass
class Report:
    """What a comparison measured.

    ``rows`` are the table rows (one per method and budget; the keys of ``columns`` are
    their fields), ``notes`` the sentences printed under the table (where a peer wins,
    why a method stopped where it did), ``curves`` anything else worth keeping (per pass,
    per budget), ``figure`` a function drawing the figure into a path.
    """

    columns: dict[str, str]
    rows: list[dict]
    notes: list[str] = field(default_factory=list)
    curves: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    figure: Callable[[Path], None] | None = None


@dataclass
class Context:
    """How a comparison runs: ``quick`` (packaged subsets, small budgets), waiting, data home, output folder."""

    quick: bool = False
    wait: bool = True
    data_home: str | None = None
    out: Path = RESULTS_DIR
    stores: Path | None = None
    log: Callable[[str], None] = print
    options: dict = field(default_factory=dict)
    partial_path: Path | None = None

    def keep(self, rows: list[dict]) -> None:
        """Write the rows measured so far to ``<name>.partial.json`` (a stopped run keeps them)."""
        if self.partial_path is not None:
            _write_atomic(self.partial_path, json.dumps(_jsonable({"rows": rows}), indent=2) + "\n")

    def config(self, full: dict, quick: dict) -> dict:
        """The comparison's parameters: ``quick`` or ``full``, with ``--set KEY=VALUE`` overrides."""
        base = quick if self.quick else full
        unknown = sorted(set(self.options) - set(base))
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)}; this comparison takes "
                             f"{', '.join(sorted(base)) or 'none'}")
        return {**base, **self.options}

    @property
    def store_dir(self) -> Path:
        path = self.stores if self.stores is not None else self.out / "stores"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def timed(self, fn, attempts: int = 2):
        """``(result, seconds, foreign_cores)`` of ``fn()``, re-run when other processes disturbed it.

        Waits for an idle machine first and runs up to ``attempts`` times, keeping the
        least disturbed; quick runs and ``--no-wait`` run it once without waiting (the
        foreign load, the cores other processes used meanwhile, is still recorded).
        """
        box = {}

        def call():
            t0 = time.perf_counter()
            box["result"] = fn()
            return time.perf_counter() - t0

        attempts = 1 if self.quick or not self.wait else attempts
        seconds, info = run_clean(call, wait=self.wait and not self.quick, attempts=attempts, timeout=600.0)
        return box["result"], seconds, info["foreign_cores"]


@dataclass(frozen=True)
class Comparison:
    """A named comparison: its data, methods and budgets, and the function measuring them."""

    name: str
    title: str
    data: str
    methods: tuple[str, ...]
    budgets: str
    measure: Callable[[Context], Report]


class PeakMemory:
    """Peak resident memory of this process while a block runs (sampled every 20 ms)::

        with PeakMemory() as mem:
            ...
        mem.peak, mem.start  # bytes
    """

    def __init__(self, interval: float = 0.02):
        self.interval = interval

    def __enter__(self):
        import gc

        import psutil

        gc.collect()
        _release_free_memory()  # freed heap pages still count as resident until returned
        self._proc = psutil.Process()
        self.start = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        return False


def _release_free_memory() -> None:
    """Return the C heap's free pages to the system (glibc ``malloc_trim``; nothing elsewhere)."""
    import contextlib
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


#: The registered comparisons, by name (filled by ``benchmarks.comparisons``).
COMPARISONS: dict[str, Comparison] = {}


def register(comparison: Comparison) -> Comparison:
    if comparison.name in COMPARISONS:
        raise ValueError(f"comparison {comparison.name!r} is registered twice")
    COMPARISONS[comparison.name] = comparison
    return comparison


def _machine_line(info: dict) -> str:
    blas = ", ".join(sorted({f"{p.get('internal_api')} {p.get('version')} ({p.get('num_threads')} threads)"
                             for p in info.get("threadpools") or [] if p.get("user_api") == "blas"}))
    mem = info.get("memory_bytes")
    versions = info["versions"]
    return (f"{info['cpu_model']}, {info['cpu_count']} cores, "
            f"{mem / 2**30:.0f} GiB" if mem else f"{info['cpu_model']}, {info['cpu_count']} cores") + \
        f"; BLAS {blas or 'unknown'}; numpy {versions['numpy']}, dask {versions['dask']}, " \
        f"scikit-learn {versions['scikit-learn']}, zarr {versions['zarr']}"


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float | np.floating):
        if not np.isfinite(value):
            return "–"
        a = abs(value)
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{value:,.0f}"
        if a >= 10:
            return f"{value:.1f}"
        if a >= 0.01:
            return f"{value:.3g}"
        return f"{value:.2e}"
    if isinstance(value, int | np.integer):
        return f"{value:,}"
    return str(value)


def markdown(comparison: Comparison, report: Report, info: dict, command: str, seconds: float,
             quick: bool = False) -> str:
    """The table of a run with its title, date, machine, command and notes."""
    cols = list(report.columns)
    lines = [f"### {comparison.title}", "",
             f"`{command}` — {info['date'][:10]}, {seconds / 60:.1f} min; {_machine_line(info)}.", "",
             f"Data: {comparison.data}. Budgets: {comparison.budgets}." + (
                 " **Quick run** (`--quick`): the packaged data subsets and small budgets, for the plumbing "
                 "only." if quick else ""), "",
             "| " + " | ".join(report.columns[c] for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_fmt(row.get(c)) for c in cols) + " |" for row in report.rows]
    if report.notes:
        lines.append("")
        lines += [f"* {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def run(name: str, *, quick: bool = False, wait: bool = True, out: Path | None = None, data_home=None,
        stores: Path | None = None, options: dict | None = None, log: Callable[[str], None] = print
        ) -> dict[str, Path]:
    """Run comparison ``name``; returns the paths of the JSON, markdown and figure written.

    ``options`` override the comparison's parameters (``--set KEY=VALUE``); such a run
    writes ``<name>_custom.*`` (``<name>_quick_custom.*``), never over a run of the defaults.
    """
    import benchmarks.comparisons  # noqa: F401  (registers the comparisons)

    if name not in COMPARISONS:
        raise ValueError(f"unknown comparison {name!r}; known: {', '.join(sorted(COMPARISONS))}")
    comparison = COMPARISONS[name]
    out = Path(out) if out is not None else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    log(f"{comparison.name}: {comparison.title}")
    log(f"machine: {_machine_line(info)}")
    if wait and not quick:
        waited = wait_for_idle(max_cores=0.25, timeout=900.0)
        log(f"waited {waited['waited']:.0f} s for an idle machine")
    options = dict(options or {})
    stem = (f"{name}_quick" if quick else name) + ("_custom" if options else "")
    partial = out / f"{stem}.partial.json"
    ctx = Context(quick=quick, wait=wait, data_home=data_home, out=out, stores=stores, log=log, options=options,
                  partial_path=partial)
    t0 = time.perf_counter()
    report = comparison.measure(ctx)
    seconds = time.perf_counter() - t0
    command = f"python -m benchmarks run {name}" + (" --quick" if quick else "") + "".join(
        f" --set {k}={v!r}" for k, v in options.items())
    payload = {"comparison": name, "title": comparison.title, "data": comparison.data,
               "methods": list(comparison.methods), "budgets": comparison.budgets, "quick": quick,
               "command": command, "options": options, "seconds": seconds, "machine": info, "params": report.params,
               "columns": report.columns, "rows": report.rows, "notes": report.notes, "curves": report.curves}
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md", "png": out / f"{stem}.png"}
    _write_atomic(paths["json"], json.dumps(_jsonable(payload), indent=2) + "\n")
    table = markdown(comparison, report, info, command, seconds, quick)
    _write_atomic(paths["md"], table)
    if report.figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        tmp = paths["png"].with_name(f".{paths['png'].name}.tmp.png")
        report.figure(tmp)
        plt.close("all")
        os.replace(tmp, paths["png"])
    else:
        del paths["png"]
    partial.unlink(missing_ok=True)
    log(table)
    log("wrote " + ", ".join(str(p) for p in paths.values()))
    return paths


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
