"""The `hamsi` command line: one sub-command module per concern, dispatched from here.

The sub-commands (hamsi's, dp's and the Dask engine) are found through hamsi.registry, which
knows them by name; their shared input and output is hamsi.cli_io. Usage errors and the
errors a command raises become one line on stderr and an exit code (main).
"""

from __future__ import annotations

import argparse
import sys

from hamsi import __version__, registry
from hamsi.errors import DivergenceError, InputError, for_cli


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
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"hamsi {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in registry.command_modules():
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
