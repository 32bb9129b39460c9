"""Which agent model each (tenant, agent) serves: the ``model_activations`` log
(model/scoring/agent_registry.py holds the artefacts)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from model.core.agents import MAX_AGENT_LENGTH
from model.core.errors import InputError
from serve.store.base import StoreBase, check_tenant_name
from serve.store.tables import ModelActivationRow

#: What a row of ``model_activations`` records.
MODEL_ACTIONS = ("promote", "rollback")


class ActivationStore(StoreBase):
    """The ``model_activations`` table."""

    # -- model registry activations (model/scoring/agent_registry.py holds the artefacts) --------------------
    def active_model(self, tenant: str, agent: str) -> str | None:
        """The registry version of ``agent``'s model the tenant serves (its newest activation), or
        None: no agent model (zero-shot)."""
        with self.read() as db:
            row = db.scalars(
                select(ModelActivationRow)
                .where(ModelActivationRow.tenant_id == tenant, ModelActivationRow.agent == agent)
                .order_by(ModelActivationRow.id.desc())
                .limit(1)
            ).first()
            return row.version if row is not None else None

    def active_models(self, tenant: str) -> dict[str, str]:
        """Every agent of the tenant with an activation → its active version (zero-shot ones included)."""
        with self.read() as db:
            rows = db.execute(
                select(ModelActivationRow.agent, ModelActivationRow.version)
                .where(ModelActivationRow.tenant_id == tenant, ModelActivationRow.agent.is_not(None))
                .order_by(ModelActivationRow.id)
            ).all()
        return {str(a): str(v) for a, v in rows}

    def activate_model(self, tenant: str, version: str, *, actor: str, agent: str, action: str = "promote") -> None:
        """Record that ``tenant`` serves ``version`` for ``agent`` from now on (``action``: promote or rollback)."""
        if action not in MODEL_ACTIONS:
            raise InputError(f"action must be one of {', '.join(MODEL_ACTIONS)}; got {action!r}", path="action")
        if not version or len(version) > 128:
            raise InputError(f"a model version is 1-128 characters; got {version!r}", path="version")
        if not agent or len(agent) > MAX_AGENT_LENGTH:
            raise InputError(f"an agent name is 1-{MAX_AGENT_LENGTH} characters; got {agent!r}", path="agent")
        check_tenant_name(tenant)
        with self.write() as db:
            db.add(ModelActivationRow(tenant_id=tenant, agent=agent, version=version, actor=actor[:200],
                                      action=action))

    def model_history(self, tenant: str, agent: str | None = None) -> list[dict[str, Any]]:
        """The tenant's activations (of ``agent``'s model; ``None``: every agent's, and the tenant-wide
        run scorers' of before revision 0007), newest first: agent, version, activated_at, actor, action."""
        with self.read() as db:
            q = select(ModelActivationRow).where(ModelActivationRow.tenant_id == tenant)
            if agent is not None:
                q = q.where(ModelActivationRow.agent == agent)
            rows = db.scalars(q.order_by(ModelActivationRow.id.desc()))
            return [{"agent": r.agent, "version": r.version, "activated_at": r.activated_at, "actor": r.actor,
                     "action": r.action} for r in rows]


__all__ = ["MODEL_ACTIONS", "ActivationStore"]
