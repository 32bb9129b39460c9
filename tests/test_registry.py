"""The agent-model registry (model/scoring/agent_registry.py) and the activations per (tenant, agent) in the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.core.errors import InputError, ModelLoadError
from model.data.realdata import load_source
from model.scoring.agent_registry import Registry, agent_key
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from serve.store import Stores
from tests.storefix import db_url, store_fixture  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def model() -> AgentModel:
    runs = load_source("tau_airline")[:30]
    return AgentModel.fit([r.trace.model_copy(update={"labels": None}) for r in runs], [r.failed for r in runs],
                          [r.group for r in runs], config=AgentModelConfig(internal_folds=0))



def test_save_load_versions_and_layout(tmp_path: Path, model: AgentModel) -> None:
    reg = Registry(tmp_path)
    v1 = reg.save("acme", "Billing Bot/eu", model, parent=None, card="# c", report={"x": 1}, data={"runs": []})
    v2 = reg.save("acme", "Billing Bot/eu", model, parent=v1.version, card="# c", report={}, data={})
    assert v1.version.startswith("v1-") and v2.version.startswith("v2-")
    assert v1.path.parent.name == agent_key("Billing Bot/eu") and "/" not in agent_key("Billing Bot/eu")
    assert agent_key("a/b") != agent_key("a_b")  # the hash keeps unsafe names apart
    assert [v.version for v in reg.versions("acme", "Billing Bot/eu")] == [v1.version, v2.version]
    assert reg.agents("acme") == ["Billing Bot/eu"] and reg.agents("other") == []
    assert reg.load("acme", "Billing Bot/eu", v2.version).version == model.version
    assert reg.get("acme", "Billing Bot/eu", v2.version).parent == v1.version


def test_a_version_reads_back_its_card(tmp_path: Path, model: AgentModel) -> None:
    reg = Registry(tmp_path)
    v1 = reg.save("acme", "a", model, parent=None, card="# Card\n\nfigures", report={}, data={})
    got = reg.get("acme", "a", v1.version)
    assert got.card() == "# Card\n\nfigures" and got.card(limit=6) == "# Card"
    (got.path / "MODEL_CARD.md").unlink()
    assert got.card() is None


def test_unknown_and_corrupt_versions_are_refused(tmp_path: Path, model: AgentModel) -> None:
    reg = Registry(tmp_path)
    v1 = reg.save("acme", "a", model, parent=None, card="", report={}, data={})
    with pytest.raises(InputError, match="known: v1-") as e:
        reg.get("acme", "a", "v9-20261201T120000Z")
    assert e.value.path == "version"
    with pytest.raises(InputError):
        reg.get("acme", "a", "latest")
    with pytest.raises(InputError):
        reg.save("no tenant!", "a", model, parent=None, card="", report={}, data={})
    (v1.path / "agentmodel.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="sha256"):
        reg.load("acme", "a", v1.version)


def test_activations_are_per_tenant_and_agent_newest_first(store: Stores) -> None:
    assert store.activations.active_model("acme", "a") is None
    store.activations.activate_model("acme", "v1-20261201T110000Z", actor="alice", agent="a")
    store.activations.activate_model("acme", "v2-20261201T120000Z", actor="bob", agent="a")
    store.activations.activate_model("acme", "v1-20261201T130000Z", actor="bob", agent="b")
    store.activations.activate_model("acme", "v1-20261201T110000Z", actor="bob", action="rollback", agent="a")
    store.activations.activate_model("beta", "v7-20261201T130000Z", actor="carol", agent="a")
    assert store.activations.active_model("acme", "a") == "v1-20261201T110000Z"
    assert store.activations.active_models("acme") == {"a": "v1-20261201T110000Z", "b": "v1-20261201T130000Z"}
    assert [h["action"] for h in store.activations.model_history("acme", "a")] == ["rollback", "promote", "promote"]
    assert len(store.activations.model_history("acme")) == 4
    with pytest.raises(InputError):
        store.activations.activate_model("acme", "v3", actor="x", action="delete", agent="a")
    with pytest.raises(InputError):
        store.activations.activate_model("acme", "v3", actor="x", agent="")
