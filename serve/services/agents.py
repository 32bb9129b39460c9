"""Which agent a run belongs to, in the service: named, or inferred from the run and matched against
the tenant's agents; and the tenant's corrections (rename, merge, split). docs/agents.md is the
user's account of the rules below.

Resolution (:meth:`Agents.resolve`), in order: the caller's ``options.agent`` (a session's ``agent``),
the root agent span's name, the task type when ``options.agent_from_task_type`` asks, the agent the
run's session or stored run already has, else **inferred**: the run's signature
(:func:`model.core.identity.signature`) is matched against the tenant's agent profiles
(:func:`model.core.identity.assign`). A match is counted into that agent's profile in the request's
own write transaction (:meth:`Agents.record`); no match creates the agent at once, in a short
transaction that first takes the tenant's agent lock and matches again against the stored profiles,
so that two workers seeing a new agent at once create it once. A key that was renamed or merged away
(an alias) leads to the agent it became, whoever names it.

Consolidation: the first runs an agent's profile sees decide what later runs join, so an agent's odd
first run can start an agent of its own, and an agent's two kinds of run can start two. When an
inferred agent reaches 5, 10, 20, 40, … runs (:func:`model.core.consolidation.consolidation_due`), each
inferred agent with fewer runs that it now matches is merged into it, in that request's transaction,
by the re-keying below (:meth:`Agents._consolidate` says when they match and what happens to the
streams); agents a person named, renamed or split off are left alone.

The past, when a tenant corrects an agent (one rule: **re-keying**): the rows keyed by the agent
move to the new key in one transaction (runs, their failure rows (patterns), labels with their runs,
streams and their observations, model activations) and the old key stays as an alias.

- rename ``a`` → ``name``: ``a``'s history moves to the key ``name`` as it is (streams keep their
  baselines); ``name`` must not be an agent already (merge instead);
- merge ``a`` into ``b``: ``a``'s history joins ``b``'s; ``b``'s streams start their warm-up again
  (their baseline mixed two agents' runs until now); ``b`` keeps the model it served, else serves
  ``a``'s; ``b`` keeps its profile and ``a``'s stays on ``a``'s alias row, so runs like ``a``'s still
  match it and follow the alias to ``b``;
- split runs of ``a`` into a new agent: those runs (and their failure rows) move; the streams of
  ``a`` start their warm-up again, the new agent's streams start empty; models stay with ``a``;
  both profiles are rebuilt from their runs (profiles kept by agents merged into ``a`` are dropped).

Stored answers keep the ``agent`` they gave at the time; the runs' rows say where they belong now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from model.core.agents import POOL_AGENT, AgentSource, agent_and_source, clean_agent_name
from model.core.consolidation import absorbs, consolidation_due, same_agent
from model.core.errors import InputError, NotFoundError
from model.core.identity import (
    PROVISIONAL_RUNS,
    AgentProfile,
    RunSignature,
    assign,
    new_agent_key,
    new_profile,
    signature,
)
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.scoring.agent_registry import Registry
from serve.schemas import MAX_SPLIT_RUNS
from serve.store.agents import AgentStore
from serve.store.prepared import Tx, orm

#: How long a worker trusts its copy of a tenant's agents (profiles and aliases).
PROFILE_TTL_S = 2.0
#: Runs read to rebuild an agent's profile after a merge or a split (the newest).
PROFILE_REBUILD_RUNS = 2000
#: An inferred agent's profile counts each of its first runs, then every PROFILE_SAMPLE-th (rewriting the
#: profile costs about as much as the rest of a rules-only diagnosis; its counts settle long before).
PROFILE_EVERY_RUN = 200
PROFILE_SAMPLE = 10
#: How a stored agent was named (any other stored source, or none, reads as inferred).
NAMED_SOURCES = frozenset({"option", "span", "task_type"})


@dataclass(frozen=True)
class Resolved:
    """A run's agent, how it was found, and what :meth:`Agents.record` still has to store:
    ``sig``: count the run into the agent's profile; ``named``: make sure the agent has a row."""

    agent: str
    source: AgentSource
    sig: RunSignature | None = None
    named: bool = False
    #: the profile that matched, when it is an agent merged into ``agent`` (its profile still matches)
    profile_key: str | None = None


@dataclass
class _Known:
    at: float
    profiles: dict[str, AgentProfile]
    aliases: dict[str, str]
    keys: set[str]


