"""The model registry (model/registry.py) and the store's activations, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from model.errors import InputError, ModelLoadError
from model.registry import SHIPPED_VERSION, Registry
from model.runscore.model import ARTIFACT, RunScorer
from serve.store import Store
from tests.storefix import db_url  # noqa: F401  (fixture)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:  # noqa: F811
    s = Store(db_url)
    s.upgrade()
    yield s
    s.dispose()


def test_save_load_versions_and_layout(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "models")
    scorer = RunScorer.load()
    a = reg.save("acme", scorer, parent=None, card="# card\n", report={"gate": "ok"}, data={"traces": ["x"]})
    b = reg.save("acme", scorer, parent=a.version, card="# card 2\n", report={"gate": "ok2"}, data={})
    assert a.version.startswith("v1-") and b.version.startswith("v2-")
    assert sorted(p.name for p in a.path.iterdir()) == [
        "MODEL_CARD.md", "data.json", "evaluation.json", "runscore.json", "version.json"]
    assert [v.version for v in reg.versions("acme")] == [a.version, b.version]
    assert reg.versions("other") == []
    got = reg.get("acme", b.version)
    assert got.parent == a.version and got.summary == {"gate": "ok2"} and got.created_at.endswith("Z")
    assert reg.load("acme", a.version).to_dict() == scorer.to_dict()
    assert not list((tmp_path / "models" / "acme").glob(".incoming-*"))  # no temp folder left


def test_unknown_and_corrupt_versions_are_refused(tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    with pytest.raises(InputError, match="no model version"):
        reg.get("acme", "v9-20260101T000000Z")
    with pytest.raises(InputError, match="looks like"):
        reg.get("acme", "../../etc")
    with pytest.raises(InputError, match="tenant"):
        reg.versions("../x")
    mv = reg.save("acme", RunScorer.load(), parent=None, card="", report={}, data={})
    art = mv.path / "runscore.json"
    art.write_text(art.read_text().replace('"threshold"', '"threshold_"', 1))
    with pytest.raises(ModelLoadError, match="sha256"):
        reg.load("acme", mv.version)
    # a consistent hash over something that is not a run scorer is refused too
    bad = b'{"format_version": 1}'
    meta = json.loads((mv.path / "version.json").read_text())
    import hashlib
    meta["sha256"] = hashlib.sha256(bad).hexdigest()
    (mv.path / "version.json").write_text(json.dumps(meta))
    art.write_bytes(bad)
    with pytest.raises(ModelLoadError, match="not a run scorer"):
        reg.load("acme", mv.version)


def test_shipped_version_loads_the_shipped_artefact(tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    assert SHIPPED_VERSION.startswith("shipped-")
    assert reg.load("anyone", SHIPPED_VERSION).to_dict() == RunScorer.load(ARTIFACT).to_dict()
    assert reg.get("anyone", SHIPPED_VERSION).path == ARTIFACT.parent


def test_activations_are_per_tenant_newest_first(store: Store) -> None:
    assert store.active_model("acme") is None
    store.activate_model("acme", "v1-20261201T110000Z", actor="alice")
    store.activate_model("acme", "v2-20261201T120000Z", actor="bob")
    store.activate_model("acme", "v1-20261201T110000Z", actor="bob", action="rollback")
    store.activate_model("beta", "v1-20261201T130000Z", actor="carol")
    assert store.active_model("acme") == "v1-20261201T110000Z"
    assert store.active_model("beta") == "v1-20261201T130000Z"
    hist = store.model_history("acme")
    assert [(h["version"], h["actor"], h["action"]) for h in hist] == [
        ("v1-20261201T110000Z", "bob", "rollback"), ("v2-20261201T120000Z", "bob", "promote"),
        ("v1-20261201T110000Z", "alice", "promote")]
    assert hist[0]["activated_at"].tzinfo is not None
    with pytest.raises(InputError, match="action"):
        store.activate_model("acme", "v3", actor="x", action="delete")


def test_two_processes_share_the_registry_and_the_activation(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    """One process promotes (the CLI); another, as a second worker would, finds the version in the
    store and loads the artefact from the shared registry path."""
    import os
    import subprocess
    import sys

    shared = tmp_path / "shared-models"
    mv = Registry(shared).save("acme", RunScorer.load(), parent=None, card="", report={}, data={})
    env = {**os.environ, "TRIAGE_DATABASE_URL": db_url, "TRIAGE_MODEL_REGISTRY": str(shared),
           "TRIAGE_DATA_DIR": str(tmp_path / "data")}
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "serve.cli", "model", "promote", mv.version, "--tenant", "acme"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    probe = ("from model.registry import Registry; from serve.settings import Settings; from serve.store import "
             "open_store; s = Settings(); v = open_store(s).active_model('acme'); "
             "r = Registry(s.resolved_model_registry).load('acme', v); print(v, r.version)")
    other = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True,
                           timeout=120)
    assert other.returncode == 0, other.stderr
    assert other.stdout.split() == [mv.version, RunScorer.load().version]
