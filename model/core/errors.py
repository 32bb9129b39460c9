"""The exceptions of agent-triage, in one module.

Hierarchy::

    TriageError                      base of everything raised on purpose
    ├── InputError                   the caller's input can't be used (→ CLI exit 2, HTTP 4xx)
    │   ├── TraceImportError         an importer could not read a trace; ``path`` names the field
    │   │                            (e.g. ``messages[3].tool_calls[0].function.arguments``) and
    │   │                            ``line`` the 1-based line of a JSONL file when known
    │   ├── TooLargeError            more steps (or bytes) than the configured limit
    │   ├── UnknownDetectorError     a detector name not in the registry
    │   └── RetrainRefused           ``triage retrain`` cannot learn from an agent's history; ``code`` says why
    │                                (``too_few_runs``, ``one_class``, ``too_few_task_groups``, ``corrupt_run``)
    ├── NotFoundError                the tenant has no such session, trace, recommendation or stream (→ 404)
    ├── ConflictError                an outcome contradicting the recorded one, or a success after a handoff (→ 409)
    ├── RateLimitedError             a rate limit or the daily step quota is spent (→ 429 with Retry-After)
    ├── SmokeCheckError              an agent model loaded but did not score the smoke trace sensibly (refused)
    ├── NotFittedError               a model or detector used before it was fitted / loaded
    ├── ModelLoadError               an artefact is missing or unreadable (onnxruntime errors wrapped)
    └── StoreError                   the failure-history store failed (SQL errors wrapped; → 500)
        ├── StoreUnavailableError    it can't be reached, or stayed locked past its timeout (→ 503)
        └── StoreValueError          it refused a value of the request (→ 422; validation missed it)

Outside the hierarchy, control flow that never reaches a caller as an error::

    SignInRequired                   no live console session: the page redirects to sign-in, JSON answers 401
    EndOfInput                       ``triage label review``'s scripted input ran out (treated as quit)
    BodyTooLarge                     a streamed request body passed the size limit (serve/limits.py → 413)

Foreign errors (pydantic, onnxruntime, SQLAlchemy) are translated where they cross into our code,
with ``raise ... from exc``; only ``serve/`` turns these into HTTP responses (serve/error_handlers.py).
"""

from __future__ import annotations

import math


class TriageError(Exception):
    """Base class of every error agent-triage raises on purpose."""


class InputError(TriageError, ValueError):
    """The caller's input can't be used.

    Parameters
    ----------
    message:
        What is wrong, saying what was received.
    path:
        Dotted/indexed path of the offending field (``"messages[2].role"``), when known.
    line:
        1-based line number in a file (JSONL, CSV), when known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.path = path
        self.line = line
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.path:
            where.append(self.path)
        return f"{': '.join(where)}: {self.message}" if where else self.message


class TraceImportError(InputError):
    """An importer could not read the input; ``path`` names the field."""


class TooLargeError(InputError):
    """The input is larger than the configured limit (steps or bytes)."""


class UnknownDetectorError(InputError, KeyError):
    """A detector name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return InputError.__str__(self)


class RetrainRefused(InputError):
    """An agent's labelled history cannot train or gate a model; ``code`` is one of
    :data:`serve.services.retrain_plan.REFUSAL_CODES`."""

    def __init__(self, code: str, message: str, path: str | None = None) -> None:
        super().__init__(message, path=path)
        self.code = code


class NotFoundError(TriageError, LookupError):
    """The tenant has no such session / trace / recommendation / stream (→ 404)."""


class ConflictError(TriageError):
    """An outcome that contradicts the one already recorded, or a success reported after the
    failure was handed off to a human (→ 409)."""


class RateLimitedError(TriageError):
    """A limit is spent (→ 429 with ``Retry-After``). ``scope`` is ``key``, ``tenant`` or ``quota``."""

    def __init__(self, message: str, *, scope: str, retry_after: float) -> None:
        super().__init__(message)
        self.message = message
        self.scope = scope
        self.retry_after = retry_after

    @property
    def retry_after_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after)))


class SmokeCheckError(TriageError):
    """A model that loaded but did not score the smoke trace sensibly (it is refused)."""


class NotFittedError(TriageError, RuntimeError):
    """Something was used before it was fitted or loaded; the message says what to call."""


class ModelLoadError(TriageError, RuntimeError):
    """A model artefact is missing or unreadable."""


class StoreError(TriageError, RuntimeError):
    """The failure-history store failed. Messages never carry SQL or its parameters."""


class StoreUnavailableError(StoreError):
    """The store can't be reached or stayed locked past its timeout: retrying may help."""


class StoreValueError(StoreError):
    """The store refused a value of the request (out of range, not storable text): retrying won't help."""


class SignInRequired(Exception):
    """No live console session: pages redirect to the sign-in form, JSON twins answer 401."""

    def __init__(self, json_wanted: bool, next_url: str) -> None:
        self.json_wanted = json_wanted
        self.next_url = next_url


class EndOfInput(Exception):
    """The scripted input ran out (treated as quit: progress is saved)."""


class BodyTooLarge(Exception):
    """A request body grew past the size limit while streaming (the middleware answers 413)."""


__all__ = [
    "BodyTooLarge",
    "ConflictError",
    "EndOfInput",
    "InputError",
    "ModelLoadError",
    "NotFittedError",
    "NotFoundError",
    "RateLimitedError",
    "RetrainRefused",
    "SignInRequired",
    "SmokeCheckError",
    "StoreError",
    "StoreUnavailableError",
    "StoreValueError",
    "TooLargeError",
    "TraceImportError",
    "TriageError",
    "UnknownDetectorError",
]