class Agents:
    """The tenant's agents in one worker: resolution (with a short-lived copy of the profiles),
    recording, listing and the operator's corrections."""

    def __init__(self, agent_store: AgentStore, registry: Registry | None = None, *, ttl_s: float = PROFILE_TTL_S,
                 apply_feed: Callable[[Any], None] | None = None) -> None:
        self.agent_store = agent_store
        # the streams' feed applied in a transaction (Streams.apply_waiting_in) before it moves or resets streams: the
        # runs written before count where they did
        self.apply_feed = apply_feed
        self.registry = registry
        self.ttl_s = ttl_s
        self._known: dict[str, _Known] = {}
        self._rows_seen: set[tuple[str, str]] = set()  # named agents this worker knows have a row
        self._lock = threading.Lock()

    # -- resolution --------------------------------------------------------------------------------
    def resolve(self, tenant: str, trace: Trace, options: DiagnoseOptions, *,
                fixed: Callable[[], tuple[str, str | None] | None] | None = None, db: Tx | None = None) -> Resolved:
        """The run's agent.

        ``fixed``: called only when nothing names the agent, the agent the run's session or stored
        run already has and how it was found (``None``: none). ``db``: the caller's write
        transaction, where a new agent is created (a session append holds one already); without it
        the creation commits at once, in a transaction of its own."""
        name, source = agent_and_source(trace, options.agent, task_type_names_agent=options.agent_from_task_type)
        if name is not None:
            return Resolved(self.follow(tenant, name), source, named=True)
        known_agent = fixed() if fixed is not None else None
        if known_agent is not None:
            stored, how = known_agent
            src = cast(AgentSource, how) if how in NAMED_SOURCES else "inferred"
            return Resolved(self.follow(tenant, stored), src, named=True)
        sig = signature(trace)
        if sig.empty:  # nothing to tell its agent by (no content, tool, model or service): it starts none
            return Resolved(POOL_AGENT, "inferred", named=True)
        known = self._tenant(tenant)
        match, _ = assign(sig, known.profiles)
        if match is not None:
            agent = known.aliases.get(match, match)
            return Resolved(agent, "inferred", sig, profile_key=match if agent != match else None)
        return Resolved(self._create(tenant, sig, db), "inferred")

    def follow(self, tenant: str, key: str) -> str:
        """``key``, or the agent it became (renamed or merged away)."""
        return self._tenant(tenant).aliases.get(key, key)

    def record(self, db: Tx, tenant: str, resolved: Resolved) -> None:
        """In the request's write transaction: count an inferred run into its agent's profile; give
        a named agent its row the first time this worker sees it."""
        if resolved.sig is not None:
            # the profile: a sample past its first runs (the agent's own comes back with its count)
            at = (PROFILE_EVERY_RUN, PROFILE_SAMPLE)
            got = self.agent_store.count_agent_run(db, tenant, resolved.agent,
                                                   profile_at=at if resolved.profile_key is None else None)
            if got is None:  # renamed or merged meanwhile: its new key counts its next runs
                return
            n, prof = got
            if n <= PROFILE_EVERY_RUN or n % PROFILE_SAMPLE == 0:
                which = resolved.profile_key or resolved.agent
                if resolved.profile_key is not None:  # matched through an alias: the profile it keeps
                    prof = self.agent_store.lock_agent_profile(db, tenant, which, alias=True)
                if prof is not None:
                    profile = AgentProfile.from_json(prof)
                    profile.update(resolved.sig)
                    self.agent_store.save_agent(db, tenant, which, profile=profile.to_json())
            if consolidation_due(n):
                self._consolidate(orm(db), tenant, resolved.agent)
        elif resolved.named and (tenant, resolved.agent) not in self._rows_seen:
            if resolved.agent not in self._tenant(tenant).keys:
                self.agent_store.insert_agent(orm(db), tenant, resolved.agent, source=resolved.source)
            self._rows_seen.add((tenant, resolved.agent))

    def _consolidate(self, db: Any, tenant: str, agent: str) -> list[str]:
        """In the request's transaction, at ``agent``'s checkpoints
        (:func:`model.core.consolidation.consolidation_due`): each inferred agent of the tenant with fewer
        runs (never named, renamed or split off by a person) that is ``agent`` is merged into it, as
        :meth:`merge` does. A provisional one (fewer than :data:`PROVISIONAL_RUNS` runs) is when
        ``agent`` takes every one of its stored runs (:func:`model.core.consolidation.absorbs`); its few
        runs join ``agent``'s streams, which keep their warm-up. An established one is when each
        takes the other's typical run (:func:`model.core.consolidation.same_agent`); ``agent``'s streams
        start their warm-up again, as after a person's merge. The keys merged."""
        self.agent_store.lock_agents(db, tenant)
        rows = self.agent_store.agent_rows(tenant, db)
        into = next((r for r in rows if r["key"] == agent and r["alias_of"] is None), None)
        if into is None or not isinstance(into["profile"], dict):
            return []
        profile = AgentProfile.from_json(into["profile"])
        merged = []
        for r in rows:
            n = int(r["n_runs"] or 0)
            if (r["key"] == agent or r["alias_of"] is not None or r["source"] != "inferred" or r["name"] is not None
                    or n >= int(into["n_runs"] or 0) or not isinstance(r["profile"], dict)):
                continue
            if n < PROVISIONAL_RUNS:
                runs = self.agent_store.agent_runs(db, tenant, r["key"], limit=PROVISIONAL_RUNS)
                same = absorbs(profile, [self._signature(t) for t in runs])
            else:
                same = same_agent(profile, AgentProfile.from_json(r["profile"]))
            if same:
                self._adopt_models(tenant, r["key"], agent)
                self._merge_in(db, tenant, r["key"], agent, into_row=into, actor="consolidation",
                               reset_streams=n >= PROVISIONAL_RUNS)
                merged.append(r["key"])
        if merged:
            self.forget(tenant)
        return merged

    def _create(self, tenant: str, sig: RunSignature, db: Tx | None = None) -> str:
        """A new inferred agent for ``sig`` — unless, under the tenant's agent lock, a stored profile
        (another worker's new agent) matches it now; the key it has either way (the run counted in)."""
        if db is not None:  # the caller's transaction: this worker's copy is left to its TTL (it may roll back)
            return self._create_in(orm(db), tenant, sig)[0]
        with self.agent_store.write() as own:
            key, known = self._create_in(own, tenant, sig)
        with self._lock:
            self._known[tenant] = known
        return key

    def _create_in(self, db: Any, tenant: str, sig: RunSignature) -> tuple[str, _Known]:
        self.agent_store.lock_agents(db, tenant)
        known = self._load(tenant, db)
        key, _ = assign(sig, known.profiles)
        if key is not None:  # another worker's new agent: this run is one of its own
            self.record(db, tenant, Resolved(key, "inferred", sig))
            return key, known
        key = self._free_key(new_agent_key(sig), known.keys)
        profile = new_profile(sig, known.profiles)  # records why no agent took it (describe()["origin"])
        self.agent_store.insert_agent(db, tenant, key, source="inferred", profile=profile.to_json(), n_runs=profile.n_runs)
        known.profiles[key] = profile
        known.keys.add(key)
        return key, known

    @staticmethod
    def _free_key(base: str, taken: set[str]) -> str:
        key, n = base, 1
        while key in taken:
            n += 1
            key = f"{base}-{n}"
        return key

    def _tenant(self, tenant: str) -> _Known:
        hit = self._known.get(tenant)
        if hit is not None and time.monotonic() - hit.at < self.ttl_s:
            return hit
        known = self._load(tenant)
        with self._lock:
            self._known[tenant] = known
        return known

    def _load(self, tenant: str, db: Any = None) -> _Known:
        rows = self.agent_store.agent_rows(tenant, db)
        # an agent merged into another keeps its profile (an alias row's): its runs still match, and
        # follow the alias to the agent they joined
        profiles = {r["key"]: AgentProfile.from_json(r["profile"]) for r in rows if isinstance(r["profile"], dict)}
        aliases = {r["key"]: r["alias_of"] for r in rows if r["alias_of"] is not None}
        return _Known(time.monotonic(), profiles, aliases, {r["key"] for r in rows})

    def forget(self, tenant: str) -> None:
        """Drop this worker's copy of the tenant's agents (after a correction)."""
        with self._lock:
            self._known.pop(tenant, None)
            self._rows_seen = {p for p in self._rows_seen if p[0] != tenant}

    # -- listing -----------------------------------------------------------------------------------
    def list(self, tenant: str) -> list[dict[str, Any]]:
        """Each agent of the tenant (not the aliases): key, name, source, runs, labelled runs, first
        and last seen, aliases, profile description (``None`` for a named agent without one)."""
        rows = self.agent_store.agent_rows(tenant)
        stats = self.agent_store.agent_stats(tenant)
        aliases: dict[str, list[str]] = {}
        for r in rows:
            if r["alias_of"] is not None:
                aliases.setdefault(r["alias_of"], []).append(r["key"])
        by_key = {r["key"]: r for r in rows if r["alias_of"] is None}
        out = []
        for key in sorted(set(by_key) | set(stats)):
            r = by_key.get(key) or {}
            st = stats.get(key)
            prof = r.get("profile")
            out.append({
                "key": key, "name": r.get("name"), "source": r.get("source", "option"),
                "runs": st.runs if st else 0, "labelled_runs": st.labelled_runs if st else 0,
                "first_seen": st.first_seen if st else r.get("created_at"),
                "last_seen": st.last_seen if st else r.get("updated_at"),
                "aliases": sorted(aliases.get(key, [])),
                "profile": AgentProfile.from_json(prof).describe() if isinstance(prof, dict) else None,
            })
        return out

    # -- corrections (operator) ----------------------------------------------------------------------
    def _existing(self, tenant: str, key: str, path: str) -> tuple[dict[str, Any] | None, bool]:
        """The agent row of ``key`` (None: runs but no row) and whether it has runs; 404 when neither."""
        rows = {r["key"]: r for r in self.agent_store.agent_rows(tenant)}
        row = rows.get(key)
        if row is not None and row["alias_of"] is not None:
            raise InputError(f"{key!r} is an old name of agent {row['alias_of']!r}; use that one", path=path)
        has_runs = key in self.agent_store.agent_stats(tenant)
        if row is None and not has_runs:
            raise NotFoundError(f"{path}: this tenant has no agent {key!r}")
        return row, has_runs

    def rename(self, tenant: str, key: str, name: str, *, actor: str) -> dict[str, Any]:
        """Agent ``key`` becomes ``name`` (re-keyed; ``key`` stays an alias)."""
        new = clean_agent_name(name)
        if new is None or new != name:
            raise InputError(f"a name is 1-200 printable characters without outer blanks; got {name!r}", path="name")
        row, _ = self._existing(tenant, key, "agent")
        if new == key:
            raise InputError(f"agent {key!r} already has this name", path="name")
        taken = {r["key"]: r for r in self.agent_store.agent_rows(tenant)}
        back = new in taken and taken[new]["alias_of"] == key  # back to one of its own old names
        if (new in taken and not back) or new in self.agent_store.agent_stats(tenant):
            raise InputError(f"an agent {new!r} exists already: merge {key!r} into it instead", path="name")
        self._adopt_models(tenant, key, new)
        with self.agent_store.write() as db:
            self.agent_store.lock_agents(db, tenant)
            if back:
                self.agent_store.delete_agent_row(db, tenant, new)
            self.agent_store.insert_agent(db, tenant, new, source=(row or {}).get("source", "option"),
                                    profile=(row or {}).get("profile"), n_runs=int((row or {}).get("n_runs") or 0), name=new)
            self._move_all(db, tenant, key, new, reset_streams=False)
            self.agent_store.move_activations(db, tenant, key, new)
        self.forget(tenant)
        return self._one(tenant, new)

    def merge(self, tenant: str, key: str, into: str, *, actor: str) -> dict[str, Any]:
        """Agent ``key``'s history joins ``into``'s (``key`` stays an alias of ``into``)."""
        if key == into:
            raise InputError(f"an agent cannot be merged into itself ({key!r})", path="into")
        self._existing(tenant, key, "agent")
        into_row, _ = self._existing(tenant, into, "into")
        self._adopt_models(tenant, key, into)
        with self.agent_store.write() as db:
            self.agent_store.lock_agents(db, tenant)
            self._merge_in(db, tenant, key, into, into_row=into_row, actor=actor, reset_streams=True)
        self.forget(tenant)
        return self._one(tenant, into)

    def _merge_in(self, db: Any, tenant: str, key: str, into: str, *, into_row: dict[str, Any] | None, actor: str,
                  reset_streams: bool) -> None:
        """:meth:`merge`'s re-keying, in transaction ``db`` (the tenant's agent lock taken)."""
        if into_row is None:
            self.agent_store.insert_agent(db, tenant, into, source="option")
        kept = self.agent_store.newest_activation(db, tenant, into)
        self._move_all(db, tenant, key, into, reset_streams=reset_streams, keep_profile=True)
        self.agent_store.move_activations(db, tenant, key, into)
        if kept is not None:  # the agent merged into keeps the model it served
            self.agent_store.add_activation(db, tenant, into, kept, actor=actor, action="promote")

    def split(self, tenant: str, key: str, trace_ids: Sequence[str], *, name: str | None, actor: str) -> dict[str, Any]:
        """Runs ``trace_ids`` of agent ``key`` become a new agent (``name``, else a key of its own)."""
        self._existing(tenant, key, "agent")
        ids = list(dict.fromkeys(trace_ids))
        if not ids:
            raise InputError("name at least one run of this agent to split off", path="trace_ids")
        if len(ids) > MAX_SPLIT_RUNS:
            raise InputError(f"at most {MAX_SPLIT_RUNS} runs per split; got {len(ids)}", path="trace_ids")
        new = None
        if name is not None:
            new = clean_agent_name(name)
            if new is None or new != name:
                raise InputError(f"a name is 1-200 printable characters without outer blanks; got {name!r}",
                                 path="name")
            if any(r["key"] == new for r in self.agent_store.agent_rows(tenant)) or new in self.agent_store.agent_stats(tenant):
                raise InputError(f"an agent {new!r} exists already", path="name")
        self.agent_store.counts_current()  # the count below is read inside the write, as applied
        with self.agent_store.write() as db:
            self.agent_store.lock_agents(db, tenant)
            found = self.agent_store.existing_trace_ids(db, tenant, key, ids)
            missing = sorted(set(ids) - set(found))
            if missing:
                raise InputError(f"not runs of agent {key!r}: {', '.join(missing[:10])}", path="trace_ids")
            if len(found) == self.agent_store.agent_stats(tenant)[key].runs:
                raise InputError(f"these are all of agent {key!r}'s runs: rename it instead", path="trace_ids")
            runs = [self._signature(t) for t in self.agent_store.agent_runs(db, tenant, key, limit=PROFILE_REBUILD_RUNS)
                    if str(t.get("id")) in set(found)]
            if new is None:
                taken = {r["key"] for r in self.agent_store.agent_rows(tenant, db)}
                new = self._free_key(new_agent_key(runs[0]) if runs else "agent-split", taken)
            profile = AgentProfile.from_signatures(runs)
            self.agent_store.insert_agent(db, tenant, new, source="split", profile=profile.to_json(), n_runs=profile.n_runs,
                                    name=name)
            self.agent_store.rekey(db, tenant, key, new, trace_ids=found)
            self._feed(db)
            self.agent_store.reset_streams(db, tenant, key)
            for r in self.agent_store.agent_rows(tenant, db):  # agents merged into it: its rebuilt profile speaks for them
                if r["alias_of"] == key and r["profile"] is not None:
                    self.agent_store.save_agent(db, tenant, r["key"], profile=None)
            self._rebuild_profile(db, tenant, key)
        self.forget(tenant)
        return self._one(tenant, new)

    def _feed(self, db: Any) -> None:
        """The streams' waiting feed applied in transaction ``db`` (every batch of it)."""
        if self.apply_feed is not None:
            self.apply_feed(db)

    def _move_all(self, db: Any, tenant: str, old: str, new: str, *, reset_streams: bool,
                  keep_profile: bool = False) -> None:
        """``old``'s runs, streams and aliases move to ``new``; ``old`` becomes an alias. A merged
        agent's profile stays on its alias row (``keep_profile``): the runs that matched it keep
        matching it and follow the alias; a renamed agent's profile went to its new row."""
        self.agent_store.rekey(db, tenant, old, new)
        self._feed(db)
        self.agent_store.move_streams(db, tenant, old, new, reset=reset_streams)
        self.agent_store.insert_agent(db, tenant, old, source="option")  # (runs without a row until now)
        if keep_profile:
            self.agent_store.save_agent(db, tenant, old, alias_of=new, n_runs=0)
        else:
            self.agent_store.save_agent(db, tenant, old, alias_of=new, profile=None, n_runs=0)
        self.agent_store.point_aliases(db, tenant, old, new)

    def _rebuild_profile(self, db: Any, tenant: str, key: str) -> None:
        """``key``'s profile from its newest runs (only for an agent that is matched by profile)."""
        sigs = [self._signature(t) for t in self.agent_store.agent_runs(db, tenant, key, limit=PROFILE_REBUILD_RUNS)]
        profile = AgentProfile.from_signatures(sigs)
        self.agent_store.save_agent(db, tenant, key, profile=profile.to_json(), n_runs=profile.n_runs)

    @staticmethod
    def _signature(stored: dict[str, Any]) -> RunSignature:
        try:
            return signature(Trace.model_validate(stored))
        except ValidationError:  # a stored trace the schema no longer reads: it shows nothing of its agent
            return signature(Trace())

    def _adopt_models(self, tenant: str, old: str, new: str) -> None:
        """Copy ``old``'s registered model versions to ``new``'s folder (before the activations move)."""
        if self.registry is not None:
            self.registry.adopt(tenant, old, new)

    def _one(self, tenant: str, key: str) -> dict[str, Any]:
        return next(a for a in self.list(tenant) if a["key"] == key)


__all__ = ["MAX_SPLIT_RUNS", "PROFILE_TTL_S", "Agents", "Resolved"]
