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
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
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
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=self.initializer, initargs=self.initargs)
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


__all__ = ["HelperPool", "drain_on_sigterm", "watch_master"]
