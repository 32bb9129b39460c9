"""The dataset generator: realistic traces of tool-using agents, with failures injected at known steps.

>>> from model.data.datagen import GenerateConfig, generate
>>> t = next(generate(GenerateConfig(n_traces=1, seed=1)))
>>> t.labels.provenance["generator"]
'model.data.datagen'
"""

from __future__ import annotations

from model.data.datagen.families import FAMILIES
from model.data.datagen.generator import (
    GENERATOR_VERSION,
    GenerateConfig,
    generate,
    make_one,
    read_jsonl,
    summary,
    write_jsonl,
)

__all__ = [
    "FAMILIES",
    "GENERATOR_VERSION",
    "GenerateConfig",
    "generate",
    "make_one",
    "read_jsonl",
    "summary",
    "write_jsonl",
]
