"""API keys: shown once, stored as a hash, looked up, revoked; the `triage keys` commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.auth import KeyCache, create_key, ensure_local_key, generate_key, hash_key
from serve.store import Stores
from serve.store.tables import ApiKey


@pytest.fixture
def store(tmp_path: Path) -> Stores:
    s = Stores.at(f"sqlite:///{tmp_path / 'k.db'}")
    s.db.upgrade()
    return s


def test_key_shape_and_hash() -> None:
    key, key_id, digest = generate_key()
    assert key.startswith(f"trg_{key_id}_") and len(key_id) == 8 and len(key) > 40
    assert digest == hash_key(key) and len(digest) == 64
    assert generate_key()[0] != key


def test_only_the_hash_is_stored(store: Stores) -> None:
    key, key_id = create_key(store.keys, "acme", "ci")
    rows = store.keys.list_api_keys()
    assert [(r.id, r.tenant_id, r.label) for r in rows] == [(key_id, "acme", "ci")]
    with store.db.engine.connect() as conn:
        dump = "\n".join(str(r) for r in conn.exec_driver_sql("SELECT * FROM api_keys"))
    assert key not in dump and hash_key(key) in dump
    assert store.reports.count_rows(ApiKey) == 1


def test_cache_and_revocation(store: Stores) -> None:
    key, key_id = create_key(store.keys, "acme")
    fresh = KeyCache(ttl_s=0)
    cached = KeyCache(ttl_s=3600)
    assert fresh.lookup(store.keys, key).tenant == "acme"  # type: ignore[union-attr]
    assert cached.lookup(store.keys, key).key_id == key_id  # type: ignore[union-attr]
    assert store.keys.revoke_api_key(key_id)
    assert fresh.lookup(store.keys, key) is None
    assert cached.lookup(store.keys, key) is not None  # until its TTL runs out (TRIAGE_AUTH_CACHE_S)
    assert fresh.lookup(store.keys, key + "x") is None


def test_local_key_file_created_once_and_replaced_when_invalid(store: Stores, tmp_path: Path) -> None:
    path = tmp_path / "sub" / "local.key"
    key, created = ensure_local_key(store.keys, path)
    assert created and path.read_text().strip() == key
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert ensure_local_key(store.keys, path) == (key, False)
    store.keys.revoke_api_key(key.split("_")[1])
    key2, created2 = ensure_local_key(store.keys, path)
    assert created2 and key2 != key


class _Result:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = code, stdout, stderr


def _triage(tmp_path: Path, *args: str) -> _Result:
    """``triage keys …`` in-process (the real Typer app), settings from the environment."""
    from typer.testing import CliRunner

    from serve.cli.main import app
    from serve.settings import get_settings

    get_settings.cache_clear()
    try:
        r = CliRunner().invoke(
            app, ["keys", *args], env={"TRIAGE_DATA_DIR": str(tmp_path / "data"), "TRIAGE_DATABASE_URL": None}
        )
    finally:
        get_settings.cache_clear()
    return _Result(r.exit_code, r.stdout, r.stderr)


def test_cli_create_list_revoke(tmp_path: Path) -> None:
    created = _triage(tmp_path, "create", "--tenant", "acme", "--label", "bench")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    key_id = key.split("_")[1]
    assert key.startswith("trg_") and "cannot be shown again" in created.stderr
    listed = _triage(tmp_path, "list")
    assert key_id in listed.stdout and "acme" in listed.stdout and key not in listed.stdout
    assert _triage(tmp_path, "revoke", key_id).returncode == 0
    again = _triage(tmp_path, "revoke", key_id)
    assert again.returncode == 2 and f"no active key with id {key_id!r}" in again.stderr
    bad = _triage(tmp_path, "create", "--tenant", "no spaces")
    assert bad.returncode == 2 and "tenant" in bad.stderr
    local = _triage(tmp_path, "local")
    assert local.returncode == 0
    assert f"database: sqlite:///{tmp_path / 'data' / 'triage.db'}" in local.stdout
    assert (tmp_path / "data" / "local.key").read_text().strip() in local.stdout


def test_http_key_check_revocation_and_auth_off_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from fastapi.testclient import TestClient

    from serve.app import create_app
    from serve.settings import Settings

    settings = Settings(data_dir=tmp_path / "on", auth_cache_s=0, classifier=False)
    with TestClient(create_app(settings)) as client:
        store: Stores = client.app.state.service.stores  # type: ignore[attr-defined]
        key, key_id = create_key(store.keys, "acme")
        h = {"Authorization": f"Bearer {key}"}
        assert client.get("/v1/traces", headers=h).status_code == 200
        assert client.get("/v1/traces").status_code == 401
        assert client.get("/v1/traces", headers={"Authorization": "Basic abc"}).status_code == 401
        store.keys.revoke_api_key(key_id)
        r = client.get("/v1/traces", headers=h)
        assert r.status_code == 401 and r.json()["detail"][0]["msg"] == "unknown or revoked API key"
    caplog.set_level(logging.WARNING, logger="triage.auth")
    off = Settings(data_dir=tmp_path / "off", auth="off", classifier=False)
    with TestClient(create_app(off)) as client:
        assert client.get("/v1/traces").status_code == 200  # tenant "local"
    assert "authentication is DISABLED" in caplog.text
