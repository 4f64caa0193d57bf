"""The flags of `hamsi factorize` that choose and tune the Dask engine (cluster.cli runs it).

hamsi knows the Dask engine only by name (hamsi.registry); its flags are declared here so that
`hamsi factorize --help` lists them without importing distributed.
"""

from __future__ import annotations

import argparse


def add_dask_options(parser) -> None:
    """Add the options of the Dask engine: the local cluster, an existing one, where V lives, checkpoints, TLS."""
    parser.add_argument(
        "--threads-per-worker",
        type=int,
        default=1,
        help="threads per Dask worker process of the local cluster (default 1)",
    )
    parser.add_argument(
        "--shared-memory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep V in /dev/shm when all workers share a host (default: whenever possible; "
        "--no-shared-memory takes the message path that multi-host clusters take)",
    )
    parser.add_argument(
        "--owned-v",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="on the message path, hand each item shard V_j from worker to worker instead of "
        "replicating V (default: when it sends fewer bytes; cluster/README.md)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="use the running Dask cluster at tcp://host:port instead of a local one",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None,
        help="write the full state to DIR (atomically) every --checkpoint-every cycles",
    )
    parser.add_argument(
        "--checkpoint-every",
        metavar="N",
        type=int,
        default=None,
        help="cycles between checkpoints (default 10 when --checkpoint is given)",
    )
    parser.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue bit-exactly from the checkpoint in DIR (same data and options)",
    )
    tls = parser.add_argument_group(
        "TLS (a tls:// Dask cluster; see the Security section of the README)"
    )
    tls.add_argument(
        "--tls-ca-file", metavar="PEM", default=None, help="the CA certificate the cluster trusts"
    )
    tls.add_argument(
        "--tls-cert",
        metavar="PEM",
        default=None,
        help="this client's certificate (signed by the CA)",
    )
    tls.add_argument(
        "--tls-key", metavar="PEM", default=None, help="its private key (if not inside --tls-cert)"
    )
