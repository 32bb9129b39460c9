"""agent-triage's client: its own small distribution (httpx + pydantic), nothing of the server.

- :class:`TriageClient` / :class:`AsyncTriageClient`: the whole HTTP API, fail-open with a time
  budget, retries with backoff honouring ``Retry-After``;
- :func:`iter_traces` / :func:`aiter_traces` (``agent_triage_client.paging``): every stored trace,
  page after page by the answers' keyset cursor;
- :class:`StepStream`: turns framework events into session steps (what the adapters build on);
- :class:`RepairExecutor` (``agent_triage_client.executor``): carries out every repair strategy the
  service recommends, with per-message snapshots for rollback; :class:`TriageAgent`
  (``agent_triage_client.agent``): a generic tool-using agent loop (LLM callable, tool registry,
  messages) wrapped by it, returning a :class:`RunReport`;
- ``agent_triage_client.langchain.TriageCallbackHandler`` and
  ``agent_triage_client.openai_agents.TriageTracingProcessor``: stream an agent's steps to
  ``/v1/sessions`` as it runs. They import their framework only when imported themselves
  (``pip install 'agent-triage-client[langchain]'`` / ``[openai-agents]``).

>>> from agent_triage_client import TriageClient
>>> TriageClient("http://127.0.0.1:9").diagnose({"messages": [{"role": "user", "content": "hi"}]},
...                                             ).recommendation.strategy   # nothing listens on :9
'continue'
"""

from agent_triage_client._client import DEFAULT_BASE_URL, AsyncTriageClient, TriageClient, retry_after_s
from agent_triage_client._errors import TriageAPIError, TriageClientError, TriageUnavailable
from agent_triage_client.agent import AsyncTriageAgent, RunReport, TriageAgent
from agent_triage_client.executor import Handoff, RepairContext, RepairExecutor, RepairResult, Replan
from agent_triage_client.models import Diagnosis, ProbabilityBasis, Recommendation, SessionStep
from agent_triage_client.paging import aiter_traces, iter_traces
from agent_triage_client.stream import StepStream

__all__ = [
    "DEFAULT_BASE_URL",
    "AsyncTriageAgent",
    "AsyncTriageClient",
    "Diagnosis",
    "ProbabilityBasis",
    "Handoff",
    "Recommendation",
    "RepairContext",
    "RepairExecutor",
    "RepairResult",
    "Replan",
    "RunReport",
    "SessionStep",
    "StepStream",
    "TriageAPIError",
    "TriageAgent",
    "TriageClient",
    "TriageClientError",
    "TriageUnavailable",
    "aiter_traces",
    "iter_traces",
    "retry_after_s",
]
