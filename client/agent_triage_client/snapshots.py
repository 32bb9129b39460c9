"""Snapshots of an agent's state before each message, stored as differences, restored exactly.

:class:`Snapshots` keeps the state as it was **before each message**, stored as differences from
the previous snapshot (a growing message list costs only its new tail), and restores any of them
exactly: the same values, the same types, the same key order, sharing nothing with what the agent
holds. Only dicts and lists are stored as differences; anything else is deep-copied whole.

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
from typing import Any

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


__all__ = ["Snapshots"]
