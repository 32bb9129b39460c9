"""Where the package's files are: the shipped artefacts, the repair policy, the repository's data
and parameters.

Modules locate files through these names, not through ``__file__`` arithmetic of their own, so that
moving a module never moves what it reads.
"""

from __future__ import annotations

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent.parent
"""The ``model`` package's directory."""
ARTIFACTS = MODEL_DIR / "artifacts"
"""The shipped artefacts (``classifier.onnx``, ``runscore.json``, ``gate.json`` …)."""
POLICY = MODEL_DIR / "policy.yaml"
"""The repair policy the ladders read."""
REPO_ROOT = MODEL_DIR.parent
"""The source tree's root (``datasets/`` lives here in a checkout)."""
PARAMS = REPO_ROOT / "params.yaml"
"""The pipeline's parameters in a checkout (one section per DVC stage; ``triage retrain`` reads
``learning_curve``): the default of ``serve.settings.Settings.params_path``."""
