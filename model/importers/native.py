"""Our own Trace JSON (what ``Trace.model_dump_json()`` writes) → :class:`~model.core.schema.Trace`.

pydantic's ValidationError is translated at this boundary into a :class:`TraceImportError`
whose ``path`` is built from the error location (``steps[2].kind``).

>>> from model.importers.native import import_native
>>> import_native({"steps": [{"kind": "user_input", "content": "hi"}]}).steps[0].kind.value
'user_input'
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from model.core.errors import TooLargeError, TraceImportError
from model.core.schema import Trace
from model.importers._common import join, type_name


def loc_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """``("steps", 2, "kind")`` → ``"steps[2].kind"``."""
    path = prefix
    for part in loc:
        path = join(path, part)
    return path


def import_native(data: Any, *, max_steps: int | None = None, prefix: str = "") -> Trace:
    """Validate a native Trace object; the step limit is checked before validation."""
    if not isinstance(data, dict):
        raise TraceImportError(f"expected a Trace object, got {type_name(data)}", path=prefix or None)
    steps = data.get("steps")
    if not isinstance(steps, list):
        raise TraceImportError(f"expected a list of steps, got {type_name(steps)}", path=join(prefix, "steps"))
    if not steps:
        raise TraceImportError("no steps: the trace is empty", path=join(prefix, "steps"))
    if max_steps is not None and len(steps) > max_steps:
        raise TooLargeError(
            f"the trace has {len(steps)} steps, more than the limit of {max_steps}; raise max_steps to import it"
        )
    try:
        return Trace.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
        got = first.get("input")
        received = f"; got {got!r}" if isinstance(got, str | int | float | bool) and len(repr(got)) < 80 else ""
        raise TraceImportError(
            f"{first['msg']}{received}{more}", path=loc_path(tuple(first["loc"]), prefix) or None
        ) from exc


__all__ = ["import_native", "loc_path"]
