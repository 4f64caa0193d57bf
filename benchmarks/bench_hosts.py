"""Emulated hosts: H network namespaces on a bridge, one `dask worker` each; wire bytes and times per inner iteration.

What is emulated: H hosts with their own network stacks and addresses. Each worker runs in its
own network namespace (`ip netns`) with one veth link to a Linux bridge that lives in a namespace
of its own; the scheduler and this benchmark's client share one more namespace. So the workers'
direct links, Dask's comms and the heartbeats all cross real (virtual) Ethernet links, and an
optional tbf rate limit on both ends of every link (`--rates`: 1gbit, 100mbit, ...) emulates a
host's NIC. What is not: the processes still share this machine's cores and memory, and there is
no added latency or loss (netem is not available in these kernels).

Addresses are only ever set inside the namespaces made here, from 198.18.0.0/15 (RFC 2544's
benchmarking range): the bridge's namespace 198.18.0.0/24 has no address at all, the scheduler's
host is 198.18.0.1, worker i is 198.18.0.(11 + i). The host's own network is not touched. Every
name starts with `hb<pid>-`, so runs in parallel do not collide; everything made (namespaces,
whose deletion takes the bridge and veths with them, processes, their local directories) is
removed at the end, after an error, Ctrl-C, SIGTERM or SIGHUP.

Each point runs ml-100k-like, rank 50, STRATA-B with B = H on the message path
(shared_memory=False), V replicated and V owned (cluster.work.FactorWork / OwnedFactorWork),
at each rate `--repeats` times (3) a pair of runs of `--epochs` and 2 x `--epochs` cycles, each one
chunk; the figures are medians over the pairs. Printed per path and rate:
- bytes per inner iteration that the workers sent each other, from the veth counters (the
  kernel's per-device rx/tx bytes, /sys/class/net/<veth>/statistics, read with `ip -s -j link`):
  on the bridge, what the worker ports received minus what the scheduler's port sent out (the
  workers' traffic to the scheduler and client), so Dask's heartbeats and results are left out.
  The difference of the long and the short run over the difference of their inner iterations
  leaves out what a run does once (placing the ratings, the start barrier, the chunk's buddy
  backups, the result): what remains is the inner iterations' rounds and the cycles'
  evaluations with their TCP/IP and Ethernet headers and acknowledgements;
- the model: cluster.work.item_rows_per_iteration x items x rank x 8 (partials and headers left
  out), with the run's share of cycles that stored a pair, and the engine's own count of the
  frames it wrote (result.worker_bytes_sent) over the same difference;
- ms per inner iteration of the long run after cycle 1 (its trace);
- whether the factors are bitwise those of the in-process engine (hamsi.optimizer.minimize_hamsi,
  same cover and seed) for every run.
No coloring cover runs: with ratings kept on the workers only STRATA / STRATA-B covers exist, and a
COLOR cover's run is equal to the in-process one only to rounding (cluster/README.md).

    sudo python benchmarks/bench_hosts.py [--hosts 4] [--rates none 1gbit 100mbit] [--epochs 4]
                                          [--rank 50] [--dataset ml-100k-like]

Needs root and `ip netns`; otherwise it prints one line saying why and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from bench_message_bytes import ms_per_inner

import partition
from cluster.connect import connect
from cluster.driver import fit_distributed
from cluster.work import item_rows_per_iteration
from hamsi.data.synth import make_ratings
from hamsi.errors import InputError
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization

ROOT = Path(__file__).resolve().parents[1]
NET = "198.18.0"  # inside the namespaces made here only (198.18.0.0/15: the benchmarking range)
SCHEDULER_HOST = f"{NET}.1"
PORT = 8786
BRIDGE = "br0"
SCHEDULER = f"tcp://{SCHEDULER_HOST}:{PORT}"
# seconds for the scheduler and every worker to be up (their imports on a busy machine)
START_TIMEOUT = 120.0
STOP_TIMEOUT = 10.0  # seconds a process has to exit after SIGTERM before SIGKILL


def worker_host(i: int) -> str:
    """Return worker i's address (inside its own namespace)."""
    return f"{NET}.{11 + i}"


def unavailable() -> str | None:
    """Return why this benchmark cannot run here (not root, no `ip` / `tc`, no `ip netns`), or None."""
    if os.geteuid() != 0:
        return "needs root (it makes network namespaces, veth pairs and a bridge)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2) on PATH"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable: {probe.stderr.strip() or probe.returncode}"
    return None


