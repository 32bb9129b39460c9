"""The dataset generator: realistic traces of tool-using agents, with failures injected at known steps.

>>> from model.datagen import GenerateConfig, generate
>>> t = next(generate(GenerateConfig(n_traces=1, seed=1)))
>>> t.labels.provenance["generator"]
'model.datagen'
"""

from __future__ import annotations

from model.datagen.families import FAMILIES
from model.datagen.generator import (
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
