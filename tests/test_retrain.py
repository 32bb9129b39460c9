"""``triage retrain``, the gate and ``triage model list|promote|rollback`` on real runs.

The tenant's history is τ-airline's training tasks, stored in a real SQLite store with run-level
labels; the base data is AgentProcessBench only (``--exclude-set`` the others), so each retrain
takes seconds. The flipped-label challenger is trained through the same path with its training
runs' labels flipped (the held-back slice keeps the true ones): the gate must refuse it and say
that the tenant-slice comparison failed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from model.errors import InputError
from model.realdata import SOURCES, load_source
from model.registry import SHIPPED_VERSION, Registry
from model.runscore.head import text_vector
from model.runscore.model import Example, RunScorer
from model.runscore.retrain import MIN_SLICE, split_slice
from model.runscore.train import fixed_test
from model.schema import Step, Trace
from serve.cli import app
from serve.retrain import retrain, rollback_target
from serve.settings import Settings, get_settings
from serve.store import Store

ONLY_APB = tuple(s for s in SOURCES if s != "agentprocessbench")  # the base data: one small set


def _store_runs(store: Store, tenant: str, runs: list[Any], *, flip: bool = False) -> list[str]:
    store.ensure_tenant(tenant)
    ids = []
    for r in runs:
        t = r.trace.model_copy(deep=True)
        t.labels = None
        t.id = f"{tenant}-{r.run_id}"
        t.metadata = {**t.metadata, "task_id": r.group}
        with store.write() as db:
            store.put_trace(db, tenant=tenant, trace_id=t.id, trace=t.model_dump(mode="json", exclude_none=True),
                            response={"healthy": True}, session_id=None, task_type=None)
        store.add_label(tenant, t.id, failed=(not r.failed) if flip else r.failed, author="checker",
                        author_type="checker")
        ids.append(t.id)
    return ids


@pytest.fixture(scope="module")
def tau_train() -> list[Any]:
    return [r for r in load_source("tau_airline") if not fixed_test(r.source, r.group)][:70]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("retrain")  # its feature cache is shared by the tests here


@pytest.fixture
def env(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Store, Settings]]:
    db = tmp_path / "triage.db"
    settings = Settings(data_dir=data_dir, database_url=f"sqlite:///{db}", model_registry=tmp_path / "models")
    monkeypatch.setenv("TRIAGE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("TRIAGE_DATABASE_URL", f"sqlite:///{db}")
    monkeypatch.setenv("TRIAGE_MODEL_REGISTRY", str(tmp_path / "models"))
    get_settings.cache_clear()
    store = Store(settings.resolved_database_url)
    store.upgrade()
    yield store, settings
    store.dispose()
    get_settings.cache_clear()


def _flip(ex: list[Example]) -> list[Example]:
    for e in ex:
        e.failed = not e.failed
        e.fail_source_index = None
    return ex


def test_retrain_registers_gates_and_names_the_failed_comparison(env: tuple[Store, Settings],
                                                                 tau_train: list[Any]) -> None:
    store, settings = env
    ids = _store_runs(store, "acme", tau_train)
    _store_runs(store, "beta", tau_train[:30], flip=True)  # another tenant's (wrong) history

    flipped = retrain(store, settings, "acme", exclude=ONLY_APB, transform=_flip)
    assert not flipped.promoted and not flipped.gate.promote
    names = [c.name for c in flipped.gate.failed]
    assert names == ["tenant slice"], flipped.gate.reason()
    assert "tenant slice" in flipped.gate.reason()
    assert store.active_model("acme") is None  # the champion (shipped) stays

    good = retrain(store, settings, "acme", exclude=ONLY_APB)
    tenant = next(c for c in good.gate.comparisons if c.name == "tenant slice")
    bad = next(c for c in flipped.gate.comparisons if c.name == "tenant slice")
    assert tenant.challenger > bad.challenger + 0.1  # the true labels teach, the flipped ones mislead
    assert [c.name for c in good.gate.comparisons] == ["tenant slice", "fixed split agentprocessbench"]
    # the registry holds both; only this tenant's runs trained them
    reg = Registry(settings.resolved_model_registry)
    versions = reg.versions("acme")
    assert [v.version for v in versions] == [flipped.version.version, good.version.version]
    data = json.loads((good.version.path / "data.json").read_text())
    assert {r["trace_id"] for r in data["tenant_runs"]} == set(ids)
    assert sum(r["slice"] for r in data["tenant_runs"]) == good.counts["tenant_slice"]
    assert good.cache["misses"] == 0  # the second retrain read every feature from the cache
    assert reg.versions("beta") == []
    scorer = reg.load("acme", good.version.version)
    assert scorer.head_ is not None
    assert scorer.score(tau_train[0].trace).failure_probability is not None
    if good.promoted:
        assert store.active_model("acme") == good.version.version


def test_too_small_a_slice_is_refused_and_said(env: tuple[Store, Settings], tau_train: list[Any]) -> None:
    store, settings = env
    _store_runs(store, "small", tau_train[:16])
    res = retrain(store, settings, "small", exclude=ONLY_APB)
    assert not res.promoted and res.gate.refused is not None and res.gate.comparisons == []
    assert f"at least {MIN_SLICE} failed and {MIN_SLICE} successful" in res.gate.reason()
    assert store.active_model("small") is None
    assert res.counts["tenant_train"] == 16 and res.counts["tenant_slice"] == 0  # nothing held back in vain
    _store_runs(store, "one-sided", [r for r in tau_train if r.failed][:12])
    with pytest.raises(InputError, match="needs both"):
        retrain(store, settings, "one-sided", exclude=ONLY_APB)


def test_slice_keeps_tasks_together_and_holds_the_minimum() -> None:
    ex = [Example("tenant", f"task{i // 4}", bool(i % 3), None, [], np.zeros((0, 17)), np.zeros(11), 1)
          for i in range(80)]
    train, held = split_slice(ex, share=0.3)
    assert set(train).isdisjoint(held) and len(train) + len(held) == 80
    assert {ex[i].group for i in train}.isdisjoint({ex[i].group for i in held})
    assert sum(ex[i].failed for i in held) >= MIN_SLICE and sum(not ex[i].failed for i in held) >= MIN_SLICE


def test_head_round_trips_and_serves_without_the_text_in_the_example(tau_train: list[Any]) -> None:
    from model.runscore.retrain import FeatureCache, fit_challenger

    cache = FeatureCache(None)
    ex = cache.examples(tau_train[:40])
    scorer = fit_challenger(ex[:0] + cache.examples(load_source("agentprocessbench")[:40]), ex, {})
    again = RunScorer.from_dict(json.loads(json.dumps(scorer.to_dict())))
    t = tau_train[1].trace
    assert again.score(t).failure_probability == scorer.score(t).failure_probability
    assert again.threshold == scorer.threshold
    assert text_vector(Trace(steps=[Step(kind="user_input", content="", source_index=0)])).sum() == 0


def test_model_cli_list_promote_rollback(env: tuple[Store, Settings], tau_train: list[Any]) -> None:
    store, settings = env
    reg = Registry(settings.resolved_model_registry)
    shipped = RunScorer.load()
    v1 = reg.save("local", shipped, parent=None, card="", report={}, data={}).version
    v2 = reg.save("local", shipped, parent=v1, card="", report={}, data={}).version
    runner = CliRunner()
    r = runner.invoke(app, ["model", "promote", v1])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["model", "promote", v2]).exit_code == 0
    assert store.active_model("local") == v2
    listed = runner.invoke(app, ["model", "list"])
    assert listed.exit_code == 0 and v1 in listed.output and v2 in listed.output and SHIPPED_VERSION in listed.output
    assert runner.invoke(app, ["model", "rollback"]).exit_code == 0
    assert store.active_model("local") == v1
    assert runner.invoke(app, ["model", "rollback"]).exit_code == 0
    assert store.active_model("local") == SHIPPED_VERSION
    r = runner.invoke(app, ["model", "rollback"])
    assert r.exit_code == 2 and "nothing to roll back" in r.output
    r = runner.invoke(app, ["model", "promote", "v9-20990101T000000Z"])
    assert r.exit_code == 2 and "no model version" in r.output
    assert [h["action"] for h in store.model_history("local")] == ["rollback", "rollback", "promote", "promote"]
    assert rollback_target([{"version": v2, "action": "promote"}, {"version": v1, "action": "promote"}]) == v1


def test_retrain_cli_prints_the_gate(env: tuple[Store, Settings], tau_train: list[Any]) -> None:
    store, _ = env
    _store_runs(store, "local", tau_train)
    args = ["retrain", "--no-promote"] + [a for s in ONLY_APB for a in ("--exclude-set", s)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "tenant slice" in r.output and "fixed split agentprocessbench" in r.output
    assert "not promoted (--no-promote)" in r.output
    assert store.active_model("local") is None
    r = CliRunner().invoke(app, ["retrain", "--tenant", "nobody"])
    assert r.exit_code == 2 and "0 failed and 0 successful" in r.output
    r = CliRunner().invoke(app, ["retrain", "--exclude-set", "nope"])
    assert r.exit_code == 2 and "unknown real sets" in r.output


def test_no_slice_when_half_the_runs_cannot_hold_the_minimum() -> None:
    ex = [Example("tenant", f"task{i // 2}", i % 5 != 0, None, [], np.zeros((0, 17)), np.zeros(11), 1)
          for i in range(40)]  # 8 successful runs: a slice of 10 is impossible
    train, held = split_slice(ex, share=0.3)
    assert held == [] and train == list(range(40))


def test_the_slice_finds_both_outcomes_when_tasks_fail_together() -> None:
    """τ-bench-like history: 50 runs in tasks of 4 trials that mostly share their outcome. Half the runs
    can hold 10 of each outcome; drawing tasks in order without looking at what they add did not
    find it, and `triage retrain` refused to decide on 50 labelled runs."""
    from dataclasses import dataclass

    from model.runscore.retrain import split_slice

    @dataclass
    class Run:
        group: str
        failed: bool

    shape = [(4, 3), (4, 0), (4, 2), (4, 4), (4, 2), (4, 0), (4, 3), (4, 0), (4, 2), (4, 0), (4, 4), (4, 4), (2, 2)]
    runs = [Run(f"task{t}", k < f) for t, (n, f) in enumerate(shape) for k in range(n)]
    for seed in range(5):
        train, held = split_slice(runs, share=0.3, seed=seed)  # type: ignore[arg-type]
        failed = sum(runs[i].failed for i in held)
        assert failed >= 10 and len(held) - failed >= 10 and len(held) <= 25
        assert sorted(train + held) == list(range(len(runs)))
        assert len({runs[i].group for i in held} & {runs[i].group for i in train}) == 0
