"""`hamsi partition DATA --partitioner P --blocks B`: cut a rating matrix into subsets of blocks (thesis sec. 3.3)."""

from __future__ import annotations

import json
import os
import time

import hamsi
import partition
from hamsi.cli_io import add_renamed_flag, check_writable, seed_value, write_as_set
from hamsi.errors import InputError
from partition.plots import plot_partition


def register(subparsers) -> None:
    """Add the `partition` sub-command to the CLI."""
    parser = subparsers.add_parser(
        "partition",
        help="partition a rating matrix with COLOR, COLOR-B, HOGWILD, STRATA or STRATA-B",
        description="Cut the ratings into K subsets of B blocks whose parameters are disjoint "
        "(HOGWILD blocks may overlap; the shared parameters are counted).",
    )
    parser.add_argument(
        "data", metavar="DATA", help="rating file or MovieLens directory (see `hamsi data`)"
    )
    parser.add_argument(
        "--partitioner",
        default=None,
        choices=partition.SCHEMES,
        help="the partitioner (required): " + ", ".join(partition.SCHEMES),
    )
    add_renamed_flag(parser, "--scheme", "--partitioner", choices=partition.SCHEMES)
    parser.add_argument("--blocks", "-B", type=int, required=True, help="blocks per subset (B)")
    parser.add_argument(
        "--subsets",
        "-K",
        type=int,
        default=None,
        help=f"number of subsets K (default: B for strata schemes, "
        f"{partition.DEFAULT_SUBSETS} otherwise)",
    )
    parser.add_argument(
        "--seed", type=seed_value, default=0, help="random seed for color-b and hogwild (default 0)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print block sizes and imbalance as JSON"
    )
    parser.add_argument(
        "--plot", metavar="FILE", default=None, help="write a picture (Fig. 3.3/3.4 style)"
    )
    parser.set_defaults(run=run)


def run(args) -> int:
    """Partition the ratings in args.data and print the block sizes; return the exit code."""
    if args.partitioner is None:
        raise InputError("--partitioner is required: " + ", ".join(partition.SCHEMES))
    plot_format = _plot_format(args.plot) if args.plot else None
    ratings = hamsi.load_ratings(args.data)
    started = time.perf_counter()
    try:
        result = partition.make(
            args.partitioner, ratings, blocks=args.blocks, subsets=args.subsets, seed=args.seed
        )
    except partition.PartitionError as exc:
        raise InputError(f"{args.data}: {exc}") from exc
    seconds = time.perf_counter() - started
    stats = result.stats()
    if args.plot:
        write_as_set(
            {
                "--plot": (
                    args.plot,
                    lambda temporary: plot_partition(result, temporary, plot_format),
                )
            }
        )
    if args.json:
        report = {
            "scheme": result.scheme,
            "subsets": [{"blocks": sizes} for sizes in stats["block_sizes"]],
            "imbalance": stats["imbalance"],
            "seconds": seconds,
        }
        for key in ("subset_imbalance", "n_colors", "n_strata", "overlaps"):
            if key in stats:
                report[key] = stats[key]
        print(json.dumps(report))
        return 0
    print(_table(result, stats, ratings, seconds))
    if args.plot:
        print(f"picture written to {args.plot}")
    return 0


def _plot_format(path: str) -> str:
    """Return the picture format of --plot PATH (its extension; png without one), the path checked writable."""
    import matplotlib  # why lazy: matplotlib loads only when --plot draws

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    check_writable("--plot", path)
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    supported = FigureCanvasBase.get_supported_filetypes()
    if extension and extension not in supported:
        raise InputError(
            f"--plot {path}: unknown picture format {extension!r}; use one of "
            f"{', '.join(sorted(supported))}"
        )
    return extension or "png"  # written to PATH itself, as named


def _table(result, stats, ratings, seconds) -> str:
    n_rows, n_cols = result.shape
    lines = [
        f"{result.scheme}: {stats['n_functions']} ratings of a {n_rows} x {n_cols} matrix, "
        f"K={result.n_subsets} subsets x B={len(result.subsets[0])} blocks ({seconds:.3f} s)",
    ]
    extras = []
    if "n_colors" in stats:
        extras.append(f"{stats['n_colors']} colors, largest color set {stats['largest_color']}")
    if "overlaps" in stats:
        extras.append(f"{sum(stats['overlaps'])} shared parameters between blocks (HOGWILD)")
    lines += extras
    lines.append(
        f"imbalance (sum of largest / sum of mean block) {stats['imbalance']:.3f}, "
        f"subset imbalance {stats['subset_imbalance']:.3f}"
    )
    header = f"{'subset':>6} {'ratings':>9} {'max/mean':>8}  block sizes"
    lines += [header, "-" * len(header)]
    for k, sizes in enumerate(stats["block_sizes"]):
        shown = " ".join(str(s) for s in sizes[:16]) + (" ..." if len(sizes) > 16 else "")
        lines.append(f"{k:>6} {sum(sizes):>9} {stats['block_imbalance'][k]:>8.3f}  {shown}")
    return "\n".join(lines)
