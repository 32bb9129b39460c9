"""Workers that go down with their master: ``kill -9`` of ``triage serve`` leaves nothing serving.

uvicorn's ``--workers N`` master forks (spawns) N worker processes that share its listening
socket. When the master is killed with SIGKILL it cannot stop them: they keep serving, orphaned,
holding the port, and the next ``triage serve`` fails with "Address already in use".

Each worker therefore watches its master (:func:`watch_master`, started in the app's lifespan):

- a thread waits for the master's exit and then sends the worker SIGTERM: on Linux it waits on a
  descriptor of the master's process (``pidfd_open``), which wakes it when the master exits, at once;
  elsewhere it checks every ``poll_s`` whether its parent is still the master. (Not the kernel's
  parent-death signal, ``prctl(PR_SET_PDEATHSIG)``: it follows the *thread* that started the process,
  so a process started from a thread that ends before its parent, a request's or a pool's, would be
  stopped then. Any helper process a worker starts calls :func:`watch_master` too.)
- SIGTERM is uvicorn's graceful shutdown (requests in flight are answered); a worker still alive
  ``grace_s`` later exits at once.

A single-process ``triage serve`` (one worker) *is* the master: nothing to watch.

And a worker behind a load balancer drains on SIGTERM (:func:`drain_on_sigterm`): it answers
``/readyz`` 503 for ``TRIAGE_DRAIN_S`` seconds while it still serves (the balancer stops sending it
requests), then runs uvicorn's graceful shutdown: the listening socket closed, idle keep-alive
connections closed, the requests in flight answered (for at most ``TRIAGE_DRAIN_TIMEOUT_S``), the
lifespan's end; ``triage serve`` then exits 0.

And each worker runs on a CPU of its own where the machine's CPUs are the server's
(:func:`worker_cpus`, :func:`pin_worker`; ``TRIAGE_CPU_AFFINITY``). A request crosses two threads of
its worker (the event loop's, which reads it and writes the answer, and a pool thread's, which diagnoses
and stores), and only one of them runs Python at a time (the GIL); placed by the kernel they run on
either CPU. Pinned, they share one CPU's caches, and a request is answered 6–15 % sooner with a little
less CPU (docs/benchmarks.md, "Round 12"). The helper processes a worker starts (:class:`HelperPool`)
run on every CPU again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

log = logging.getLogger("triage.serve")


def _wait_for_exit(pid: int, gone: Callable[[], bool], poll_s: float) -> None:
    """Return once process ``pid`` has exited: on a descriptor of it (Linux 5.3+, ``os.pidfd_open``), which
    turns readable at its exit; else (or where it cannot be opened) when ``gone()`` says so, checked every
    ``poll_s``."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or it has gone already
        fd = None
    if fd is not None:
        try:
            waiter = select.poll()
            waiter.register(fd, select.POLLIN)
            if not gone():  # (its pid may have been another process's by the time it was opened)
                while not waiter.poll():
                    pass
            return
        finally:
            os.close(fd)
    while not gone():
        time.sleep(poll_s)


def watch_master(*, poll_s: float = 0.5, grace_s: float = 10.0) -> bool:
    """In a worker process: stop this process when its master goes. Returns whether it watches.

    Does nothing (returns False) in a process that was not started by ``multiprocessing`` (the
    single-process server).
    """
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return False
    master = parent.pid

    def orphaned() -> bool:
        return os.getppid() != master

    def watch() -> None:
        _wait_for_exit(master, orphaned, poll_s)
        log.warning("the server's master process %d is gone: this worker (%d) stops", master, os.getpid())
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        log.error("worker %d still running %.0f s after its master died: exiting now", os.getpid(), grace_s)
        os._exit(70)

    threading.Thread(target=watch, name="triage-master-watch", daemon=True).start()
    return True


#: The CPUs this process could run on before :func:`pin_worker` pinned it (None: not pinned); its helpers get them back.
_UNPINNED: frozenset[int] | None = None
_CLAIMS: list[int] = []  # the lock files of the CPUs this process claimed, open for its life


