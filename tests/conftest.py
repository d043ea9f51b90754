"""Shared fixtures: where the real PhysioNet databases are, and a skip when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_ECG = Path(os.environ.get("HEARTLM_ECG_DIR", REPO.parent / "shared" / "ecg"))

requires_shared = pytest.mark.skipif(
    not (SHARED_ECG / "mitdb").is_dir(),
    reason=f"real ECG databases not found at {SHARED_ECG} (set HEARTLM_ECG_DIR)",
)


@pytest.fixture
def shared_ecg() -> Path:
    if not (SHARED_ECG / "mitdb").is_dir():
        pytest.skip(f"real ECG databases not found at {SHARED_ECG}")
    return SHARED_ECG
