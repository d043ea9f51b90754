"""Synthetic, labelled ECG: in-memory records (`synth_record`) and WFDB corpora (`write_corpus`)."""

from heartlm.synth.corpus import SynthConfig, write_corpus
from heartlm.synth.record import SynthRecord, synth_record

__all__ = ["SynthConfig", "SynthRecord", "synth_record", "write_corpus"]
