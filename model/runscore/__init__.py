"""Run-level diagnosis on real runs: ``failure_probability`` and ``attribution``.

:mod:`~model.runscore.features` reads domain-general evidence per agent message and per run;
:mod:`~model.runscore.model` fits and serves the scorer (numpy only at serve time);
:mod:`~model.runscore.evaluate` is the leave-one-source-out evaluation on the real sets
(``triage evaluate --real``); :mod:`~model.runscore.train` fits the shipped artefact.
"""

from .model import ARTIFACT, Example, RunScorer, ScoredRun

__all__ = ["ARTIFACT", "Example", "RunScorer", "ScoredRun"]
