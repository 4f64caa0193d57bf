"""No port or file of hamsi runs a stranger's code; TLS clusters work.

Everything on 127.0.0.1. The payloads are harmless: unpickled, they would create a marker file.
"""

import os
import pickle
import shutil
import socket
import struct
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
from helpers import ConnectionFlood, checkpoint_state

import partition
from cluster import checkpoint as ckpt
from cluster.connect import connect
from cluster.driver import fit_distributed
from cluster.links import DESCRIPTOR, FRAME, FRAME_MAGIC, FrameLimit, FrameRefused, Links, _Inbound
from hamsi.data.synth import make_ratings
from hamsi.errors import InputError
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization

RANK = 4


class CreatesFile:
    """Unpickling this opens (creates) `path`: proof that a pickle was loaded."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def payloads(marker) -> list[bytes]:
    """The bytes a stranger sends: a bare pickle, and one framed as the old links hello was."""
    data = pickle.dumps(CreatesFile(marker), protocol=5)
    return [data, struct.pack("!QQ", len(data), 0) + data, b"HMSL" + data.ljust(400, b"\0")]


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=120, items=90, ratings=1500, seed=3)


def in_process_x(ratings, part, epochs):
    return minimize_hamsi(
        MatrixFactorization(ratings, RANK), part, random_state=1, max_cycles=epochs, threads=1
    ).x


# ---------------------------------------------------------------------------- the links port
def worker_extra_ports(client) -> list[int]:
    """Return every TCP port the worker processes listen on besides their Dask worker and nanny ports."""
    import psutil

    info = client.scheduler_info()["workers"]
    dask_ports = {int(a.rsplit(":", 1)[1]) for a in info} | {
        int(w["nanny"].rsplit(":", 1)[1]) for w in info.values()
    }
    ports = []
    for pid in client.run(os.getpid).values():
        process = psutil.Process(pid)
        connections = (
            process.net_connections("tcp")
            if hasattr(process, "net_connections")
            else process.connections("tcp")
        )
        ports += [
            c.laddr.port
            for c in connections
            if c.status == psutil.CONN_LISTEN and c.laddr.port not in dask_ports
        ]
    return ports


def send_quietly(port: int, data: bytes) -> None:
    """Send `data` to 127.0.0.1:port and read whatever comes back until the other side closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass
        except OSError:  # the listener closed the connection: what it should do
            pass


@pytest.mark.cluster
def test_a_pickle_sent_to_every_extra_worker_port_during_a_run_is_never_loaded(ratings, tmp_path):
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    marker = tmp_path / "pwned"
    attacked = []

    def attack(info):
        if info["chunk"] == 1:
            ports = worker_extra_ports(info["client"])
            for port in ports:
                for data in payloads(marker):
                    send_quietly(port, data)
            attacked.extend(ports)

    with connect(n_workers=2, quiet=True) as client:
        got = fit_distributed(
            ratings,
            rank=RANK,
            partition=part,
            random_state=1,
            max_cycles=4,
            chunk_cycles=2,
            client=client,
            on_chunk=attack,
            shared_memory=False,
        )
    assert len(attacked) >= 2, "each worker listens for its direct links"
    assert not marker.exists()
    assert not got.recoveries
    assert np.array_equal(got.x, in_process_x(ratings, part, 4))


@pytest.mark.cluster
def test_idle_and_slow_drip_connections_to_every_links_port_leave_the_fit_undisturbed(ratings):
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    floods = []

    def flood(info):
        if info["chunk"] == 0:  # the tasks of chunk 0 open their links under the flood too
            floods.append(ConnectionFlood(worker_extra_ports(info["client"]), idle=200, drip=64))
            floods[0].__enter__()
            time.sleep(1.0)  # every hello slot taken before the links open

    with connect(n_workers=2, quiet=True) as client:
        try:
            got = fit_distributed(
                ratings,
                rank=RANK,
                partition=part,
                random_state=1,
                max_cycles=6,
                chunk_cycles=2,
                client=client,
                on_chunk=flood,
                shared_memory=False,
            )
        finally:
            for f in floods:
                f.stop()
    assert floods and floods[0].opened >= 2 * (200 + 64)
    assert not got.recoveries
    assert np.array_equal(got.x, in_process_x(ratings, part, 6))


