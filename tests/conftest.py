"""Shared fixtures: where the real PhysioNet databases are, and a skip when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

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


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run faster on one torch thread, and CI shares its two cores. Module-wide,
    so golden runs made in module fixtures sum in the same order as the runs compared with
    them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
