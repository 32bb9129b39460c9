"""The agent model: what separates failure on one agent, learned from that agent's own labelled runs.

Issue 20 ("Learn each agent from its own history"). Layout (each module owns one part):

* ``features`` — the feature spec carried by the artefact (run shape, hashed role-prefixed n-grams,
  findings) and the incremental per-step state that scores every prefix online;
* ``model`` — :class:`AgentModel`: fit on labelled runs (whole runs and their prefixes), score a run
  or a prefix, its early-warning operating point, its card; serialisable, numpy / scipy only;
* ``cv`` — grouped cross-validation (by task id, else near-duplicate clustering of the opening
  request), the cheap learners fitted on the same folds, paired bootstrap intervals: the gate's and
  the learning curve's one estimate;
* ``learning`` — ``triage evaluate --learning-curve``: per set, K labelled runs, draws, intervals;
* ``where`` — the learned attribution (position prior of the agent's failing steps plus content);
* ``queue`` — the review queue's order (uncertainty and diversity) against random.
"""