def run(*cmd: str) -> str:
    """Run a command; return its stdout, or raise RuntimeError with one line naming it and its error."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


class Names:
    """The names of one run's namespaces and bridge ports (prefix `hb<pid>-`)."""

    def __init__(self, prefix: str, hosts: int):
        self.prefix, self.hosts = prefix, hosts
        self.bridge_ns = prefix + "br"
        self.scheduler_ns = prefix + "s"
        self.worker_ns = [f"{prefix}w{i}" for i in range(hosts)]
        # bridge-side veth ends, in the bridge's namespace: "ps" to the scheduler's host, "p<i>" to worker i
        self.scheduler_port = "ps"
        self.worker_ports = [f"p{i}" for i in range(hosts)]

    def links(self) -> list[tuple[str, str, str]]:
        """Return (host namespace, its address, its bridge port) for the scheduler's host and every worker."""
        out = [(self.scheduler_ns, SCHEDULER_HOST, self.scheduler_port)]
        for i, (ns, port) in enumerate(zip(self.worker_ns, self.worker_ports)):
            out.append((ns, worker_host(i), port))
        return out


class Hosts(contextlib.AbstractContextManager):
    """The emulated hosts: namespaces, bridge, veths, scheduler and workers; all removed on exit."""

    def __init__(self, hosts: int, prefix: str | None = None):
        self.names = Names(prefix or f"hb{os.getpid()}-", hosts)
        self.made: list[str] = []  # namespaces, in the order made
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.tmp = Path(tempfile.mkdtemp(prefix=self.names.prefix))

    def __enter__(self):
        try:
            self._build()
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _add_namespace(self, ns: str) -> None:
        run("ip", "netns", "add", ns)
        self.made.append(ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")

    def _build(self) -> None:
        n = self.names
        self._add_namespace(n.bridge_ns)
        run("ip", "-n", n.bridge_ns, "link", "add", BRIDGE, "type", "bridge")
        run("ip", "-n", n.bridge_ns, "link", "set", BRIDGE, "up")
        for ns, address, port in n.links():
            self._add_namespace(ns)
            # made inside the bridge's namespace with its peer moved at once: never in the host's
            run(
                "ip", "-n", n.bridge_ns, "link", "add", port, "type", "veth",
                "peer", "name", "eth0", "netns", ns,
            )  # fmt: skip
            run("ip", "-n", n.bridge_ns, "link", "set", port, "master", BRIDGE, "up")
            run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")

    def spawn(self, ns: str, args: list[str], log: str | None) -> subprocess.Popen:
        """Start `python args` in namespace ns with this worktree on PYTHONPATH; stopped by close().

        log: a file name in our directory for its output (own session: a Ctrl-C at the terminal
        reaches only us and we stop it in order), or None to share our terminal and session.
        """
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        cmd = ["ip", "netns", "exec", ns, sys.executable, *args]  # ip execs python: its pid is ours
        if log is None:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
        else:
            with open(self.tmp / log, "wb") as out:
                proc = subprocess.Popen(
                    cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
        self.procs.append(proc)
        self.logs.append(self.tmp / (log or "-"))
        return proc

    def _start(self) -> None:
        n = self.names
        self.spawn(
            n.scheduler_ns,
            ["-m", "distributed.cli.dask_scheduler", "--host", SCHEDULER_HOST,
             "--port", str(PORT), "--no-dashboard"],
            "scheduler.log",
        )  # fmt: skip
        for i, ns in enumerate(n.worker_ns):
            self.spawn(
                ns,
                ["-m", "distributed.cli.dask_worker", SCHEDULER, "--host", worker_host(i),
                 "--name", f"w{i}", "--nthreads", "1", "--no-nanny", "--no-dashboard",
                 "--local-directory", str(self.tmp / f"w{i}")],
                f"w{i}.log",
            )  # fmt: skip

    def tail(self, lines: int = 3) -> str:
        """Return the last lines of the scheduler's and workers' logs (why a run failed), one line each."""
        out = []
        for proc, log in zip(self.procs, self.logs):
            if log.exists():
                state = "running" if proc.poll() is None else f"exit {proc.returncode}"
                last = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"{log.name} ({state}): " + " | ".join(line.strip() for line in last))
        return "\n".join(out)

    def close(self) -> None:
        """Stop our processes (by pid), delete our namespaces (with the bridge and veths), our files."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)  # a second signal must not leave half of it
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------ inside the scheduler's namespace
def port_bytes(names: Names) -> dict:
    """Return {bridge port: (rx bytes, tx bytes)}: the veth counters on the bridge's side."""
    links = json.loads(run("ip", "-n", names.bridge_ns, "-s", "-j", "link", "show"))
    return {
        link["ifname"]: (link["stats64"]["rx"]["bytes"], link["stats64"]["tx"]["bytes"])
        for link in links
    }


def worker_to_worker(before: dict, after: dict, names: Names) -> int:
    """Return the bytes the workers sent each other between two `port_bytes` readings.

    A bridge port receives what its host sends; what the scheduler's port sends out is what the
    workers sent to the scheduler's host (scheduler and client): the rest went to workers.
    """
    sent = sum(after[p][0] - before[p][0] for p in names.worker_ports)
    return sent - (after[names.scheduler_port][1] - before[names.scheduler_port][1])


def set_rate(names: Names, rate: str) -> None:
    """Put a tbf rate limit on both ends of every host's link ("none": remove it), like a host's NIC.

    burst: at least a 64 KiB GSO packet and 2 ms at the rate; queue up to 50 ms (drops would resend).
    """
    ends = [(ns, "eth0") for ns, _, _ in names.links()]
    ends += [(names.bridge_ns, port) for _, _, port in names.links()]
    for ns, dev in ends:
        if rate == "none":
            subprocess.run(
                ["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], capture_output=True
            )
            continue
        run(
            "tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
            "burst", str(max(256 * 1024, int(rate_bits(rate) / 8 * 2e-3))), "latency", "50ms",
        )  # fmt: skip


def rate_bits(rate: str) -> float:
    """Return a tc rate ("100mbit", "1gbit", "500kbit", "2000000bit") in bits per second."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for unit, scale in units.items():
        if rate.lower().endswith(unit):
            try:
                return float(rate[: -len(unit)]) * scale
            except ValueError:
                break
    raise ValueError(f"--rates: {rate!r} is not none or a number with kbit, mbit or gbit")


def one_run(client, names, ratings, part, args, epochs: int, owned: bool, local) -> dict:
    """Return one fit's wire bytes, frame bytes, model bytes (all runs' totals), nit, ms, equality."""
    before = port_bytes(names)
    result = fit_distributed(
        ratings,
        rank=args.rank,
        partition=part,
        client=client,
        random_state=1,
        max_cycles=epochs,
        chunk_cycles=epochs,
        shared_memory=False,
        owned_v=owned,
    )
    after = port_bytes(names)
    assert result.owned_v is owned and not result.shared_memory
    cycles = len(result.trace.column("inner")) - 1  # the trace's first row is the start
    rows = item_rows_per_iteration(args.hosts, args.hosts, owned, result.pairs_accepted / cycles)
    return {
        "wire": worker_to_worker(before, after, names),
        "frames": sum(result.worker_bytes_sent.values()),
        "model": rows * ratings.shape[1] * args.rank * 8 * result.nit,
        "nit": result.nit,
        "ms": ms_per_inner(result.trace),
        "same": bool(np.array_equal(result.x, local)),
    }


def median_row(rate: str, owned: bool, pairs: list) -> dict:
    """Return the printed row of `pairs` of (short, long) runs: per inner iteration, medians over the pairs.

    Each pair's long minus short run leaves out what a run does once; a one-off transfer that
    lands in one run of a pair only (Dask moving a task's data between workers on a busy machine:
    1.3 % of the bytes once, at 2 hosts and 2 cycles) moves that pair, not the median.
    """
    per_pair = {"wire": [], "frames": [], "model": []}
    for short, long in pairs:
        inner = long["nit"] - short["nit"]
        for key, values in per_pair.items():
            values.append((long[key] - short[key]) / inner)
    return {
        "rate": rate,
        "path": "owned" if owned else "replicated",
        **{key: float(np.median(values)) for key, values in per_pair.items()},
        "wire_range": (min(per_pair["wire"]), max(per_pair["wire"])),
        "ms": float(np.median([long["ms"] for _, long in pairs])),
        "same": all(short["same"] and long["same"] for short, long in pairs),
    }


def inside(args) -> int:
    """Run the points from the scheduler's namespace and print them (the client's side)."""
    names = Names(args.inside, args.hosts)
    ratings = make_ratings(args.dataset, seed=1)
    part = partition.make("strata-b", ratings, blocks=args.hosts, seed=1)
    lengths = (args.epochs, 2 * args.epochs)
    local = {
        e: minimize_hamsi(
            MatrixFactorization(ratings, args.rank), part, random_state=1, max_cycles=e, threads=1
        ).x
        for e in lengths
    }
    rows = []
    with connect(scheduler=SCHEDULER, quiet=True) as client:
        try:
            client.wait_for_workers(args.hosts, timeout=START_TIMEOUT)
        except TimeoutError:
            raise RuntimeError(
                f"{len(client.nthreads())} of {args.hosts} workers connected to "
                f"{SCHEDULER} within {START_TIMEOUT:.0f} s"
            ) from None
        load = os.getloadavg()
        for rate in args.rates:
            set_rate(names, rate)
            for owned in (False, True):
                pairs = [
                    [
                        one_run(client, names, ratings, part, args, e, owned, local[e])
                        for e in lengths
                    ]
                    for _ in range(args.repeats)
                ]
                rows.append(median_row(rate, owned, pairs))
    print(
        f"{args.hosts} emulated hosts (namespaces {names.prefix}*, a bridge, veths, "
        f"198.18.0.0/24), one dask worker each; {args.dataset} ({ratings.nnz} ratings, "
        f"{ratings.shape[1]} items), rank {args.rank}, STRATA-B B = {args.hosts}, "
        f"shared_memory=False, {lengths[0]} and {lengths[1]} cycles (one chunk each), "
        f"{args.repeats} alternating pairs (medians); "
        f"load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores"
    )
    print(
        "MB the workers sent each other per inner iteration (long minus short run): veth counters, "
        "the model (cluster.work.item_rows_per_iteration), the engine's frames; ms per inner "
        "iteration of the long run after cycle 1; factors bitwise the in-process engine's"
    )
    print(
        f"{'rate':>8s} {'V':>10s} | {'wire':>9s} {'model':>9s} {'wire/model':>10s} "
        f"{'frames':>9s} | {'ms':>7s} | {'bitwise':>7s}"
    )
    for r in rows:
        print(
            f"{r['rate']:>8s} {r['path']:>10s} | {r['wire'] / 1e6:9.4f} {r['model'] / 1e6:9.4f} "
            f"{r['wire'] / r['model']:10.4f} {r['frames'] / 1e6:9.4f} | {r['ms']:7.1f} | "
            f"{str(r['same']):>7s}"
        )
    for r in rows:
        low, high = r["wire_range"]
        print(
            f"{r['rate']:>8s} {r['path']:>10s}: wire per pair {low / 1e6:.4f}-{high / 1e6:.4f} MB"
        )
    worst = max(abs(r["wire"] / r["model"] - 1) for r in rows)
    print(f"largest |wire / model - 1|: {100 * worst:.2f} %")
    if not all(r["same"] for r in rows):
        print("NOT bitwise: a run's factors differ from the in-process engine's", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------ the host's side
def interrupt(signum, frame):
    """SIGTERM / SIGHUP: unwind like Ctrl-C, so everything made is removed."""
    raise KeyboardInterrupt


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rates", nargs="+", default=["none", "1gbit", "100mbit"])
    parser.add_argument("--epochs", type=int, default=4, help="cycles of the short run (long: 2x)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternating (short, long) pairs per point"
    )
    parser.add_argument("--rank", type=int, default=50)
    parser.add_argument("--dataset", default="ml-100k-like")
    parser.add_argument("--inside", help=argparse.SUPPRESS)  # the client's side: our prefix
    args = parser.parse_args(argv)
    try:
        if not 2 <= args.hosts <= 200 or args.epochs < 2 or args.repeats < 1:
            raise ValueError(
                f"--hosts {args.hosts} --epochs {args.epochs} --repeats {args.repeats}: "
                "hosts 2..200, epochs >= 2, repeats >= 1"
            )
        for rate in args.rates:
            if rate != "none":
                rate_bits(rate)
    except ValueError as exc:
        print(f"bench_hosts: {exc}", file=sys.stderr)
        return 2
    if args.inside:
        try:
            return inside(args)
        except KeyboardInterrupt:  # the host's side says so in one line and removes everything
            return 130
        except (RuntimeError, InputError) as exc:  # a tc or ip command, the cluster, a lost peer
            print(f"bench_hosts: {exc}", file=sys.stderr)
            return 1
    reason = unavailable()
    if reason is not None:
        print(f"bench_hosts: skipped: {reason}")
        return 0
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)
    try:
        with Hosts(args.hosts) as hosts:
            argv = [
                "--inside",
                hosts.names.prefix,
                "--hosts",
                str(args.hosts),
                "--rates",
                *args.rates,
            ]
            argv += [
                "--epochs",
                str(args.epochs),
                "--repeats",
                str(args.repeats),
                "--rank",
                str(args.rank),
                "--dataset",
                args.dataset,
            ]
            client = hosts.spawn(
                hosts.names.scheduler_ns, [str(Path(__file__).resolve()), *argv], None
            )
            code = client.wait()
            if code not in (0, 130) and hosts.tail():
                print(hosts.tail(), file=sys.stderr)
            return code
    except KeyboardInterrupt:
        print(
            "bench_hosts: interrupted; removed the namespaces and processes it made",
            file=sys.stderr,
        )
        return 130
    except RuntimeError as exc:
        print(f"bench_hosts: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
