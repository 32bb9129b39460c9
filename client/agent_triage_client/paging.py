"""Walk the stored history page by page: :func:`iter_traces` (a :class:`~agent_triage_client.TriageClient`)
and :func:`aiter_traces` (an :class:`~agent_triage_client.AsyncTriageClient`).

``GET /v1/traces`` answers a page (newest first) and a ``next_cursor``; asked with it, the next page
starts right after the last trace seen (keyset pages: a trace stored meanwhile neither repeats nor
shifts one, and page 1,000 costs what page 1 costs). These follow it to the end.

>>> from agent_triage_client import TriageClient
>>> def recent_loops(client: TriageClient) -> list[str]:
...     return [t.id for t in iter_traces(client, kind="loop", page_size=200)]
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from agent_triage_client.models import TraceSummary

if TYPE_CHECKING:
    from agent_triage_client._client import AsyncTriageClient, TriageClient


def iter_traces(client: TriageClient, *, kind: str | None = None, since: datetime | None = None,
                session: str | None = None, page_size: int = 100) -> Iterator[TraceSummary]:
    """Every stored trace of the client's tenant that passes the filters (those of
    :meth:`TriageClient.list_traces <agent_triage_client.TriageClient.list_traces>`), newest first,
    ``page_size`` a request."""
    cursor: str | None = None
    while True:
        page = client.list_traces(kind=kind, since=since, session=session, limit=page_size, cursor=cursor)
        yield from page.items
        if not page.next_cursor or not page.items:
            return
        cursor = page.next_cursor


async def aiter_traces(client: AsyncTriageClient, *, kind: str | None = None, since: datetime | None = None,
                       session: str | None = None, page_size: int = 100) -> AsyncIterator[TraceSummary]:
    """:func:`iter_traces` for the async client."""
    cursor: str | None = None
    while True:
        page = await client.list_traces(kind=kind, since=since, session=session, limit=page_size, cursor=cursor)
        for item in page.items:
            yield item
        if not page.next_cursor or not page.items:
            return
        cursor = page.next_cursor


__all__ = ["aiter_traces", "iter_traces"]
