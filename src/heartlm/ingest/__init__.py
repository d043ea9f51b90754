"""`heartlm ingest`: WFDB records to a beat store (filtered, resampled, labelled beat windows)."""

from heartlm.ingest.config import IngestConfig
from heartlm.ingest.pipeline import ingest

__all__ = ["IngestConfig", "ingest"]
