"""``triage retrain``'s localisation step: whether an agent's own where-model serves its ``attribution``.

For an agent's labelled runs (:class:`~serve.services.retrain_plan.LabelledRun`), the failed ones whose
label says where they went wrong (``step`` or ``source_index`` on the label:
``POST /v1/traces/{id}/labels``, the review's ``s`` key) go to
:func:`model.training.agentmodel.where_served.choose_localiser`: grouped cross-validation inside those runs,
the where-model against the agent's position prior on exact accuracy, kept only when the paired interval is
above 0. The decision and its figures go in the model card and the version's report; a kept where-model is
registered beside the agent model (``where.json``, :meth:`model.scoring.agent_registry.Registry.save`) and
the hot swap loads it with it (:class:`serve.services.agent_models.AgentModels`). The tenant's pooled model
gets none: a where-model is one agent's.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.scoring.agent_registry import POOLED
from model.training.agentmodel.where_served import LocaliserChoice, choose_localiser
from serve.services.retrain_plan import LabelledRun


def localiser_for(key: str, runs: Sequence[LabelledRun], groups: Sequence[str], *, seed: int = 0,
                  min_runs: int | None = None) -> LocaliserChoice:
    """The localisation decision for registry key ``key`` on its runs and their task ``groups``
    (module docstring); ``min_runs``: the rule's default
    (:data:`~model.training.agentmodel.where_served.MIN_WHERE_RUNS`) unless given."""
    if key == POOLED:
        return LocaliserChoice(False, "the pooled model serves several agents; a where-model is one agent's")
    failed = [(r, g) for r, g in zip(runs, groups, strict=True) if r.failed]
    kw = {} if min_runs is None else {"min_runs": min_runs}
    return choose_localiser([r.trace for r, _ in failed], [r.fail_source_index for r, _ in failed],
                            [g for _, g in failed], seed=seed, **kw)


__all__ = ["localiser_for"]
