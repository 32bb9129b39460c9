"""Consolidation of inferred agents: what the first runs decided, undone as agents grow.

When an agent reaches 5, 10, 20, 40, … runs (:func:`consolidation_due`) it takes over each agent with
fewer runs that it now matches: a provisional one (under
:data:`~model.core.identity.PROVISIONAL_RUNS` runs) when it takes every one of its runs
(:func:`absorbs`), an established one when each takes the other's typical run (:func:`same_agent`).
:func:`infer_agents` replays a tenant's runs offline as the service assigns them online
(``serve.services.agents``), with merges recorded as aliases. The signatures and profiles are
:mod:`model.core.identity`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from model.core.identity import (
    PROVISIONAL_RUNS,
    THRESHOLD,
    AgentProfile,
    RunSignature,
    assign,
    new_agent_key,
    new_profile,
)


def consolidation_due(n_runs: int) -> bool:
    """Whether an agent that has just reached ``n_runs`` runs checks the tenant's provisional agents
    against itself: at :data:`PROVISIONAL_RUNS` runs and each doubling after (5, 10, 20, 40, …), so
    that the checks cost O(log n) per agent.

    >>> [n for n in range(1, 50) if consolidation_due(n)]
    [5, 10, 20, 40]
    """
    q, r = divmod(n_runs, PROVISIONAL_RUNS)
    return r == 0 and q > 0 and q & (q - 1) == 0


def absorbs(profile: AgentProfile, sigs: Sequence[RunSignature], threshold: float = THRESHOLD) -> bool:
    """Whether ``profile`` (an established agent) takes every one of ``sigs`` (a provisional
    agent's runs), as :func:`assign` would: at or above ``threshold`` both ways."""
    return bool(sigs) and all(profile.similarity(s) >= threshold and profile.known_share(s) >= threshold
                              for s in sigs)


def same_agent(a: AgentProfile, b: AgentProfile, threshold: float = THRESHOLD) -> bool:
    """Whether two established agents are one: each takes the other's typical run
    (:meth:`AgentProfile.core`) as :func:`assign` would, at or above ``threshold`` both ways."""
    return absorbs(a, [b.core()], threshold) and absorbs(b, [a.core()], threshold)


def infer_agents(sigs: Iterable[RunSignature], profiles: dict[str, AgentProfile] | None = None,
                 threshold: float = THRESHOLD, aliases: dict[str, str] | None = None) -> list[str]:
    """Runs in arrival order → their agent keys, as the service assigns them (one tenant);
    ``profiles`` (default: none yet) is updated in place. A provisional agent merged into an
    established one (:func:`consolidation_due`, :func:`absorbs`) keeps its profile under its key,
    recorded in ``aliases`` (updated in place); its runs, past and later, answer the agent it joined
    (the service re-keys them)."""
    profiles = {} if profiles is None else profiles
    aliases = {} if aliases is None else aliases
    young: dict[str, list[RunSignature]] = {}  # a provisional agent's runs
    out = []
    for sig in sigs:
        key, _ = assign(sig, profiles, threshold)
        if key is None:
            key = new_agent_key(sig)
            while key in profiles:  # an identical first run of another agent: keep both apart
                key = "agent-" + hashlib.sha256(key.encode()).hexdigest()[:8]
            profiles[key] = new_profile(sig, profiles)
        else:
            profiles[key].update(sig)
        out.append(key)
        agent = aliases.get(key, key)
        if agent != key:
            continue
        n = profiles[key].n_runs
        if n < PROVISIONAL_RUNS:
            young.setdefault(key, []).append(sig)
            continue
        young.pop(key, None)
        if consolidation_due(n):
            for small in sorted(profiles):
                if small == key or small in aliases or profiles[small].n_runs >= n:
                    continue
                runs = young.get(small)
                if absorbs(profiles[key], runs, threshold) if runs else same_agent(profiles[key], profiles[small],
                                                                                     threshold):
                    young.pop(small, None)
                    for k, v in list(aliases.items()):
                        if v == small:
                            aliases[k] = key
                    aliases[small] = key
    return [aliases.get(k, k) for k in out]


__all__ = ["absorbs", "consolidation_due", "infer_agents", "same_agent"]
