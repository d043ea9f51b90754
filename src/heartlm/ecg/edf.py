"""EDF records through `edfio`: every signal at its own rate, as WFDB leads are read.

wfdb's `read_edf` brings all signals of a file to one frame rate, the greatest common
divisor of their rates: beside a 1 Hz SpO2 signal, a 500 Hz ECG comes out as 1 Hz
averages. edfio (pure Python, numpy only) reads each signal as it was sampled.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from heartlm.ecg.signals import Lead, RecordInfo, in_millivolts
from heartlm.errors import HeartlmError


def open_edf(path: Path) -> RecordInfo:
    """The signals of an EDF (or EDF+C) file; an EDF+D (interrupted) recording is refused."""
    import edfio

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a short file is refused below, not warned about
            edf = edfio.read_edf(path, lazy_load_data=True)
        with open(path, "rb") as f:
            stated = int(f.read(256)[236:244])  # the header's count of data records
    except FileNotFoundError:
        raise HeartlmError("no such EDF file", path) from None
    except Exception as exc:  # edfio raises ValueError and friends on malformed files
        raise HeartlmError(f"cannot read EDF ({type(exc).__name__}: {exc})", path) from None
    if edf.num_data_records < stated:
        raise HeartlmError(
            f"truncated: {edf.num_data_records} of the {stated} data records the header states",
            path,
        )
    if not edf.is_continuous:
        raise HeartlmError("EDF+D (interrupted recording) is not supported", path)
    if not edf.signals:
        raise HeartlmError("EDF file holds no signals", path)
    return RecordInfo(
        path=path,
        sig_names=[s.label.strip() or f"signal {i}" for i, s in enumerate(edf.signals)],
        sig_fs=[float(s.sampling_frequency) for s in edf.signals],
        units=[s.physical_dimension for s in edf.signals],
        frame_fs=None,
        comments=[],
        source=edf,
    )


def read_edf_lead(info: RecordInfo, index: int, float32: bool = False) -> Lead:
    try:
        x = info.source.signals[index].data
    except Exception as exc:
        raise HeartlmError(
            f"cannot read EDF signals ({type(exc).__name__}: {exc})", info.path
        ) from None
    if len(x) == 0:
        raise HeartlmError("EDF file holds no samples", info.path)
    x = np.asarray(x, dtype=np.float32 if float32 else np.float64)
    return Lead(info.sig_names[index], info.sig_fs[index], in_millivolts(x, info.units[index]))
