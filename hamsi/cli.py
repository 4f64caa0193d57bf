"""The `hamsi` command line: one sub-command module per concern, dispatched from here.

Each module in COMMAND_MODULES defines `register(subparsers)`, which adds its parser and sets
`run=callable(args) -> int`. This file is the composition root of the project: it is the one
place that may reach every package (dp and cluster are imported lazily by their commands).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from hamsi.errors import DivergenceError, InputError, for_cli

COMMAND_MODULES = [
    "hamsi.commands.demo",
    "hamsi.commands.data",
    "hamsi.commands.partition",
    "hamsi.commands.factorize",
    "hamsi.commands.recommend",
    "hamsi.commands.glasso",
    "hamsi.commands.dp_learn",
    "hamsi.commands.queries",
]


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line naming the flag (sub-parsers inherit it)."""

    def error(self, message):
        """Print `prog: error: message` and a pointer to --help on one line; exit 2 as argparse does."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every sub-command registered."""
    parser = OneLineParser(
        prog="hamsi",
        description="Second-order incremental optimization (HAMSI) and private estimation on Dask.",
    )
    from hamsi import __version__

    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"hamsi {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a missing dependency inside the module is a real error
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors print one clear line and return a non-zero code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("hamsi: interrupted", file=sys.stderr)
        return 130
    except (InputError, DivergenceError, ValueError, OSError) as exc:
        if args.debug:
            raise
        print(f"hamsi {args.command}: error: {for_cli(exc)}", file=sys.stderr)
        return 1 if isinstance(exc, DivergenceError) else 2
    except MemoryError as exc:  # the size checks should refuse first; this is the last resort
        if args.debug:
            raise
        print(
            f"hamsi {args.command}: error: out of memory ({exc}); try smaller sizes",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
