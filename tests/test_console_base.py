"""The console's base view (serve/routers/ui_base.py): the frame, the JSON twin, pagination and
errors every page shares; and the rules that keep the pages on it: no page module imports another's
private names, and no page reaches the store but through serve/services/console.py."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi import HTTPException

from serve.routers import ui_base
from serve.routers.ui_base import date_param, http_error, json_twin, label_request, paginate

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "serve" / "routers").glob("ui*.py"))


def test_paginate_counts_pages_and_keeps_the_filters_for_the_links() -> None:
    assert paginate(0, 1, 50, {}) == {"total": 0, "page": 1, "pages": 1, "per_page": 50, "query_base": ""}
    assert paginate(100, 2, 50, {})["pages"] == 2
    assert paginate(101, 3, 50, {})["pages"] == 3
    got = paginate(7, 1, 5, {"agent": "my agent&co", "verdict": "", "kind": "loop"})
    assert got["query_base"] == "agent=my%20agent%26co&kind=loop"  # empty filters left out, values quoted


def test_json_twin_writes_times_as_iso_and_refuses_what_it_cannot_write() -> None:
    at = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)
    resp = json_twin({"at": at, "n": 1})
    assert resp.media_type == "application/json"
    assert json.loads(bytes(resp.body)) == {"at": "2026-12-06T13:00:00+00:00", "n": 1}
    with pytest.raises(TypeError, match="not JSON-able: set"):
        json_twin({"x": {1}})


def test_errors_name_the_field() -> None:
    err = http_error(404, ["path", "trace_id"], "no such run", "not_found")
    assert err.status_code == 404 and err.detail == [{"loc": ["path", "trace_id"], "msg": "no such run",
                                                      "type": "not_found"}]
    with pytest.raises(HTTPException) as bad_date:
        date_param("06/12/2026", "since")
    assert bad_date.value.status_code == 422 and bad_date.value.detail[0]["loc"] == ["query", "since"]
    assert date_param("", "since") is None
    assert date_param("2026-12-06", "until") == datetime(2026, 12, 6, tzinfo=UTC)
    with pytest.raises(HTTPException) as bad_step:
        label_request({"failed": True, "step": "three"})
    assert bad_step.value.status_code == 422 and bad_step.value.detail[0]["loc"] == ["body", "step"]
    req = label_request({"failed": True, "kind": "", "step": 3, "author": "ignored"})
    assert req.failed is True and req.kind is None and req.step == 3 and req.author == ""  # the author is the key's, not the body's


def test_the_frame_carries_the_navigation_and_the_session() -> None:
    html = ui_base.TEMPLATES.get_template("signin.html").render(
        next="/ui/runs", error=None, page_id="signin", nav=ui_base.NAV, session=None, csrf="", tenant=None,
        path="/ui/signin", operator=False, home_tenant=None)
    assert 'name="next"' in html and "/ui/runs" in html and ui_base.STATIC in html


def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.module or "", alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for alias in node.names]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_page_imports_another_modules_private_name(path: Path) -> None:
    """What pages share is the base view's public names (its ``__all__``), never a ``_helper``."""
    for module, name in _imports(path):
        if not module.startswith(("serve.", "model.")):
            continue
        assert not name.startswith("_"), f"{path.name} imports the private {module}.{name}"
        if module == "serve.routers.ui_base":
            assert name in ui_base.__all__, f"{path.name} imports {name}, not in ui_base.__all__"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_page_reaches_the_store(path: Path) -> None:
    """The console reads and writes through serve/services/console.py (ConsoleService), never the store."""
    text = path.read_text(encoding="utf-8")
    assert not any(m == "serve.store" or m.startswith("serve.store.") for m, _ in _imports(path)), path.name
    assert ".store" not in text and "app.state.service" not in text.replace(
        "ConsoleService(request.app.state.service", ""), path.name


def test_docstring_examples() -> None:
    import doctest

    import serve.services.label_queue as label_queue

    for module in (ui_base, label_queue):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0, module.__name__
