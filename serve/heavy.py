"""The heavy lane: large ``/v1/diagnose`` bodies are served by a helper process of the worker.

Parsing, importing, redacting and diagnosing a multi-megabyte trace is CPU work that holds the
GIL for long stretches (``json.loads``, pydantic, the regexes of redaction and the rules); done in
the worker, it would stall the worker's event loop and every small request on it. A body of
``TRIAGE_HEAVY_BODY_BYTES`` or more is therefore handed, as raw bytes, to one helper process per
worker (started on first use, with its own :class:`~serve.services.triage.TriageService` on the same
store), which does all of it, stores the result, and returns the response JSON. Heavy requests
queue for that one process (one at a time per worker); small ones never wait for them.

The helper runs at a lower CPU priority than the worker (``HELPER_NICE``), so that it takes the
cores the small requests leave, and stops with its worker (:func:`serve.supervise.watch_master`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from fastapi.exceptions import RequestValidationError

from model.core import errors as model_errors
from model.core.errors import InputError, StoreError, TriageError
from serve.supervise import HelperPool

log = logging.getLogger("triage.serve")

_SERVICE: Any = None
_MAX_STEPS = 5000
#: The helper runs at a lower CPU priority (``nice``) than its worker: when both want the cores,
#: the small requests go first and the large one takes longer.
HELPER_NICE = 10


def _init(settings_data: dict[str, Any]) -> None:  # pragma: no cover - runs in the helper process
    global _SERVICE, _MAX_STEPS
    from serve.settings import Settings
    from serve.supervise import watch_master
    from serve.wiring import build_diagnoser, build_service

    watch_master()
    with contextlib.suppress(OSError, AttributeError):  # not on every platform
        os.nice(HELPER_NICE)
    settings = Settings(**settings_data)
    diagnoser, _ = build_diagnoser(settings)
    _SERVICE = build_service(settings, diagnoser)
    _SERVICE.models.start()  # the helper follows the tenants' promotions too
    _MAX_STEPS = settings.max_steps


def _diagnose(tenant: str, raw: bytes, format: str | None, session: str | None) -> tuple[str, Any]:  # pragma: no cover
    """Parse, import, diagnose and store (the helper process); ``("ok", response JSON)`` or an
    error to re-raise in the worker."""
    from serve.intake import take

    try:
        body, trace = take(raw, max_steps=_MAX_STEPS, format=format,
                           options=None if session is None else {"session": session})
        resp = _SERVICE.diagnose(tenant, trace, body.options)
        return "ok", resp.model_dump_json()
    except RequestValidationError as exc:
        return "validation", list(exc.errors())
    except InputError as exc:
        return "input", (type(exc).__name__, exc.message, exc.path)
    except RecursionError:
        return "deep", None
    except TriageError as exc:  # the store, the model, a rate limit: re-raised by name in the worker
        return "triage", (type(exc).__name__, str(exc), getattr(exc, "retry_after", None))


class HeavyLane(HelperPool):
    """The helper process of one worker (started on the first heavy request; :meth:`close` stops it)."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.threshold = int(settings.heavy_body_bytes)
        super().__init__(_init, (settings.model_dump(),))

    def wants(self, size: int) -> bool:
        return 0 < self.threshold <= size

    async def diagnose(self, tenant: str, raw: bytes, format: str | None = None, session: str | None = None) -> str:
        """The response JSON for the body ``raw`` (and the route's ``format`` / ``session`` query
        parameters); our errors are raised here as they would be in the worker."""
        loop = asyncio.get_running_loop()
        pool = self.executor()
        try:
            status, value = await loop.run_in_executor(pool, _diagnose, tenant, raw, format, session)
        except BrokenProcessPool:
            self.stop(pool)  # the next heavy request starts a new helper
            log.error("the heavy-lane helper process died; it is restarted on the next large request")
            raise StoreError("the helper process serving large requests died; retry") from None
        if status == "ok":
            return str(value)
        if status == "validation":
            raise RequestValidationError(value)
        if status == "deep":
            raise RecursionError("JSON nesting too deep")
        name, message, extra = value
        cls = getattr(model_errors, name, None)
        if status == "input":
            err_cls = cls if isinstance(cls, type) and issubclass(cls, InputError) else InputError
            raise err_cls(message, path=extra)
        if name == "RateLimitedError":
            from model.core.errors import RateLimitedError

            raise RateLimitedError(message, scope="quota", retry_after=float(extra or 1))
        if isinstance(cls, type) and issubclass(cls, TriageError):
            raise cls(message)
        raise StoreError(message)


__all__ = ["HeavyLane"]
