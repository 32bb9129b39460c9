"""Validation before the store: values no store (SQLite or PostgreSQL) can keep are refused here
with a 422 that names the field, so a permanent input error never reaches SQL (where it used to be
a 500 on SQLite and a 503 "retry" on PostgreSQL).

What the JSON body may not hold (:func:`check_json`, run on every parsed body):

- ``NaN`` / ``Infinity`` (not JSON; PostgreSQL's JSON refuses them) — refused by the parser
  (:func:`model.importers.parse_json_text`);
- lone UTF-16 surrogates (``"\\ud800"``: not encodable as UTF-8);
- NUL characters (PostgreSQL text can't hold them);
- integers outside the signed 64-bit range, numbers too large for a float (``1e999``), and
  nesting deeper than :data:`MAX_DEPTH`.

Ids (:func:`check_id`): trace and session ids are ``[A-Za-z0-9._:@-]{1,128}``, so whatever is
stored can be read and deleted by its id in a URL. Integers that land in 32-bit columns (step and
source indices) are checked by :func:`check_index`.

>>> check_id("run-42:a@b", path="trace.id")
'run-42:a@b'
>>> check_id("a/b", path="trace.id")
Traceback (most recent call last):
...
model.core.errors.InputError: trace.id: an id is 1-128 of the characters A-Z a-z 0-9 . _ : @ -; got 'a/b'
"""

from __future__ import annotations

import math
import re
from typing import Any

from model.core.errors import InputError
from model.core.schema import Trace

#: How deep a request body may nest (objects and lists); deeper is a 422, well before the parser's
#: recursion limit and the deep copies the service makes.
MAX_DEPTH = 64
#: The pattern of trace and session ids.
ID_PATTERN = r"^[A-Za-z0-9._:@\-]{1,128}$"
_ID = re.compile(ID_PATTERN)
INT64_MAX = 2**63 - 1
#: Step and source indices are stored in 32-bit integer columns.
INDEX_MAX = 2**31 - 1
#: Free-text query and path parameters: no control characters (NUL above all).
TEXT_PARAM_PATTERN = r"^[^\x00-\x1f\x7f]*$"
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def check_id(value: str, *, path: str) -> str:
    """``value`` when it is a valid trace / session id; else :class:`InputError` naming ``path``."""
    if not isinstance(value, str) or _ID.match(value) is None:
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "…"
        raise InputError(f"an id is 1-128 of the characters A-Z a-z 0-9 . _ : @ -; got {shown!r}", path=path)
    return value


def iso_datetime_text(value: Any) -> Any:
    """A date-time query parameter is ISO 8601 text (``2026-11-29T10:00Z``), not a number of
    seconds: pydantic would read ``since=0.5`` as 1970-01-01T00:00:00.5."""
    if isinstance(value, str) and _ISO_DATE.match(value) is None:
        raise ValueError(f"expected an ISO 8601 date-time such as 2026-11-29T10:00:00Z; got {value[:40]!r}")
    return value


def check_index(value: int, *, path: str) -> int:
    if not 0 <= value <= INDEX_MAX:
        raise InputError(f"must be between 0 and {INDEX_MAX}; got {_short_int(value)}", path=path)
    return value


def check_trace_fields(trace: Trace, *, path: str = "trace") -> None:
    """What a whole imported trace must satisfy before it is stored: its ids, its task type's
    length (a 200-character column), every step's ``source_index`` in 32 bits."""
    check_id(trace.id, path=f"{path}.id")
    if trace.session_id is not None:
        check_id(trace.session_id, path=f"{path}.session_id")
    if trace.task_type is not None and len(trace.task_type) > 200:
        raise InputError(f"a task type is at most 200 characters; got {len(trace.task_type)}", path=f"{path}.task_type")
    for i, step in enumerate(trace.steps):
        check_index(step.source_index, path=f"{path}.steps[{i}].source_index")


def check_json(value: Any, *, path: str = "") -> None:
    """Walk a parsed JSON value; the first value no store can keep raises :class:`InputError`.

    Iterative (no recursion), linear in the size of ``value``: a first pass that builds no paths
    (:func:`_storable`; what almost every body takes), then, only when it finds something, the pass
    that names the first offending value's place.
    """
    if _storable(value):
        return
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        v, where, depth = stack.pop()
        if isinstance(v, str):
            _check_str(v, where)
        elif isinstance(v, float):
            if not math.isfinite(v):  # 1e999 parses as inf
                raise InputError(f"number out of range (finite 64-bit float); got {v}", path=where or None)
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if not -INT64_MAX - 1 <= v <= INT64_MAX:
                raise InputError(f"integer out of range (64-bit signed); got {_short_int(v)}", path=where or None)
        elif isinstance(v, dict):
            if depth >= MAX_DEPTH:
                raise InputError(f"nested deeper than {MAX_DEPTH} levels", path=where or None)
            for k, item in v.items():
                sub = f"{where}.{k}" if where else str(k)
                _check_str(k, sub)
                stack.append((item, sub, depth + 1))
        elif isinstance(v, list):
            if depth >= MAX_DEPTH:
                raise InputError(f"nested deeper than {MAX_DEPTH} levels", path=where or None)
            for i, item in enumerate(v):
                stack.append((item, f"{where}[{i}]", depth + 1))


def _storable(value: Any) -> bool:
    """Whether :func:`check_json` would accept ``value`` (no paths built; ``False`` also for a type
    that JSON does not make, which the full pass then judges). The texts, keys too, are joined and
    asked once (a key that is not a text makes the join fail: the full pass then judges)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    strings: list[str] = []
    add = strings.append
    low, high = -INT64_MAX - 1, INT64_MAX
    isfinite = math.isfinite
    while stack:
        v, depth = stack.pop()
        if depth >= MAX_DEPTH:  # only containers are stacked below the top: one this deep is refused
            return False
        t = type(v)
        if t is dict:
            strings.extend(v)  # the keys
            items: Any = v.values()
        elif t is list:
            items = v
        elif t is str:
            add(v)
            continue
        else:
            if not _scalar_ok(v, t):
                return False
            continue
        for item in items:
            u = type(item)
            if u is str:
                add(item)
            elif u is dict or u is list:
                stack.append((item, depth + 1))
            elif u is int:
                if not low <= item <= high:
                    return False
            elif u is float:
                if not isfinite(item):
                    return False
            elif not (u is bool or item is None):
                return False
    try:
        text = "".join(strings)
    except TypeError:  # a key that is not a text
        return False
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _scalar_ok(v: Any, t: type) -> bool:
    if t is int:
        return bool(-INT64_MAX - 1 <= v <= INT64_MAX)
    if t is float:
        return math.isfinite(v)
    return t is bool or v is None


def _check_str(s: str, where: str) -> None:
    if "\x00" in s:
        raise InputError("NUL characters (\\u0000) are not accepted", path=where or None)
    if s.isascii():
        return
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"lone UTF-16 surrogate {s[exc.start]!r} at character {exc.start} (not valid Unicode text)",
            path=where or None,
        ) from None


def _short_int(v: int) -> str:
    return str(v) if v.bit_length() < 256 else f"a {v.bit_length()}-bit integer"


__all__ = [
    "ID_PATTERN",
    "INDEX_MAX",
    "INT64_MAX",
    "MAX_DEPTH",
    "TEXT_PARAM_PATTERN",
    "check_id",
    "check_index",
    "iso_datetime_text",
    "check_json",
    "check_trace_fields",
]
