"""Token buckets in shared memory: one table for every worker of a server, no store round trip.

``triage serve --workers N`` creates the table (:meth:`SharedTable.create`, a file in ``/dev/shm``
when there is one) before uvicorn starts its workers, and passes its path in
``TRIAGE_RATE_LIMIT_TABLE``; each worker maps the same file (:meth:`SharedTable.attach`), so a
key's requests spend one bucket whichever worker answers them. A process without that setting
(one worker, the tests' in-process apps) keeps a private table: the same code on anonymous memory.

Layout: a header, then one region per kind of bucket (per key, per tenant) and per kind of remembered
refusal (:meth:`SharedTable.block`: per key, per tenant), each ``sets`` sets of
``WAYS`` slots; a slot is ``(tag, tokens, stamp)`` (u64, f64, f64: 24 bytes). A bucket's name is
hashed (BLAKE2b, 64 bits: the same in every process) to a set and a tag. Taking a token locks the
set's bytes of the file (``fcntl`` byte-range lock, held for a few microseconds; another set,
i.e. almost always another key or tenant, is never waited for) and, within the process, a thread
lock. Stamps are ``time.monotonic()``, one clock for all processes of the machine.

Which slot a name gets, in order: the slot with its tag; else a free one or one whose bucket has
refilled to its burst by now (such a bucket is the same as none, so reusing it loses nothing);
else — its set holds ``WAYS`` live buckets — the slot its hash picks, **shared** with that
slot's owner. Two tags that collide share a bucket the same way. A collision therefore only ever
makes the names that share a bucket limited more (together they get one bucket's rate), never
lets a name past its own limit, with one bound: a name that shared gets a full bucket of its own
once a slot of its set is free again, at most one burst more than its own bucket would have held.
A set is full only with 8 buckets of one region spent within a burst's refill time (2 s at the
defaults) hashed to the same of its 8,192 sets.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import mmap
import os
import re
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

#: Slots per set, sets per region, regions (0: per key, 1: per tenant; 2 and 3: their refusals remembered
#: by a server on PostgreSQL, :meth:`SharedTable.block`, never mixed with buckets).
WAYS = 8
SETS = 8192
REGIONS = 4

_MAGIC = b"TRGRATE1"
_HEADER = struct.Struct("<8sIII")  # magic, sets, ways, regions
_HEADER_BYTES = 64
_SLOT = struct.Struct("<Qdd")
_SET = struct.Struct("<" + "Qdd" * WAYS)
_SET_BYTES = _SET.size
_NAME = re.compile(r"^triage-rate-(\d+)-")


def _size(sets: int, regions: int) -> int:
    return _HEADER_BYTES + regions * sets * _SET_BYTES


def _tag(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little") or 1


class SharedTable:
    """The buckets' slots, in a file shared by the workers or in private memory (``path`` None)."""

    def __init__(self, mm: mmap.mmap, fd: int | None, *, sets: int, regions: int, path: str | None = None) -> None:
        self._mm = mm
        self._fd = fd
        self.sets = sets
        self.regions = regions
        self.path = path
        self._lock = threading.Lock()  # fcntl locks are per process: the threads of one queue here

    # -- making and finding tables ------------------------------------------------------------
    @classmethod
    def private(cls, *, sets: int = SETS, regions: int = REGIONS) -> SharedTable:
        """A table for this process only (anonymous memory, no file lock)."""
        mm = mmap.mmap(-1, _size(sets, regions))
        _HEADER.pack_into(mm, 0, _MAGIC, sets, WAYS, regions)
        return cls(mm, None, sets=sets, regions=regions)

    @classmethod
    def create(cls, directory: str | None = None, *, sets: int = SETS, regions: int = REGIONS) -> str:
        """Create a zeroed table file for the workers of this process (the server's master) and return
        its path; files left by masters that are gone (``kill -9``) are removed first."""
        folder = directory or ("/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None)
        folder = folder or tempfile.gettempdir()
        _sweep(folder)
        fd, path = tempfile.mkstemp(prefix=f"triage-rate-{os.getpid()}-", dir=folder)
        try:
            os.ftruncate(fd, _size(sets, regions))  # sparse: pages are allocated as buckets land on them
            os.pwrite(fd, _HEADER.pack(_MAGIC, sets, WAYS, regions), 0)
        finally:
            os.close(fd)
        return path

    @classmethod
    def attach(cls, path: str) -> SharedTable:
        """Map the table file ``path`` (made by :meth:`create`); ``ValueError`` when it is not one."""
        fd = os.open(path, os.O_RDWR)
        try:
            head = os.pread(fd, _HEADER.size, 0)
            if len(head) < _HEADER.size:
                raise ValueError(f"{path}: not a rate-limit table")
            magic, sets, ways, regions = _HEADER.unpack(head)
            if magic != _MAGIC or ways != WAYS or os.fstat(fd).st_size != _size(sets, regions):
                raise ValueError(f"{path}: not a rate-limit table of this version")
            mm = mmap.mmap(fd, _size(sets, regions))
        except BaseException:
            os.close(fd)
            raise
        return cls(mm, fd, sets=sets, regions=regions, path=path)

    @staticmethod
    def remove(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def close(self) -> None:
        self._mm.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- the bucket operation -----------------------------------------------------------------
    def take(self, region: int, name: str, *, rate: float, burst: float, now: float | None = None) -> float:
        """Take one token from bucket ``name`` of ``region`` (``rate`` a second, at most ``burst``):
        0.0 when granted, else the seconds until one is there."""
        tag = _tag(name)
        off = _HEADER_BYTES + (region * self.sets + tag % self.sets) * _SET_BYTES
        mm, fd = self._mm, self._fd
        with self._lock:
            if fd is not None:
                fcntl.lockf(fd, fcntl.LOCK_EX, _SET_BYTES, off)
            try:
                now = time.monotonic() if now is None else now
                slots = _SET.unpack_from(mm, off)
                way = -1
                for w in range(WAYS):
                    if slots[3 * w] == tag:
                        way = w
                        break
                if way < 0:
                    for w in range(WAYS):
                        t, tokens, stamp = slots[3 * w : 3 * w + 3]
                        if t == 0 or tokens + (now - stamp) * rate >= burst:
                            way = w
                            slots = (*slots[: 3 * w], tag, burst, now, *slots[3 * w + 3 :])
                            break
                if way < 0:
                    way = (tag >> 32) % WAYS  # the set is full of live buckets: share this one
                t, tokens, stamp = slots[3 * way : 3 * way + 3]
                tokens = min(burst, tokens + max(0.0, now - stamp) * rate)
                wait = 0.0
                if tokens >= 1.0:
                    tokens -= 1.0
                else:
                    wait = (1.0 - tokens) / rate
                _SLOT.pack_into(mm, off + way * _SLOT.size, t, tokens, now)
                return wait
            finally:
                if fd is not None:
                    fcntl.lockf(fd, fcntl.LOCK_UN, _SET_BYTES, off)

    def block(self, region: int, name: str, until: float, *, now: float | None = None) -> None:
        """Record that bucket ``name`` of ``region`` has no token before ``until`` (``time.monotonic()``).

        The limiter of a server on PostgreSQL (:mod:`serve.store.limits`) keeps its buckets in the
        database; a refusal it got there is remembered here, so that the server's workers refuse that
        name again without a query until ``until`` (the bucket cannot have a token before then:
        other servers only ever take tokens). A slot is ``(tag, -1.0, until)``; a slot whose
        ``until`` has passed is free. When the set holds ``WAYS`` live blocks nothing is recorded (the
        next request asks the database).
        """
        tag = _tag(name)
        off = _HEADER_BYTES + (region * self.sets + tag % self.sets) * _SET_BYTES
        with self._locked(off):
            now = time.monotonic() if now is None else now
            slots = _SET.unpack_from(self._mm, off)
            free = -1
            for w in range(WAYS):
                t, _, stamp = slots[3 * w : 3 * w + 3]
                if t == tag:
                    free = w
                    break
                if free < 0 and (t == 0 or stamp <= now):
                    free = w
            if free >= 0:
                _SLOT.pack_into(self._mm, off + free * _SLOT.size, tag, -1.0, until)

    def blocked(self, region: int, name: str, *, now: float | None = None) -> float:
        """Seconds until the block :meth:`block` recorded for ``name`` ends; 0.0 when there is none."""
        tag = _tag(name)
        off = _HEADER_BYTES + (region * self.sets + tag % self.sets) * _SET_BYTES
        with self._locked(off):
            now = time.monotonic() if now is None else now
            slots = _SET.unpack_from(self._mm, off)
            for w in range(WAYS):
                if slots[3 * w] == tag:
                    return max(0.0, float(slots[3 * w + 2]) - now)
        return 0.0

    @contextlib.contextmanager
    def _locked(self, off: int) -> Iterator[None]:
        with self._lock:
            if self._fd is not None:
                fcntl.lockf(self._fd, fcntl.LOCK_EX, _SET_BYTES, off)
            try:
                yield
            finally:
                if self._fd is not None:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN, _SET_BYTES, off)

    def live(self, region: int, *, rate: float, burst: float, now: float | None = None) -> int:
        """How many buckets of ``region`` are live (not refilled to their burst) now; for tests and
        diagnostics (reads without locking)."""
        now = time.monotonic() if now is None else now
        base = _HEADER_BYTES + region * self.sets * _SET_BYTES
        n = 0
        for s in range(self.sets):
            slots = _SET.unpack_from(self._mm, base + s * _SET_BYTES)
            for w in range(WAYS):
                t, tokens, stamp = slots[3 * w : 3 * w + 3]
                n += t != 0 and tokens + (now - stamp) * rate < burst
        return n


def _sweep(folder: str) -> None:
    """Remove the table files of masters no longer running (a ``kill -9`` leaves its file behind)."""
    with contextlib.suppress(OSError):
        for entry in Path(folder).iterdir():
            m = _NAME.match(entry.name)
            if m is None or int(m.group(1)) == os.getpid():
                continue
            try:
                os.kill(int(m.group(1)), 0)
            except ProcessLookupError:
                SharedTable.remove(str(entry))
            except PermissionError:
                pass  # another user's live process


__all__ = ["REGIONS", "SETS", "WAYS", "SharedTable"]