def test_the_hello_reads_only_its_fixed_size_and_refuses_strangers(tmp_path):
    links = Links("tcp://127.0.0.1:1", "127.0.0.1")
    try:
        links.expect("run", b"s" * 32, FrameLimit())
        marker = tmp_path / "pwned"
        tracemalloc.start()
        for data in payloads(marker) + [
            struct.pack("!QQ", 1 << 30, 0)
        ]:  # a 16-byte header claiming 1 GB
            send_quietly(links.address[1], data)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 1 << 20 and not marker.exists() and not links._accepted
    finally:
        links.shutdown()


ACCEPT_AFTER_EMFILE = """
import os, resource, socket, threading, time
from cluster.links import FrameLimit, Links

a, b = Links("tcp://127.0.0.1:1", "127.0.0.1"), Links("tcp://127.0.0.1:2", "127.0.0.1")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 3, hard))
strangers = []
try:
    for _ in range(8):  # b's accept() then fails with EMFILE on the ones the kernel queued
        strangers.append(socket.create_connection(b.address, timeout=1))
except OSError:
    pass
time.sleep(0.5)
for sock in strangers:
    sock.close()
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
for links in (a, b):
    links.expect("r", b"s" * 32, FrameLimit())
opener = threading.Thread(target=a.open, args=("r", {b.worker_address: b.address}, 10.0))
opener.start()
b.open("r", {a.worker_address: a.address}, 10.0)  # a's link arrives through b's accept thread
opener.join()
print("linked")
"""


def test_the_listener_keeps_accepting_after_running_out_of_file_descriptors():
    done = subprocess.run(
        [sys.executable, "-c", ACCEPT_AFTER_EMFILE], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "linked", done.stderr


def test_a_frame_claiming_one_gigabyte_is_refused_before_allocating():
    """An authenticated peer's frame is still bounded by the run's sizes."""
    limit = FrameLimit(max_arrays=8, max_array_bytes=1 << 20)
    claims = [
        FRAME.pack(FRAME_MAGIC, 1) + DESCRIPTOR.pack(1, 1, 1 << 27, 0),  # 2^27 doubles = 1 GiB
        FRAME.pack(FRAME_MAGIC, 1 << 31),  # 2^31 arrays
        FRAME.pack(FRAME_MAGIC, 1) + DESCRIPTOR.pack(9, 1, 4, 0),  # a dtype off the whitelist
        FRAME.pack(b"\x80\x05\x95\x00", 1),
    ]  # not a frame at all (a pickle's first bytes)
    for claim in claims:
        left, right = socket.socketpair()
        try:
            left.sendall(claim)
            right.setblocking(False)
            tracemalloc.start()
            with pytest.raises(FrameRefused):
                _Inbound(limit).feed(right)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert peak < 1 << 20
        finally:
            left.close()
            right.close()


# ---------------------------------------------------------------------------- checkpoints
def crafted(tmp_path, marker, **entries):
    """Write a real checkpoint, then replace some of its entries; return its directory."""
    directory = tmp_path / "ckpt"
    ckpt.save(directory, **checkpoint_state())
    with np.load(directory / ckpt.FILENAME) as data:
        kept = {k: data[k] for k in data.files}
    kept.update(entries)
    np.savez(directory / ckpt.FILENAME, **kept)
    return directory


def test_a_crafted_checkpoint_is_refused_naming_the_file(tmp_path):
    marker = tmp_path / "pwned"
    pickled = np.frombuffer(pickle.dumps({"trace": [], "x": CreatesFile(marker)}), dtype=np.uint8)
    cases = {
        "pickled meta (the old format)": dict(meta=pickled),
        "an object array": dict(meta=np.array([CreatesFile(marker)], dtype=object)),
        "a class outside the list": dict(
            meta=np.frombuffer(
                b'{"dict": {"s": {"object": "Popen", "fields": {}}}}', dtype=np.uint8
            )
        ),
    }
    for name, entries in cases.items():
        directory = crafted(tmp_path, marker, **entries)
        with pytest.raises(InputError, match=str(directory / ckpt.FILENAME)):
            ckpt.load(directory, checkpoint_state()["fingerprint"])
        assert not marker.exists(), name
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / ckpt.FILENAME).write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(InputError, match="junk"):
        ckpt.load(tmp_path / "junk", checkpoint_state()["fingerprint"])