def cpu_quota(cgroup_file: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs this process's cgroups allow it: the least ``quota ÷ period`` along its cgroup's path
    (cgroup v2's ``cpu.max``, v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``); None where none sets one
    (or nothing can be read: not Linux)."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        names = controllers.split(",")
        if controllers == "":  # v2: one hierarchy
            base, read = root, _v2_quota
        elif "cpu" in names:  # v1: the cpu controller's hierarchy (mounted as cpu or cpu,cpuacct)
            base = next((root / d for d in (controllers, "cpu", "cpu,cpuacct") if (root / d).is_dir()), root / "cpu")
            read = _v1_quota
        else:
            continue
        rel = Path(path.lstrip("/"))
        for d in (rel, *rel.parents):
            q = read(base / d)
            if q is not None:
                found.append(q)
    return min(found) if found else None


def _v2_quota(d: Path) -> float | None:
    try:
        quota, period = (d / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(d: Path) -> float | None:
    try:
        quota = int((d / "cpu.cfs_quota_us").read_text())
        period = int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota < 0 or period <= 0 else quota / period


def worker_cpus(setting: str, workers: int, ort_threads: int, *, cpus: set[int] | None = None,
                cgroup: tuple[Path, Path] = (Path("/proc/self/cgroup"), Path("/sys/fs/cgroup"))) -> list[int]:
    """The CPUs ``triage serve``'s ``workers`` may claim, one each, in the order they claim them (the
    highest first: CPU 0 takes most interrupts); ``[]`` leaves them to the kernel. ``cpus``: this process's
    CPUs (default: its affinity); ``cgroup``: where :func:`cpu_quota` reads.

    Under ``auto`` the workers are pinned only where the CPUs are the server's: more than one of them, no
    more workers than CPUs, no cgroup quota below them (a container's CPU limit on a shared host: pinned,
    a worker could not leave a CPU another tenant keeps busy), and one onnxruntime thread (more would
    share the worker's one CPU)."""
    if setting != "auto" or ort_threads > 1 or not hasattr(os, "sched_setaffinity"):
        return []
    mine = set(os.sched_getaffinity(0)) if cpus is None else cpus
    limit = cpu_quota(*cgroup)
    if len(mine) < 2 or workers > len(mine) or (limit is not None and limit < len(mine)):
        return []
    return sorted(mine, reverse=True)


def pin_worker(cpus: list[int], lock_dir: Path | None = None) -> int | None:
    """Pin every thread of this worker to the first CPU of ``cpus`` that no other worker on this machine
    has claimed, and return it (None: each is claimed, or it could not be pinned). A claim is a lock
    (``flock``) on ``lock_dir/cpu-N.lock`` (default: the system's temporary folder's ``triage-cpus``),
    held while the process lives: a restarted worker finds its predecessor's CPU free again, and two
    servers on one machine spread over its CPUs. Threads started later inherit the CPU."""
    global _UNPINNED
    import fcntl
    import tempfile

    folder = lock_dir or Path(tempfile.gettempdir()) / "triage-cpus"
    try:
        folder.mkdir(mode=0o777, exist_ok=True)
    except OSError as exc:
        log.info("worker %d not pinned to a CPU: %s", os.getpid(), exc)
        return None
    before = frozenset(os.sched_getaffinity(0))
    for cpu in cpus:
        if cpu not in before:
            continue
        try:
            fd = os.open(folder / f"cpu-{cpu}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            _set_threads({cpu})  # the threads started so far; later ones inherit it
        except OSError as exc:
            with contextlib.suppress(OSError):
                _set_threads(before)
            os.close(fd)
            log.info("worker %d not pinned to a CPU: %s", os.getpid(), exc)
            return None
        _CLAIMS.append(fd)
        _UNPINNED = before
        log.info("worker %d runs on CPU %d (TRIAGE_CPU_AFFINITY=off leaves it to the kernel)", os.getpid(), cpu)
        return cpu
    log.info("worker %d not pinned: each of CPUs %s is another worker's", os.getpid(), cpus)
    return None


def _set_threads(cpus: frozenset[int] | set[int]) -> None:
    """Every thread of this process on ``cpus``."""
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that has just ended
            os.sched_setaffinity(int(task.name), cpus)


def _helper_start(cpus: frozenset[int] | None, initializer: Callable[..., None], *initargs: Any) -> None:
    """A helper process's start: every CPU its worker had before it was pinned, then ``initializer``."""
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)
    initializer(*initargs)


class HelperPool:
    """A worker's helper process: a spawned ``ProcessPoolExecutor`` of one, started on first use with
    ``initializer(*initargs)`` (which calls :func:`watch_master`, so that it stops with its worker). The heavy and
    flood lanes' (``serve/heavy.py``) and the failure patterns' (``serve/services/patterns.py``)."""

    def __init__(self, initializer: Callable[..., None], initargs: tuple[Any, ...]) -> None:
        self.initializer = initializer
        self.initargs = initargs
        self.started = 0  # helper processes started so far
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def executor(self) -> ProcessPoolExecutor:
        """The helper's executor, a new helper's when none runs."""
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_helper_start, initargs=(_UNPINNED, self.initializer, *self.initargs))
                self.started += 1
            return self._pool

    def stop(self, pool: ProcessPoolExecutor) -> bool:
        """Stop ``pool``'s helper now (what it runs and what waits for it is not answered); whether ``pool`` was
        the current one (the next :meth:`executor` starts a new helper)."""
        with self._lock:
            current = self._pool is pool
            if current:
                self._pool = None
        procs = list((getattr(pool, "_processes", None) or {}).values())  # else exit would wait for its work
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        return current

    def close(self) -> None:
        """Stop the helper now (the worker's end)."""
        pool = self._pool
        if pool is not None:
            self.stop(pool)


def drain_on_sigterm(state: Any, drain_s: float) -> bool:
    """In a worker's lifespan (uvicorn's main thread and loop): on SIGTERM set ``state.draining``
    (``/readyz`` answers 503) and hand the signal to uvicorn's handler ``drain_s`` seconds later; a
    second SIGTERM hands it over at once. Returns whether it is installed (not where the lifespan runs
    outside the main thread, as in the tests' in-process clients, nor without a handler to hand over to).
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return False
    loop = asyncio.get_running_loop()

    def stop(sig: int) -> None:
        log.info("worker %d: draining over, shutting down (in-flight requests are answered)", os.getpid())
        previous(sig, None)

    def on_term(sig: int, frame: Any) -> None:
        if getattr(state, "draining", False) or drain_s <= 0:
            state.draining = True
            previous(sig, frame)
            return
        state.draining = True
        log.warning("worker %d: SIGTERM, /readyz answers 503 for %.3g s, then shutting down", os.getpid(), drain_s)
        loop.call_soon_threadsafe(loop.call_later, drain_s, stop, sig)

    signal.signal(signal.SIGTERM, on_term)
    return True


__all__ = ["HelperPool", "cpu_quota", "drain_on_sigterm", "pin_worker", "watch_master", "worker_cpus"]
