"""The console's glossary: each internal name a page shows, in plain words.

A page shows such a name through the ``term`` macro (``serve/ui/templates/_macros.html``), which
puts the explanation in the element's ``title``; ``tests/test_console_browser.py`` checks, on every
page, that each of these names carries a title or a legend where it shows. One word per thing: the
same name means the same thing on every page and in docs/console.md.
"""

from __future__ import annotations

#: name shown → what it means (the ``title`` the page gives it).
TERMS: dict[str, str] = {
    # the basis of a failure probability (failure_probability_basis.model) and the learners a retrain serves
    "zero-shot": "the run scorer shipped with the service, trained on other agents' runs; it answers for an "
                 "agent until a model trained on that agent's own labelled runs is promoted",
    "agent model": "the agent's own model, trained on its labelled runs (triage retrain)",
    "TF-IDF": "a cheap learner: TF-IDF of the run's text + logistic regression; served instead of the agent "
              "model when it measured better",
    "length fit": "a cheap learner: a fit on the run's length alone (messages, tool calls, characters); served "
                  "instead of the agent model when it measured better",
    "learner": "what a registered version serves: the agent model, or a cheap learner (TF-IDF, length fit) "
               "that beat it in the retrain's cross-validation",
    "_pooled": "the tenant's pooled model: the agents with too few labelled runs of their own share it",
    # how a run's agent was found (GET /v1/agents: source)
    "option": "named by the caller (options.agent, or the session's agent)",
    "span": "named by the run's root agent span (gen_ai.agent.name)",
    "task_type": "named by the run's task type (the caller asked for that)",
    "inferred": "no name given: inferred from what the runs show (their tools and opening prompts)",
    "split": "split off another agent by an operator (triage agents split)",
    "(pool)": "runs that name no agent, stored before agents were inferred (their agent key: _pool)",
    # what flagged a pattern's runs (GET /v1/patterns: basis)
    "rule": "a detector's rule found it in the run",
    "probability": "flagged only by the run scorer's failure probability: no detector's rule found it",
    # model quality
    "AUROC": "area under the ROC curve: the chance that a failed run gets a higher failure probability than a "
             "healthy one (0.5: chance, 1: always)",
    "CV AUROC": "AUROC measured by cross-validation over the agent's labelled runs, grouped by task",
    "ECE": "expected calibration error: how far the failure probabilities are from the failure rates seen "
           "(0: calibrated)",
    # the label queue
    "operating point": "the failure probability above which a run is called failed (the agent's relative "
                       "threshold when it has one, else the run scorer's)",
    "threshold": "the confidence above which a finding of this kind counts",
    "margin": "how far the run is from being decided the other way; the queue asks about the smallest "
              "margins first",
    # repairs
    "rung": "the step of the failure kind's repair ladder (0: the first repair tried); a failed repair "
            "moves up a rung",
    "attempt": "the try within the rung, from 1 (a retry rung allows several)",
    # the execution graph's edges (model/core/graph.py)
    "result_of": "a tool result → the call it answers (by call id, else the latest open call of that tool)",
    "retry_of": "a tool call → the earlier call of the same tool whose result failed (a retry)",
    "uses_result_of": "a step → the earlier tool result whose ids or figures it repeats",
    # streams
    "cusum": "CUSUM (cumulative sum) detector: raises an alarm when the stream's mean drifts from its "
             "baseline for long enough",
    "CUSUM": "cumulative sum detector: raises an alarm when the stream's mean drifts from its baseline for "
             "long enough",
    "binseg": "binary segmentation (ruptures): splits the series where its mean changes most, then each "
              "part again, while a split pays for its penalty",
    "pelt": "PELT (ruptures): the exact set of change points that minimises cost + penalty",
    "window": "sliding-window change points (ruptures): where the two halves of a window differ most",
}


#: How a page names a learner (``learner`` of a registry version, of a retrain, of a basis) and a
#: basis model (``failure_probability_basis.model``): the glossary's words.
SHOWN: dict[str, str] = {"agent": "agent model", "tfidf": "TF-IDF", "length": "length fit",
                         "zero-shot": "zero-shot"}


#: The title of a finding's detector name (the registry's names: docs/detectors.md).
DETECTOR = "the detector that found it (runscore: the run scorer's failure probability; docs/architecture.md)"


def explain(name: str) -> str:
    """The title for ``name`` (``""`` when the glossary does not know it: the page shows it bare)."""
    return TERMS.get(name, "")


__all__ = ["DETECTOR", "SHOWN", "TERMS", "explain"]
