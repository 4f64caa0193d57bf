"""COLOR / COLOR-B covers colored on the workers (cluster.coloring) vs in process (partition.make).

HOGWILD, drawn on the workers too, is timed beside them (its cover is the in-process one: checked).

For each scheme: the time from the ratings' ids and counts (known on the client) to the cover on the
workers (route in position order, speculative coloring rounds, packing, components, arrange), its
rounds and conflicts (ratings the repair uncolored), colors and imbalance (Partition.stats of the
gathered cover: sum_k max_b |S_kb| / sum_k mean_b |S_kb|); beside it partition.make on the same
ratings (in shard order) in this process, after a warm-up call so neither side counts compilation.
The workers are warmed the same way (one load of a small frame first).

    python benchmarks/bench_worker_coloring.py [--preset ml-1m-like] [--blocks 2] [--subsets 20] [--files 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def frame_of(preset: str, seed: int = 0):
    """Return the preset's ratings as a pandas frame of raw ids, shuffled."""
    import pandas as pd

    from hamsi.data.synth import make_ratings

    r = make_ratings(preset, seed=seed)
    order = np.random.default_rng(seed).permutation(r.nnz)
    return pd.DataFrame(
        {
            "user": r.user_ids[r.rows][order],
            "item": r.item_ids[r.cols][order],
            "rating": r.values[order],
        }
    )


def main() -> None:
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    import partition
    from cluster.coloring import collect_cover
    from cluster.dataset import load_worker_ratings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="ml-1m-like")
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--subsets", type=int, default=20)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    frame = frame_of(args.preset)
    print(f"{args.preset}: {len(frame)} ratings, B = {args.blocks}, K = {args.subsets}")
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        for scheme in ("color-b", "color", "hogwild"):
            small = dd.from_pandas(frame.iloc[:5000], npartitions=2, sort=False)
            load_worker_ratings(client, small, partitioner=scheme, n_blocks=args.blocks)  # compile
            source = dd.from_pandas(frame, npartitions=args.files, sort=False)
            keys = dict(n_blocks=args.blocks, n_subsets=args.subsets, seed=args.seed)
            start = time.perf_counter()
            routed = load_worker_ratings(client, source, partitioner="strata", n_blocks=args.blocks)
            strata_s = time.perf_counter() - start
            del routed
            start = time.perf_counter()
            data = load_worker_ratings(client, source, partitioner=scheme, **keys)
            workers_s = time.perf_counter() - start
            ratings, cover = collect_cover(client, data.shards, data.cover)
            got = cover.stats()
            partition.make(scheme, ratings, blocks=args.blocks, subsets=args.subsets, seed=1)
            start = time.perf_counter()
            ref = partition.make(
                scheme, ratings, blocks=args.blocks, subsets=args.subsets, seed=args.seed
            )
            memory_s = time.perf_counter() - start
            want = ref.stats()
            if scheme == "hogwild":
                same = all(
                    np.array_equal(a, b)
                    for s, t in zip(cover.subsets, ref.subsets)
                    for a, b in zip(s, t)
                )
                print(
                    f"hogwild: workers imbalance {got['imbalance']:.3f}, load {workers_s:.1f} s "
                    f"(the STRATA load {strata_s:.1f} s) | in process {memory_s:.2f} s; "
                    f"the same cover: {same}"
                )
                continue
            cover.validate()
            print(
                f"{scheme}: workers {data.cover.n_colors} colors, imbalance "
                f"{got['imbalance']:.3f}, {data.cover.rounds} rounds, {data.cover.conflicts} "
                f"conflicts ({data.cover.conflicts / len(frame):.1%}), load {workers_s:.1f} s "
                f"(the STRATA load {strata_s:.1f} s: the coloring's share "
                f"{workers_s - strata_s:.1f} s) | in process {want['n_colors']} colors, "
                f"imbalance {want['imbalance']:.3f}, {memory_s:.2f} s"
            )
            del data


if __name__ == "__main__":
    main()
