"""Which model version each of a tenant's agents serves: promote, roll back and the record of both
(``POST /v1/operator/models/promote`` / ``…/rollback``, ``triage model``, the console's Models page).

Promotion and rollback are :func:`serve.services.retrain.promote_version` and
:func:`~serve.services.retrain.rollback_version` (load and smoke-check the version, then record it);
this service answers with the agent's history after the change."""

from __future__ import annotations

from typing import Any, Literal

from model.scoring.agent_registry import ZERO_SHOT, Registry
from serve.schemas import ActivationOut, ModelActionOut
from serve.store.activations import ActivationStore


class ModelActivations:
    """The tenant's model activations over ``activation_store``; the registry is the caller's
    (``TRIAGE_MODEL_REGISTRY``)."""

    def __init__(self, activation_store: ActivationStore) -> None:
        self.activation_store = activation_store

    def promote(self, registry: Registry, tenant: str, agent: str, version: str, *, actor: str) -> ModelActionOut:
        """Serve the agent's ``version`` from now on (checked first); the agent's history after it."""
        from serve.services.retrain import promote_version  # retrain imports the training code: on use

        promote_version(self.activation_store, registry, tenant, agent, version, actor=actor)
        return self._answer(tenant, agent, "promote", version)

    def rollback(self, registry: Registry, tenant: str, agent: str, *, actor: str) -> ModelActionOut:
        """Serve the agent's previous version (``zero-shot`` past its first promotion);
        :class:`~model.core.errors.InputError` (path ``agent``) when it is answered zero-shot already."""
        from serve.services.retrain import rollback_version

        target = rollback_version(self.activation_store, registry, tenant, agent, actor=actor)
        return self._answer(tenant, agent, "rollback", target or ZERO_SHOT)

    def history(self, tenant: str, agent: str | None = None) -> list[dict[str, Any]]:
        """The activations of the agent (``None``: of every agent), newest first."""
        return self.activation_store.model_history(tenant, agent)

    def active_model(self, tenant: str, agent: str) -> str | None:
        """The version the tenant serves for ``agent`` (``None``: no activation recorded)."""
        return self.activation_store.active_model(tenant, agent)

    def active_models(self, tenant: str) -> dict[str, str]:
        """Each agent's active version."""
        return self.activation_store.active_models(tenant)

    def _answer(self, tenant: str, agent: str, action: Literal["promote", "rollback"], active: str) -> ModelActionOut:
        history = [ActivationOut.model_validate(h) for h in self.history(tenant, agent)]
        return ModelActionOut(tenant=tenant, agent=agent, action=action, active=active, history=history)


__all__ = ["ModelActivations"]
