"""Property-based API tests from the OpenAPI schema (schemathesis) against a real uvicorn server:
no 500 and no response that breaks the schema, on every operation, with a valid key, on SQLite and
on PostgreSQL (the throwaway cluster `make test` starts; skipped without it).

Fixed seed and a bounded number of examples per operation, so the run is repeatable and short.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import create_engine, text

from serve.auth import create_key
from serve.store import Stores
from tests.conftest import LiveServer
from tests.storefix import BACKENDS, make_db_url

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 50


@pytest.fixture(scope="module", params=BACKENDS)
def api_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str, str, str]]:
    """A live server with one key, on a fresh SQLite file or a fresh PostgreSQL database."""
    data: Path = tmp_path_factory.mktemp("schemathesis")
    urls = make_db_url(request.param, data)
    url = next(urls)
    store = Stores.at(url)
    store.db.upgrade()
    key, _ = create_key(store.keys, "fuzz")
    operator_key, _ = create_key(store.keys, "fuzz-ops", operator=True)
    store.db.dispose()
    env = {
        "TRIAGE_DATA_DIR": str(data),
        "TRIAGE_DATABASE_URL": url,
        "TRIAGE_AUTH": "on",
        "TRIAGE_CLASSIFIER": "false",
    }
    srv = LiveServer(env=env)
    try:
        yield srv.wait_ready(), key, url, operator_key
    finally:
        srv.stop()
        urls.close()  # drops the PostgreSQL database


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
#: The operations of issue 21 (patterns, label undo, operator keys), run again with an operator's key.
OPERATOR_OPS = ("GET /v1/patterns", "POST /v1/labels/undo", "POST /v1/operator/models/promote",
                "POST /v1/operator/models/rollback",
                # issue 31: correcting agents
                "POST /v1/agents/rename", "POST /v1/agents/merge", "POST /v1/agents/split")


def test_api_conforms(api_server: tuple[LiveServer, str, str, str]) -> None:
    """Every operation of the live schema, MAX_EXAMPLES generated cases each, fixed seed."""
    srv, key, url, _ = api_server
    schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json")
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    labels = []
    calls: dict[str, int] = {}
    statuses: set[int] = set()
    for result in schema.get_all_operations():
        operation = result.ok()
        labels.append(operation.label)

        @seed(20261129)
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            response = case.call_and_validate(
                base_url=srv.url, headers={"Authorization": f"Bearer {key}"}, checks=checks, timeout=30
            )
            calls[case.operation.label] = calls.get(case.operation.label, 0) + 1
            statuses.add(response.status_code)

        run()
    assert "POST /v1/sessions/{session_id}/steps" in labels and "POST /v1/outcomes" in labels
    assert set(OPERATOR_OPS) <= set(labels)
    assert len(labels) >= 14
    # every operation was exercised, the bodies several times (generation is not vacuous), and the
    # inputs reached both the success and the validation paths
    assert set(calls) == set(labels)
    assert min(calls[op] for op in labels if op.startswith("POST")) >= 5
    assert {200, 422} <= statuses
    # the generated requests reached this backend's store (not some default SQLite file)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT count(*) FROM traces")).scalar_one()
    engine.dispose()
    assert stored > 0


def test_operator_operations_conform(api_server: tuple[LiveServer, str, str, str]) -> None:
    """The patterns, undo and operator operations again with an operator's key (which may name a
    tenant in X-Triage-Tenant and reach the promote / rollback code, not only their 403)."""
    srv, _, _, operator_key = api_server
    schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json")
    statuses: dict[str, set[int]] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.label not in OPERATOR_OPS:
            continue

        @seed(20261204)
        @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            response = case.call_and_validate(
                base_url=srv.url, headers={"Authorization": f"Bearer {operator_key}"}, checks=CHECKS, timeout=30
            )
            statuses.setdefault(case.operation.label, set()).add(response.status_code)

        run()
    assert set(statuses) == set(OPERATOR_OPS)
    assert 200 in statuses["GET /v1/patterns"] and 422 in statuses["POST /v1/operator/models/promote"]
    assert 403 not in set().union(*statuses.values())  # an operator is never refused as a non-operator
