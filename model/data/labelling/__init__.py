"""Labelling: rule detectors as labelling functions, a label model, human review, the label stage.

>>> from model.data.labelling import LabelModel, apply_lfs
>>> from model.data.builder import make_trace
>>> t = make_trace("timeout", seed=1)
>>> [v.step for v in apply_lfs(t) if v.lf == "timeout"] == [t.labels.first_failing_step]
True
"""

from __future__ import annotations

from model.data.labelling.functions import Vote, apply_lfs, lf_names
from model.data.labelling.human import HumanLabel, HumanLabelStore, apply_human
from model.data.labelling.labelmodel import LabelModel, WeakLabel
from model.data.labelling.raw import ImportRecord, import_logs, load_raw, read_manifest

__all__ = [
    "HumanLabel",
    "HumanLabelStore",
    "ImportRecord",
    "LabelModel",
    "Vote",
    "WeakLabel",
    "apply_human",
    "apply_lfs",
    "import_logs",
    "lf_names",
    "load_raw",
    "read_manifest",
]
