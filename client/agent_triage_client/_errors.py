"""The client's exceptions.

::

    TriageClientError                 everything this package raises
    ├── TriageAPIError                the service answered a 4xx other than 408/429 (a wrong key,
                                      a bad request): raised whatever fail_open says
    └── TriageUnavailable             no usable answer within the time budget (down, slow,
                                      overloaded); with fail_open=True the hot-path calls
                                      return a fallback instead of raising it

httpx's own errors never escape: they are translated here with ``raise … from exc``.
"""

from __future__ import annotations

from typing import Any


class TriageClientError(Exception):
    """Base class of the client's errors."""


class TriageAPIError(TriageClientError):
    """The service answered with an error status; ``detail`` is its ``detail`` list (or text)."""

    def __init__(self, status_code: int, detail: Any, method: str, url: str) -> None:
        self.status_code = status_code
        self.detail = detail
        self.method = method
        self.url = url
        super().__init__(f"{method} {url} → {status_code}: {detail}")


class TriageUnavailable(TriageClientError):
    """No answer within the time budget: the service is down, slow or kept refusing (429/5xx)."""

    def __init__(self, message: str, *, attempts: int, last_status: int | None = None) -> None:
        self.attempts = attempts
        self.last_status = last_status
        super().__init__(message)


__all__ = ["TriageAPIError", "TriageClientError", "TriageUnavailable"]
