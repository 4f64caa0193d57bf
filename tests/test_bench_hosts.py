"""benchmarks/bench_hosts.py: emulated hosts in network namespaces, bytes against the model, cleanup."""

import importlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_hosts.py"


@pytest.fixture
def bench_hosts(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("bench_hosts")


def netns_reason() -> str | None:
    """Return why namespaces cannot be made here (the benchmark's own check), or None."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("bench_hosts").unavailable()
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


REASON = netns_reason()
needs_netns = pytest.mark.skipif(REASON is not None, reason=f"bench_hosts: {REASON}")


def env() -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH")) if p)
    return out


def namespaces(prefix: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


def still_ours(pid: int) -> bool:
    """Return whether pid is still one of the run's processes (not exited, not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"distributed.cli" in cmdline or b"bench_hosts" in cmdline


def test_not_root_prints_one_line_and_exits_0(bench_hosts, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert bench_hosts.main(["--hosts", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "bench_hosts: skipped: needs root (it makes network namespaces, veth pairs and a bridge)"
    ]


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--rates", "none", "10xbit"], "'10xbit'"),
        (["--hosts", "1"], "--hosts 1"),
        (["--repeats", "0"], "--repeats 0"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(bench_hosts, capsys, argv, named):
    assert bench_hosts.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("bench_hosts: ") and named in err[0]


def test_a_one_off_transfer_in_one_pair_moves_no_printed_figure(bench_hosts):
    """Medians over the pairs: a pair whose short run carried 70 kB more is outvoted."""

    def run(nit, wire, same=True):
        return {
            "nit": nit,
            "wire": wire,
            "frames": wire - 10.0,
            "model": wire - 20.0,
            "ms": 5.0,
            "same": same,
        }

    clean = [run(8, 1000.0 + 8 * 1.0e5), run(16, 1000.0 + 16 * 1.0e5)]
    late = [run(8, 71000.0 + 8 * 1.0e5), run(16, 1000.0 + 16 * 1.0e5)]
    row = bench_hosts.median_row("none", True, [clean, late, clean])
    assert row["wire"] == 1.0e5 and row["path"] == "owned" and row["same"]
    assert row["wire_range"] == (1.0e5 - 70000.0 / 8, 1.0e5)
    assert not bench_hosts.median_row("none", False, [clean, [clean[0], run(16, 0.0, False)]])[
        "same"
    ]


@pytest.mark.slow
@pytest.mark.cluster
@needs_netns
def test_two_emulated_hosts_bytes_match_the_model_and_iterates_are_bitwise():
    """Wire bytes within 3 % of the model, every run bitwise in process, tbf slows the rounds, nothing left."""
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--hosts",
            "2",
            "--epochs",  # 8 cycles between a pair's runs: a one-off transfer of ~100 kB in one
            "8",  # of them moved 2 cycles' per-iteration bytes by 1.3-1.5 % (on a busy and on a quiet machine)
            "--repeats",
            "3",
            "--rates",
            "none",
            "100mbit",
        ],
        capture_output=True,
        text=True,
        env=env(),
        cwd=ROOT,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    prefix = re.search(r"namespaces (hb\d+-)\*", proc.stdout).group(1)
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(
            r"\s*(\S+)\s+(replicated|owned) \|\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+) \|\s+(\S+) \|\s+(\S+)",
            line,
        )
        if m:
            rows[m.group(1), m.group(2)] = m.groups()[2:]
    assert set(rows) == {(r, p) for r in ("none", "100mbit") for p in ("replicated", "owned")}
    for (rate, path), (wire, model, _ratio, frames, _ms, same) in rows.items():
        assert same == "True", (rate, path)
        # what the engine wrote is the model's bytes plus the partials and the frames' own bytes
        # (0.1 %): this part has no timing in it
        assert 1.0 <= float(frames) / float(model) <= 1.01, (rate, path, frames, model)
        # the veth counters also count TCP/IP headers and ACKs, whose number follows the kernel's
        # segment coalescing and delayed ACKs (timing), and wire is a difference of two runs'
        # counters. Under tbf the segments are regular (100 Mbit/s: 1.3497-1.3502 MB for owned V
        # against the model's 1.3456); unlimited, owned V at 2 hosts read 1.3485-1.3743 MB on a
        # quiet machine (medians of 3 pairs; single pairs 1.3380-1.3872), 1.3278 on a busy one
        # and 1.3997 once in the whole suite run in one process
        tolerance = 0.03 if rate != "none" else 0.06
        assert abs(float(wire) / float(model) - 1) <= tolerance, (rate, path, wire, model)
        # headers come on top of the frames (an owned-V run at 2 hosts once read 1.3455 MB
        # against 1.3468 frames: the two runs' difference moves by about 0.1 %)
        assert float(wire) >= 0.995 * float(frames), (rate, path, wire, frames)
    # at 100 Mbit/s a worker's half of the replicated bytes takes at least that long to arrive
    wire, ms = float(rows["100mbit", "replicated"][0]), float(rows["100mbit", "replicated"][4])
    assert ms >= 0.9 * 1e3 * (wire * 1e6 / 2) / (100e6 / 8), ms
    assert namespaces(prefix) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))


@pytest.mark.slow
@pytest.mark.cluster
@needs_netns
def test_ctrl_c_removes_namespaces_and_processes():
    """SIGINT to the run's process group (a Ctrl-C) mid-run: exit 130, one line, nothing left."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--hosts", "2", "--epochs", "2", "--rates", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=ROOT,
        start_new_session=True,
        # as in a terminal: a background job's children start with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    prefix = f"hb{proc.pid}-"
    try:
        pids, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline and len(pids) < 4:  # scheduler, client, two workers
            time.sleep(0.5)
            pids = [
                int(pid)
                for ns in namespaces(prefix)
                for pid in subprocess.run(
                    ["ip", "netns", "pids", ns], capture_output=True, text=True
                ).stdout.split()
            ]
        assert len(pids) == 4, pids
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert (
        err.strip().splitlines()[-1]
        == "bench_hosts: interrupted; removed the namespaces and processes it made"
    )
    assert namespaces(prefix) == []
    assert not [pid for pid in pids if still_ours(pid)]
    assert not list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))
