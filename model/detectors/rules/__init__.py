"""Rule detectors: fast, explainable checks over one trace, one module per family.

Each rule is a trace detector (``inspect(trace) -> list[Finding]``, named in
:mod:`model.detectors.catalog`), linear in the number of steps. Every finding names the step (index
into ``Trace.steps``), its ``source_index`` and ``span_id``, an evidence excerpt and structured
``details``.

- :mod:`~model.detectors.rules.answer`: ``empty_response``, ``incomplete``;
- :mod:`~model.detectors.rules.failed`: ``tool_error``, ``timeout``, ``rate_limited``,
  ``provider_error``, ``ignored_error``;
- :mod:`~model.detectors.rules.refusal`: ``refusal``;
- :mod:`~model.detectors.rules.calls`: ``malformed_call``, ``disallowed_tool``;
- :mod:`~model.detectors.rules.loop`: ``loop``;
- :mod:`~model.detectors.rules.assumption`: ``assumption_violated``;
- :mod:`~model.detectors.rules.common`: what they share (the ``Rule`` base, findings, the final answer).

Confidences are fixed per kind of evidence, highest where the trace says so explicitly:

========================================  ==========
evidence                                  confidence
========================================  ==========
an explicit failed status / error step    0.95
a JSON error envelope, a Traceback        0.90
HTTP 4xx/5xx, timeout or 429 text         0.85
an exception line, ``Error:`` prefix      0.75–0.80
heuristics (ignored error, assumption)    0.65–0.80
weak or contradicted evidence (a refusal  0.40–0.45
followed by an answer, an unknown tool,
an error the answer worked around)
a failure that a later step recovered     0.30 (:data:`~model.detectors.rules.common.RECOVERED_CONFIDENCE`)
========================================  ==========

Everything below 0.5 (the default fusion threshold in :mod:`model.diagnosis.diagnoser`) is meant as a
signal: reported, not acted on.

A failure that a later step recovered from (a successful retry of the same tool; an LLM answer
after a provider error) is still reported, at ``RECOVERED_CONFIDENCE`` with
``details["recovered_by_step"]``, so that fusion keeps it as a signal, not a failure.
"""
