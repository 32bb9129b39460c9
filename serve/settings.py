"""All settings of the service, in one pydantic-settings class (environment prefix ``TRIAGE_``).

No other module reads ``os.environ``: code receives a :class:`Settings` (the app through the
cached :func:`get_settings` dependency, which tests override).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Settings of the service and the CLI. Every field reads ``TRIAGE_<NAME>`` from the environment."""

    model_config = SettingsConfigDict(env_prefix="TRIAGE_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="Address `triage serve` binds.")
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1)
    max_body_bytes: int = Field(default=5 * 1024 * 1024, ge=1024, description="Larger bodies get 413.")
    max_steps: int = Field(default=5000, ge=1, description="Longer traces get 413.")
    model_path: Path | None = Field(
        default=None,
        description="Folder of the classifier artefact (model.onnx + tokenizer.json); "
        "default: the shipped model/artifacts/ when present.",
    )
    classifier: bool = Field(default=True, description="Load the classifier at start-up when present.")
    ort_threads: int = Field(default=2, ge=1, description="onnxruntime intra-op threads per worker.")
    policy_path: Path | None = Field(default=None, description="A repair policy YAML over the default.")


@lru_cache
def get_settings() -> Settings:
    """The process's settings (cached); tests override the dependency instead of the environment."""
    return Settings()


__all__ = ["Settings", "get_settings"]
