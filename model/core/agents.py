"""Which agent a run belongs to: the key of its agent model (and of its metric streams).

A tenant runs several agents; each is learned from its own labelled history (issue 20). A run's
agent is, in order:

1. the name the caller gives: ``options.agent`` on ``POST /v1/diagnose``, ``agent`` on a session
   append (the client and its adapters send it);
2. else the root agent span's name in a span trace: the ``gen_ai.agent.name`` of the outermost
   ``invoke_agent`` / ``create_agent`` span (OpenInference: the outermost ``AGENT`` span's
   ``agent.name``), which the span importers record as ``metadata["gen_ai.agent.name"]``;
3. else the run's task type, only when the caller says task types name its agents
   (``task_type_names_agent``): ``task_type`` is a caller's field, not an agent's name;
4. else an agent **inferred** from what the run shows of it (:mod:`model.core.identity`): this
   module answers ``(None, "inferred")`` and the service assigns the run against the tenant's
   agent profiles (:func:`model.core.identity.assign`).

Rows stored before inference existed may carry :data:`POOL_AGENT`, the one agent every unnamed
run of a tenant used to share; no new run gets it.

>>> from model.core.schema import Trace
>>> agent_and_source(Trace(task_type="refunds"), "billing-bot")
('billing-bot', 'option')
>>> agent_and_source(Trace(task_type="refunds"))
(None, 'inferred')
>>> agent_and_source(Trace(task_type="refunds"), task_type_names_agent=True)
('refunds', 'task_type')
"""

from __future__ import annotations

from typing import Literal

from model.core.schema import Trace

#: The agent of legacy rows: every unnamed run of a tenant, before agents were inferred.
POOL_AGENT = "_pool"
#: Where the span importers put the root agent span's name.
AGENT_METADATA_KEY = "gen_ai.agent.name"
#: The longest agent name kept (longer ones are cut; an explicit one longer is refused).
MAX_AGENT_LENGTH = 200

AgentSource = Literal["option", "span", "task_type", "inferred"]


def clean_agent_name(value: object) -> str | None:
    """``value`` as an agent name: a string with its control characters and outer blanks dropped,
    cut to :data:`MAX_AGENT_LENGTH`; ``None`` when nothing is left (or it is not a string)."""
    if not isinstance(value, str):
        return None
    name = "".join(ch for ch in value if ch.isprintable()).strip()[:MAX_AGENT_LENGTH]
    return name or None


def agent_and_source(trace: Trace, explicit: str | None = None, *,
                     task_type_names_agent: bool = False) -> tuple[str | None, AgentSource]:
    """The run's agent (see the module docstring) and which rule gave it; ``(None, "inferred")``
    when nothing names it and the service must infer it."""
    name = clean_agent_name(explicit)
    if name is not None:
        return name, "option"
    name = clean_agent_name(trace.metadata.get(AGENT_METADATA_KEY)) if isinstance(trace.metadata, dict) else None
    if name is not None:
        return name, "span"
    if task_type_names_agent:
        name = clean_agent_name(trace.task_type)
        if name is not None:
            return name, "task_type"
    return None, "inferred"


def resolve_agent(trace: Trace, explicit: str | None = None, *, task_type_names_agent: bool = False) -> str | None:
    """The run's named agent (:func:`agent_and_source`'s first half); ``None``: to be inferred."""
    return agent_and_source(trace, explicit, task_type_names_agent=task_type_names_agent)[0]


__all__ = ["AGENT_METADATA_KEY", "MAX_AGENT_LENGTH", "POOL_AGENT", "AgentSource", "agent_and_source",
           "clean_agent_name", "resolve_agent"]
