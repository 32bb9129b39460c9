"""Workers that go down with their master: ``kill -9`` of ``triage serve`` leaves nothing serving.

uvicorn's ``--workers N`` master forks (spawns) N worker processes that share its listening
socket. When the master is killed with SIGKILL it cannot stop them: they keep serving, orphaned,
holding the port, and the next ``triage serve`` fails with "Address already in use".

Each worker therefore watches its master (:func:`watch_master`, started in the app's lifespan):

- on Linux it asks the kernel for SIGTERM when the master dies (``prctl(PR_SET_PDEATHSIG)``);
- everywhere, a thread checks every ``poll_s`` whether its parent is still the master, and sends
  itself SIGTERM when it is not;
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
import ctypes
import ctypes.util
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any

log = logging.getLogger("triage.serve")

_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(sig: int) -> bool:
    """Linux: deliver ``sig`` to this process when its parent exits. False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def watch_master(*, poll_s: float = 0.5, grace_s: float = 10.0) -> bool:
    """In a worker process: stop this process when its master goes. Returns whether it watches.

    Does nothing (returns False) in a process that was not started by ``multiprocessing`` (the
    single-process server).
    """
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return False
    master = parent.pid
    _set_parent_death_signal(signal.SIGTERM)

    def orphaned() -> bool:
        return os.getppid() != master

    def watch() -> None:
        while not orphaned():
            time.sleep(poll_s)
        log.warning("the server's master process %d is gone: this worker (%d) stops", master, os.getpid())
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        log.error("worker %d still running %.0f s after its master died: exiting now", os.getpid(), grace_s)
        os._exit(70)

    threading.Thread(target=watch, name="triage-master-watch", daemon=True).start()
    return True


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


__all__ = ["drain_on_sigterm", "watch_master"]
