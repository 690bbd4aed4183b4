"""``python -m benchmarks list`` / ``python -m benchmarks run NAME [--quick]``: the comparison runner."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def main(argv=None) -> None:
    import benchmarks.comparisons  # noqa: F401
    from benchmarks.runner import COMPARISONS, run

    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the comparisons, with their data, methods and budgets")
    p = sub.add_parser("run", help="run one comparison (or several) and write JSON, markdown and a figure")
    p.add_argument("names", nargs="+", metavar="NAME", help=f"one of: {', '.join(sorted(COMPARISONS))}, or all")
    p.add_argument("--quick", action="store_true",
                   help="the packaged data subsets, small budgets, no waiting: checks the plumbing in seconds")
    p.add_argument("--no-wait", action="store_true", help="do not wait for an idle machine before timing")
    p.add_argument("--out", type=Path, default=None, help="output folder (default benchmarks/results)")
    p.add_argument("--stores", type=Path, default=None, help="folder of generated Zarr stores (default OUT/stores)")
    p.add_argument("--data-home", default=None, help="folder of the full datasets (default: the data home)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="options",
                   help="override one of the comparison's parameters (a Python literal, e.g. rows=(1048576,)); "
                        "the results go to NAME_custom.*")
    args = parser.parse_args(argv)
    if args.command == "list":
        for c in sorted(COMPARISONS.values(), key=lambda c: c.name):
            print(f"{c.name}\n  {c.title}\n  data: {c.data}\n  methods: {', '.join(c.methods)}\n"
                  f"  budgets: {c.budgets}")
        return
    names = sorted(COMPARISONS) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in COMPARISONS]
    if unknown:
        parser.error(f"unknown comparison(s) {', '.join(unknown)}; known: {', '.join(sorted(COMPARISONS))}")
    options = {}
    for item in args.options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value  # a plain string
    for name in names:
        run(name, quick=args.quick, wait=not args.no_wait, out=args.out, data_home=args.data_home,
            stores=args.stores, options=options)


if __name__ == "__main__":
    main()
