"""`hamsi data`: download MovieLens, generate synthetic ratings, describe and convert rating files."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from hamsi.cli_io import naming_output, seed_value
from hamsi.data.download import DATASETS, download_movielens
from hamsi.data.readers import FORMATS, load_ratings, read_timestamps
from hamsi.data.synth import PRESETS, make_ratings
from hamsi.data.writers import format_for_path, write_ratings
from hamsi.errors import InputError


def register(subparsers) -> None:
    """Add the `data` command and its sub-commands to the CLI."""
    data = subparsers.add_parser(
        "data",
        help="download, generate and inspect rating data",
        description="Download, generate and inspect rating data.",
    )
    actions = data.add_subparsers(dest="data_command", metavar="ACTION")
    data.set_defaults(run=lambda args: _usage(data))

    download = actions.add_parser(
        "download",
        help="download a MovieLens release from GroupLens (verified, resumable)",
        description="Download a MovieLens zip into a cache directory, verify its MD5, unzip it. "
        "An interrupted download resumes from its .part file.",
    )
    download.add_argument("dataset", choices=sorted(DATASETS), help="which release")
    download.add_argument(
        "--dest", help="cache directory (default $HAMSI_DATA_DIR or ~/.cache/hamsi/movielens)"
    )
    download.add_argument(
        "--base-url",
        help="mirror to download from (default $HAMSI_MOVIELENS_URL "
        "or https://files.grouplens.org/datasets/movielens)",
    )
    download.add_argument("--quiet", action="store_true", help="no progress bar")
    download.set_defaults(run=run_download)

    synth = actions.add_parser(
        "synth",
        help="write synthetic MovieLens-shaped ratings",
        description="Generate exactly N distinct (user, item) ratings with heavy-tailed activity "
        "from a planted low-rank model; the format follows the --out extension "
        "(.csv, .dat, .data/.tsv, .parquet, .txt/.hamsi; + .gz to compress).",
    )
    synth.add_argument(
        "--preset", choices=sorted(PRESETS), help="shape and size of a MovieLens release"
    )
    synth.add_argument("--users", type=int, help="number of users (overrides the preset)")
    synth.add_argument("--items", type=int, help="number of items (overrides the preset)")
    synth.add_argument("--ratings", type=int, help="number of ratings (overrides the preset)")
    synth.add_argument(
        "--rank", type=int, default=10, help="rank of the planted model (default 10)"
    )
    synth.add_argument("--seed", type=seed_value, default=0, help="random seed (default 0)")
    synth.add_argument("--half-stars", action="store_true", help="ratings 1, 1.5, ..., 5")
    synth.add_argument("--out", required=True, help="output file")
    synth.set_defaults(run=run_synth)

    info = actions.add_parser(
        "info",
        help="print summary statistics of a rating file",
        description="Print users, items, ratings, density, rating "
        "histogram and activity quantiles.",
    )
    info.add_argument("file", help="rating file or MovieLens directory")
    info.add_argument("--format", default="auto", choices=("auto",) + FORMATS)
    info.add_argument(
        "--duplicates",
        default="error",
        choices=("error", "keep-last", "mean"),
        help="what to do with repeated (user, item) pairs (default error)",
    )
    info.set_defaults(run=run_info)

    convert = actions.add_parser(
        "convert",
        help="convert a rating file to another format",
        description="Read any supported format and write the one implied by the output extension.",
    )
    convert.add_argument("source", help="input rating file")
    convert.add_argument("out", help="output file")
    convert.add_argument(
        "--format", default="auto", choices=("auto",) + FORMATS, help="input format"
    )
    convert.add_argument("--duplicates", default="error", choices=("error", "keep-last", "mean"))
    convert.set_defaults(run=run_convert)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_download(args) -> int:
    """Download and unzip a MovieLens release; print where it is."""
    bar = None
    if not args.quiet and sys.stderr.isatty():
        bar = tqdm(unit="B", unit_scale=True, desc=args.dataset, file=sys.stderr)

    def progress(done, total):
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        target = download_movielens(
            args.dataset, args.dest, base_url=args.base_url, progress=progress if bar else None
        )
    finally:
        if bar:
            bar.close()
    print(target)
    return 0


def run_synth(args) -> int:
    """Generate synthetic ratings and write them atomically to --out."""
    format_for_path(args.out)  # fail on a bad extension before spending time generating
    if args.preset is None and None in (args.users, args.items, args.ratings):
        raise InputError("give --preset or all of --users, --items and --ratings")
    ratings = make_ratings(
        args.preset,
        users=args.users,
        items=args.items,
        ratings=args.ratings,
        rank=args.rank,
        seed=args.seed,
        half_stars=args.half_stars,
    )
    with naming_output("--out", args.out):
        path = write_ratings(ratings, args.out)
    print(
        f"wrote {ratings.nnz} ratings ({ratings.shape[0]} users x {ratings.shape[1]} items) to {path}"
    )
    return 0


def run_info(args) -> int:
    """Print summary statistics of a rating file."""
    ratings = load_ratings(args.file, format=args.format, duplicates=args.duplicates)
    print(format_summary(ratings.summary()))
    return 0


def run_convert(args) -> int:
    """Convert a rating file to the format implied by the output extension."""
    format_for_path(args.out)
    ratings = load_ratings(args.source, format=args.format, duplicates=args.duplicates)
    timestamps = None
    if ratings.notes.get("duplicates_merged"):  # a merged pair has no one time of its own
        print(
            f"hamsi data convert: {args.source}: {ratings.notes['duplicates_merged']} duplicate pairs merged; "
            f"their timestamps are not kept (synthetic times written)",
            file=sys.stderr,
        )
    else:
        timestamps = read_timestamps(args.source, format=args.format)
    with naming_output("output", args.out):
        path = write_ratings(ratings, args.out, timestamps=timestamps)
    print(f"wrote {ratings.nnz} ratings to {path}")
    return 0


def format_summary(stats: dict) -> str:
    """Return the summary dict of Ratings.summary() as aligned text lines."""
    lines = [
        f"source     {stats['source']}",
        f"users      {stats['users']:,}",
        f"items      {stats['items']:,}",
        f"ratings    {stats['ratings']:,}",
        f"density    {stats['density']:.4%}",
    ]
    if stats.get("duplicates_merged"):
        lines.append(f"duplicates {stats['duplicates_merged']:,} merged")
    if "rating_mean" in stats:
        lines.append(
            f"rating     mean {stats['rating_mean']:.3f}  std {stats['rating_std']:.3f}  "
            f"range {stats['rating_min']:g}..{stats['rating_max']:g}"
        )
    total = max(stats["ratings"], 1)
    lines.append("histogram")
    for level, count in stats["rating_histogram"].items():
        label = f"{level:g}" if isinstance(level, float) else str(level)
        lines.append(f"  {label:>16}  {count:>12,}  {count / total:6.1%}")
    header = "".join(
        f"{name:>9}" for name in ("min", "p5", "p25", "median", "p75", "p95", "max", "mean")
    )
    lines.append(f"activity   {header}")
    for who in ("user", "item"):
        row = stats[f"{who}_activity"]
        cells = "".join(
            f"{row[name]:>9.1f}"
            for name in ("min", "p5", "p25", "median", "p75", "p95", "max", "mean")
        )
        lines.append(f"  per {who}  {cells}")
    if stats["users_without_ratings"] or stats["items_without_ratings"]:
        lines.append(
            f"empty      {stats['users_without_ratings']} users, "
            f"{stats['items_without_ratings']} items without ratings"
        )
    return "\n".join(lines)
