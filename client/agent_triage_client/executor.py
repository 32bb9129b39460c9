"""The reference repair executor, first part: snapshots per message with ``rollback``, and ``retry``.

The service recommends; this module carries two of its strategies out for an agent that keeps
its conversation as a list of messages (OpenAI shape) and, beside it, any state of its own
(a scratchpad, a plan, tool caches: dicts, lists, scalars, nested as deep as you like).

- :class:`Snapshots` keeps the state as it was **before each message**, stored as differences
  from the previous snapshot (a growing message list costs only its new tail), and restores any
  of them exactly: the same values, the same types, the same key order, sharing nothing with
  what the agent holds.
- :class:`RepairExecutor` sends each new message to ``POST /v1/sessions/{id}/steps`` (snapshot
  first), and carries out

  * ``rollback``: back to the snapshot before the message the recommendation names by
    ``source_index`` (``params.to_source_index``), the session's messages and state both;
  * ``retry``: call again after a backoff with jitter, never sooner than ``retry_after`` (from the
    recommendation's params or from the error itself), reporting each attempt's outcome so a
    failed one climbs the ladder. It retries only while the service answers with another
    ``retry``; it never goes past the ``max_attempts`` the service gave, nor waits past the task's
    ``task_recovery_s_left``. When the service is down it **fails open**: no retry of its own, the
    error goes back to the agent as if triage were absent.

The other strategies (``adjust_parameters``, ``switch_tool``, the injected instructions,
``replan_*``, ``fallback_model``, ``human_handoff``) are not carried out here yet.

>>> s = Snapshots()
>>> state = {"plan": ["a"], "seen": {"x": 1}}
>>> s.take(0, state)
>>> state["plan"].append("b"); state["seen"]["y"] = 2
>>> s.take(1, state)
>>> s.restore(0)
{'plan': ['a'], 'seen': {'x': 1}}
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_triage_client._client import TriageClient
from agent_triage_client.models import Recommendation, SessionStep

# -- differences ---------------------------------------------------------------------------------
# A difference turns one value into another:
#   ("set", value)                       replace by (a private copy of) value
#   ("dict", {key: diff}, (deleted...))  change some keys of a dict in place (order kept)
#   ("list", {index: diff}, length, tail) change some items, cut to ``length``, then append ``tail``
_Diff = tuple[Any, ...]


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``1 == 1.0 == True`` is not enough)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays, whose == is elementwise
        return False


def _diff(old: Any, new: Any) -> _Diff | None:
    """The difference that turns ``old`` into ``new``; ``None`` when they are the same."""
    if _same(old, new):
        return None
    if type(old) is dict and type(new) is dict:
        kept = [k for k in old if k in new]
        if kept + [k for k in new if k not in old] != list(new):  # key order changed: replace
            return ("set", copy.deepcopy(new))
        changes: dict[Any, _Diff] = {}
        for k in new:
            d = _diff(old[k], new[k]) if k in old else ("set", copy.deepcopy(new[k]))
            if d is not None:
                changes[k] = d
        return ("dict", changes, tuple(k for k in old if k not in new))
    if type(old) is list and type(new) is list:
        common = min(len(old), len(new))
        items = {i: d for i in range(common) if (d := _diff(old[i], new[i])) is not None}
        return ("list", items, common, copy.deepcopy(new[common:]))
    return ("set", copy.deepcopy(new))


def _apply(value: Any, diff: _Diff) -> Any:
    """``value`` changed by ``diff`` (in place where it can; use the result)."""
    tag = diff[0]
    if tag == "set":
        return copy.deepcopy(diff[1])
    if tag == "dict":
        _, changes, deleted = diff
        for k in deleted:
            del value[k]
        for k, d in changes.items():
            value[k] = _apply(value[k], d) if k in value else _apply(None, d)
        return value
    _, items, length, tail = diff
    for i, d in items.items():
        value[i] = _apply(value[i], d)
    del value[length:]
    value.extend(copy.deepcopy(tail))
    return value


class Snapshots:
    """The state before each message, as differences; :meth:`restore` gives any of them back exactly.

    Keys are message ``source_index`` values, increasing. The first snapshot is kept whole, each
    later one as its difference from the one before; the latest is also kept whole, so taking a
    snapshot costs one comparison with it.
    """

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._base: Any = None
        self._diffs: list[_Diff | None] = []  # _diffs[i]: snapshot i-1 → snapshot i (None: unchanged)
        self._last: Any = None

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, source_index: object) -> bool:
        return source_index in self._keys

    @property
    def keys(self) -> list[int]:
        return list(self._keys)

    def take(self, source_index: int, state: Any) -> None:
        """Keep ``state`` as it is now, as the state before message ``source_index``."""
        if self._keys and source_index <= self._keys[-1]:
            raise ValueError(f"source_index must increase: {source_index} after {self._keys[-1]}")
        if not self._keys:
            self._base = copy.deepcopy(state)
            self._diffs.append(None)
        else:
            self._diffs.append(_diff(self._last, state))
        self._last = copy.deepcopy(state)
        self._keys.append(source_index)

    def get(self, source_index: int) -> Any:
        """A private copy of the state before message ``source_index``."""
        try:
            n = self._keys.index(source_index)
        except ValueError:
            raise KeyError(f"no snapshot before message {source_index} (have {self._keys[:3]}…)") from None
        if n == len(self._keys) - 1:
            return copy.deepcopy(self._last)
        return self._replay(n)

    def _replay(self, n: int) -> Any:
        value = copy.deepcopy(self._base)
        for d in self._diffs[1 : n + 1]:
            if d is not None:
                value = _apply(value, d)
        return value

    def restore(self, source_index: int) -> Any:
        """The state before message ``source_index``; it and every later snapshot are dropped
        (they describe what the rollback undoes)."""
        value = self.get(source_index)
        n = self._keys.index(source_index)
        del self._keys[n:], self._diffs[n:]
        self._last = self._replay(n - 1) if self._keys else None
        if not self._keys:
            self._base = None
        return value


# -- the executor ----------------------------------------------------------------------------------
@dataclass
class RepairResult:
    """What carrying out a recommendation did.

    ``recovered``: the repair worked (for ``retry``, an attempt succeeded; ``value`` is what it
    returned). Otherwise ``error`` is the last error, and ``next`` the recommendation the service
    gave after the failed repair (the ladder's next rung), ``None`` when the service is down or
    had nothing more. ``served``: ``False`` when triage could not be reached (fail-open).
    """

    strategy: str
    recovered: bool
    value: Any = None
    error: BaseException | None = None
    attempts: int = 0
    waited_s: float = 0.0
    next: Recommendation | None = None
    served: bool = True
    note: str = ""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


class RepairExecutor:
    """Keeps an agent's messages and state, streams them to a triage session, carries out repairs.

    Parameters
    ----------
    client:
        A :class:`~agent_triage_client.TriageClient` (fail-open, the default, keeps the agent
        running while triage is down).
    session_id:
        The session's id; the executor should own the session from its first message.
    state:
        The agent's own state beside the messages (snapshotted and rolled back with them).
    backoff_s, max_backoff_s:
        The executor's own backoff for a ``retry`` without ``delay_s``: full jitter on
        ``backoff_s · 2^(attempt-1)``, capped at ``max_backoff_s``.
    max_wait_s:
        The longest single wait it accepts (a longer ``retry_after`` ends the retry as failed).
    sleep, clock, rng:
        Injectable for tests and simulations.
    """

    def __init__(
        self,
        client: TriageClient,
        session_id: str,
        *,
        state: Any = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        language: Literal["en", "zh"] | None = None,
        task_type: str | None = None,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        max_wait_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.messages: list[Any] = []
        self.state = state
        self.snapshots = Snapshots()
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        # sent with the first append the service takes
        self._first: dict[str, Any] = {"tools": tools, "language": language, "task_type": task_type}
        self._position: dict[int, int] = {}  # the service's source_index → position in self.messages
        self.last: SessionStep | None = None

    # -- messages ----------------------------------------------------------------------------------
    def add(self, *messages: Any) -> SessionStep:
        """Append ``messages`` (snapshotting the messages and state before each), send them to the
        session, and return the session's diagnosis (a ``continue`` fallback when triage is down)."""
        start = len(self.messages)
        for m in messages:
            self.snapshots.take(len(self.messages), {"messages": self.messages, "state": self.state})
            self.messages.append(copy.deepcopy(m))
        first: dict[str, Any] = {k: v for k, v in self._first.items() if v is not None}
        r = self.client.append_steps(self.session_id, messages=list(messages), **first)
        if r.served:
            self._first = {}
            self._position.update(zip(r.appended, range(start, start + len(messages)), strict=False))
        self.last = r
        return r

    # -- rollback ----------------------------------------------------------------------------------
    def rollback(self, rec: Recommendation) -> RepairResult:
        """Restore the messages and state from before message ``params.to_source_index``."""
        target = rec.params.get("to_source_index")
        if not isinstance(target, int) or isinstance(target, bool):
            return self._failed(rec, "rollback without an integer params.to_source_index")
        position = self._position.get(target)
        if position is None or position not in self.snapshots:
            return self._failed(rec, f"no snapshot before message {target}")
        restored = self.snapshots.restore(position)
        self.messages, self.state = restored["messages"], restored["state"]
        self._position = {k: v for k, v in self._position.items() if v < position}
        out = self.client.report_outcome(rec.id, True, note=f"rolled back to before message {target}")
        return RepairResult("rollback", True, value=target, next=out.next, served=out.served)

    def _failed(self, rec: Recommendation, note: str, error: BaseException | None = None,
                attempts: int = 0, waited: float = 0.0) -> RepairResult:
        out = self.client.report_outcome(rec.id, False, note=note[:500])
        return RepairResult(rec.strategy, False, error=error, attempts=attempts, waited_s=waited,
                            next=out.next, served=out.served, note=note)

    # -- retry -------------------------------------------------------------------------------------
    def delay_s(self, rec: Recommendation, error: BaseException | None = None) -> float:
        """How long to wait before the next attempt: the service's ``delay_s`` (its backoff with
        jitter) or the executor's own, and never less than ``retry_after`` (the recommendation's,
        or the error's own ``retry_after`` attribute, e.g. from a 429's header)."""
        attempt = int(rec.params.get("attempt", 1) or 1)
        delay = _number(rec.params.get("delay_s"))
        if delay is None:
            delay = self._rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
        for after in (rec.params.get("retry_after"), getattr(error, "retry_after", None)):
            a = _number(after)
            if a is not None and a > delay:
                delay = a
        return delay

    def retry(self, rec: Recommendation, call: Callable[[], Any],
              error: BaseException | None = None) -> RepairResult:
        """Carry out a ``retry``: wait, ``call()`` again, report; repeat while the service says
        ``retry`` again, within its ``max_attempts`` and the task's recovery time left.

        ``error`` is the failure being repaired, when the agent has it (its ``retry_after`` is
        honoured). An exception from ``call`` is a failed attempt; its value is a success.
        """
        limit = int(rec.params.get("max_attempts", 1) or 1)
        attempts, waited = 0, 0.0
        while rec.strategy == "retry" and attempts < limit:
            wait = self.delay_s(rec, error)
            left = _number(rec.budgets.get("task_recovery_s_left"))
            if left is not None and wait > left:
                return self._failed(rec, f"wait {wait:g} s exceeds the task's recovery time left ({left:g} s)",
                                    error, attempts, waited)
            if wait > self.max_wait_s:
                return self._failed(rec, f"wait {wait:g} s exceeds max_wait_s {self.max_wait_s:g}",
                                    error, attempts, waited)
            self._sleep(wait)
            waited += wait
            attempts += 1
            t0 = self._clock()
            try:
                value = call()
            except Exception as exc:  # a failed attempt: reported, and the ladder decides
                error = exc
                out = self.client.report_outcome(rec.id, False, duration_s=self._clock() - t0,
                                                 note=f"{type(exc).__name__}: {exc}"[:500])
                if not out.served:  # fail-open: triage is gone, so no retry on its say-so
                    return RepairResult("retry", False, error=exc, attempts=attempts, waited_s=waited,
                                        served=False, note=out.client_error or "")
                if out.next is None:
                    return RepairResult("retry", False, error=exc, attempts=attempts, waited_s=waited)
                rec = out.next
                continue
            out = self.client.report_outcome(rec.id, True, duration_s=self._clock() - t0)
            return RepairResult("retry", True, value=value, attempts=attempts, waited_s=waited,
                                next=out.next, served=out.served)
        return RepairResult("retry", False, error=error, attempts=attempts, waited_s=waited,
                            next=None if rec.strategy == "retry" else rec)


__all__ = ["RepairExecutor", "RepairResult", "Snapshots"]
