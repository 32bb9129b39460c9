"""Workers on CPUs of their own (serve/supervise.py: ``worker_cpus``, ``pin_worker``): a real ``triage
serve`` pins its worker's threads to one CPU where the machine's CPUs are the server's, a second server
takes another CPU, a third finds none free; the worker's helper process runs on every CPU; ``off`` and a
cgroup quota leave the workers to the kernel."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import httpx
import pytest

from model.data.builder import make_trace
from serve.supervise import cpu_quota, worker_cpus
from tests.conftest import LiveServer, child_pids

LINUX = hasattr(os, "sched_setaffinity") and Path("/proc/self/task").exists()


def _cgroup(tmp_path: Path, lines: str, files: dict[str, str]) -> float | None:
    tmp_path.mkdir()
    (tmp_path / "cgroup").write_text(lines)
    root = tmp_path / "fs"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return cpu_quota(tmp_path / "cgroup", root)


def test_cpu_quota_reads_the_least_limit_up_the_cgroup_path(tmp_path: Path) -> None:
    v2 = "0::/pods/pod1/app\n"
    assert _cgroup(tmp_path / "a", v2, {"pods/pod1/app/cpu.max": "max 100000\n"}) is None
    assert _cgroup(tmp_path / "b", v2, {"pods/pod1/app/cpu.max": "max 100000\n",
                                        "pods/pod1/cpu.max": "150000 100000\n",
                                        "pods/cpu.max": "400000 100000\n"}) == 1.5
    v1 = "5:memory:/x\n4:cpu,cpuacct:/docker/abc\n"
    assert _cgroup(tmp_path / "c", v1, {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n",
                                        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"}) is None
    assert _cgroup(tmp_path / "d", v1, {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
                                        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"}) == 2.0
    assert _cgroup(tmp_path / "e", "4:memory:/x\n", {}) is None  # no cpu controller: no limit found
    assert cpu_quota(tmp_path / "missing", tmp_path) is None


@pytest.mark.skipif(not LINUX, reason="CPU affinity is Linux's")
def test_worker_cpus_pins_only_where_the_cpus_are_the_servers(tmp_path: Path) -> None:
    four = {0, 1, 2, 3}

    def limited(name: str, quota: str) -> tuple[Path, Path]:  # a v2 cgroup whose parent sets cpu.max
        _cgroup(tmp_path / name, "0::/pod/app\n", {"pod/cpu.max": quota})
        return tmp_path / name / "cgroup", tmp_path / name / "fs"

    free, four_cpus, two_cpus = limited("free", "max 100000\n"), limited("q4", "400000 100000\n"), \
        limited("q2", "200000 100000\n")
    assert worker_cpus("auto", 2, 1, cpus=four, cgroup=free) == [3, 2, 1, 0]  # the highest first
    assert worker_cpus("auto", 4, 1, cpus=four, cgroup=four_cpus) == [3, 2, 1, 0]
    assert worker_cpus("off", 2, 1, cpus=four, cgroup=free) == []
    assert worker_cpus("auto", 2, 1, cpus=four, cgroup=two_cpus) == []  # a container's limit on a larger host
    assert worker_cpus("auto", 5, 1, cpus=four, cgroup=free) == []  # more workers than CPUs
    assert worker_cpus("auto", 1, 2, cpus=four, cgroup=free) == []  # onnxruntime's threads need CPUs too
    assert worker_cpus("auto", 1, 1, cpus={2}, cgroup=free) == []  # one CPU: nothing to choose


def _affinities(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of process ``pid``."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # a thread that has just ended
            out.add(frozenset(os.sched_getaffinity(int(task.name))))
    return out


@pytest.mark.skipif(not LINUX, reason="CPU affinity is Linux's")
def test_triage_serve_pins_its_worker_and_its_helper_runs_anywhere(tmp_path: Path) -> None:
    mine = frozenset(os.sched_getaffinity(0))
    if not worker_cpus("auto", 1, 1):
        pytest.skip(f"this machine's CPUs ({sorted(mine)}, quota {cpu_quota()}) would not be pinned")
    cpus = sorted(mine, reverse=True)
    env = {"TRIAGE_AUTH": "off", "TRIAGE_CLASSIFIER": "false", "TMPDIR": str(tmp_path),  # its own CPU claims
           "TRIAGE_HEAVY_BODY_BYTES": "4096", "TRIAGE_CPU_AFFINITY": "auto", "TRIAGE_ORT_THREADS": "1"}
    servers: list[LiveServer] = []
    try:
        for i in range(min(len(cpus), 2) + 1):
            (tmp_path / f"d{i}").mkdir()
            servers.append(LiveServer(env={**env, "TRIAGE_DATA_DIR": str(tmp_path / f"d{i}")}).wait_ready(timeout=120))
        first, second, third = servers[0], servers[1], servers[-1]
        assert _affinities(first.proc.pid) == {frozenset({cpus[0]})}  # every thread, on the first CPU
        assert _affinities(second.proc.pid) == {frozenset({cpus[1]})}  # the next server, the next CPU
        if len(cpus) == 2:
            assert _affinities(third.proc.pid) == {mine}  # none left: the kernel places it
        # a large body goes to the worker's helper process, which runs on every CPU
        trace = make_trace("loop", seed=4, n_steps=30)
        trace.labels = None
        r = httpx.post(f"{first.url}/v1/diagnose", json={"trace": trace.model_dump(mode="json", exclude_none=True)},
                       timeout=120)
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        helpers: list[int] = []
        while time.monotonic() < deadline and not helpers:
            helpers = [p for p in child_pids(first.proc.pid)
                       if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]
            time.sleep(0.1)
        assert helpers and all(_affinities(p) == {mine} for p in helpers)
        assert _affinities(first.proc.pid) == {frozenset({cpus[0]})}  # threads started since: pinned too
        # a restarted server claims the CPU its predecessor held
        first.stop()
        servers.remove(first)
        again = LiveServer(env={**env, "TRIAGE_DATA_DIR": str(tmp_path / "d0")}).wait_ready(timeout=120)
        servers.append(again)
        assert _affinities(again.proc.pid) == {frozenset({cpus[0]})}
    finally:
        for s in servers:
            s.stop()


@pytest.mark.skipif(not LINUX, reason="CPU affinity is Linux's")
def test_cpu_affinity_off_leaves_the_worker_to_the_kernel(tmp_path: Path) -> None:
    mine = frozenset(os.sched_getaffinity(0))
    srv = LiveServer(env={"TRIAGE_AUTH": "off", "TRIAGE_CLASSIFIER": "false", "TMPDIR": str(tmp_path),
                          "TRIAGE_DATA_DIR": str(tmp_path), "TRIAGE_CPU_AFFINITY": "off"}).wait_ready(timeout=120)
    try:
        assert _affinities(srv.proc.pid) == {mine}
        assert not list((tmp_path / "triage-cpus").glob("cpu-*.lock"))
    finally:
        srv.stop()
