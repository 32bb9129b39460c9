"""Shared pytest fixtures. Keep this small: each part of the project owns its own fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