def test_checkpoint_state_keeps_the_stepper_bit_for_bit(tmp_path):
    state = checkpoint_state()
    stepper = state["meta"]["stepper"]
    stepper.best_objective, stepper.step_scale = 0.1 + 0.2, 0.5**3
    state["meta"]["trace"].append((2, 6, 0.2, 1.0, float("nan"), 1.1))
    ckpt.save(tmp_path, **state)
    _, meta = ckpt.load(tmp_path, state["fingerprint"])
    back = meta["stepper"]
    assert back.best_objective == 0.1 + 0.2 and back.step_scale == 0.5**3
    assert np.array_equal(back.cycle(2), stepper.cycle(2))  # the rng state came back exactly
    assert np.array_equal(back.gram, stepper.gram) and back.lbfgs.memory == stepper.lbfgs.memory
    assert meta["trace"][2][:2] == (2, 6) and np.isnan(meta["trace"][2][4])


# ---------------------------------------------------------------------------- TLS
def make_certificates(directory) -> dict:
    """Return {ca, cert, key}: a self-signed CA and a certificate it signed (openssl CLI)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make test certificates")
    d = str(directory)

    def run(*args):
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=d)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=hamsi test CA",
    )
    run("req", *ec, "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=127.0.0.1")
    run(
        "x509",
        "-req",
        "-in",
        "node.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "node.pem",
        "-days",
        "2",
    )
    return {
        name: os.path.join(d, file)
        for name, file in (("ca", "ca.pem"), ("cert", "node.pem"), ("key", "node.key"))
    }


def tls_security(files):
    from distributed.security import Security

    return Security(
        tls_ca_file=files["ca"],
        require_encryption=True,
        **{
            f"tls_{role}_{part}": files[part]
            for role in ("client", "scheduler", "worker")
            for part in ("cert", "key")
        },
    )


@pytest.mark.cluster
def test_a_tls_cluster_gives_the_in_process_iterates(ratings, tmp_path):
    files = make_certificates(tmp_path)
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    with connect(n_workers=2, quiet=True, security=tls_security(files)) as client:
        assert all(a.startswith("tls://") for a in client.scheduler_info()["workers"])
        for owned in (
            False,
            True,
        ):  # through the comms: one message for all, or one per peer (owned V)
            got = fit_distributed(
                ratings,
                rank=RANK,
                partition=part,
                random_state=1,
                max_cycles=3,
                chunk_cycles=2,
                client=client,
                shared_memory=False,
                owned_v=owned,
            )
            assert not got.recoveries and got.owned_v is owned
            assert np.array_equal(got.x, in_process_x(ratings, part, 3))
            assert sum(got.worker_bytes_sent.values()) > 0


@pytest.mark.cluster
@pytest.mark.slow
def test_the_cli_runs_on_a_tls_scheduler_with_the_tls_flags(ratings, tmp_path):
    from distributed import LocalCluster

    from hamsi.data.writers import write_ratings

    files = make_certificates(tmp_path)
    data = tmp_path / "r.csv"
    write_ratings(ratings, str(data))
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        host="127.0.0.1",
        protocol="tls://",
        dashboard_address=":0",
        security=tls_security(files),
    ) as cluster:
        base = [
            sys.executable,
            "-m",
            "hamsi",
            "factorize",
            str(data),
            "--rank",
            "3",
            "--max-cycles",
            "2",
            "-q",
            "--scheduler",
            cluster.scheduler_address,
        ]
        plain = subprocess.run(base, capture_output=True, text=True, timeout=120)
        flags = [
            "--tls-ca-file",
            files["ca"],
            "--tls-cert",
            files["cert"],
            "--tls-key",
            files["key"],
        ]
        done = subprocess.run(base + flags, capture_output=True, text=True, timeout=120)
    assert (
        plain.returncode == 2 and plain.stderr.count("\n") == 1 and "--tls-ca-file" in plain.stderr
    )
    assert done.returncode == 0, done.stderr
