"""One synthetic record in memory: signal and reference annotations, consistent by construction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heartlm.synth.noise import add_flutter_waves, add_fwaves, add_noise
from heartlm.synth.patient import SICK_SINUS_COUPLING, SICK_SINUS_ECTOPY, draw_patient
from heartlm.synth.render import beat_waves, peak_times, render
from heartlm.synth.rhythm import draw_beats

LEAD_NAMES = ("MLII", "V1")


@dataclass
class SynthRecord:
    """A record as WFDB would hold it: signal in mV and MIT-BIH-style annotations.

    Beat annotations sit on the drawn R peak (or a wide beat's dominant lobe) in lead 0;
    rhythm changes are `+` annotations with aux_note such as '(N', '(AFIB', '(AFL' or '(P'.
    """

    signal: np.ndarray  # (n, leads) float64 mV
    fs: float
    sig_names: list[str]
    ann_sample: np.ndarray  # (A,) int64, ascending
    ann_symbol: list[str]
    ann_aux: list[str]  # '' for beats

    def beats(self) -> tuple[np.ndarray, np.ndarray]:
        """Beat samples and symbols only (rhythm annotations dropped)."""
        symbol = np.array(self.ann_symbol)
        keep = symbol != "+"
        return self.ann_sample[keep], symbol[keep]


def synth_record(
    minutes: float,
    fs: float,
    seed: int | Sequence[int],
    leads: int = 2,
    afib: bool = False,
    paced: bool = False,
    noise: float = 1.0,
    sick_sinus: bool = False,
    flutter: bool = False,
    bigeminy: bool = False,
    afib_ectopy: bool = False,
    fusion: bool = False,
    sick_sinus_ectopy: tuple[float, float] = SICK_SINUS_ECTOPY,
    sick_sinus_coupling: tuple[float, float] = SICK_SINUS_COUPLING,
) -> SynthRecord:
    """Draw one patient and one recording of `minutes` at `fs` Hz.

    `seed` may be a sequence such as (corpus seed, record index): each gives an independent
    stream. `afib` adds AFIB episodes, `paced` makes a paced record, `sick_sinus` a patient
    with a slow, pausing sinus node and atrial ectopic beats in the majority, `flutter` atrial
    flutter episodes instead of AFIB (ignored when paced or sick sinus), `bigeminy` episodes of
    ventricular or atrial bigeminy or trigeminy instead of AFIB (ignored when paced, sick
    sinus or flutter), `afib_ectopy` AFIB episodes with frequent ventricular ectopic beats
    (ignored when paced, sick sinus, flutter or bigeminy), `fusion` a patient with frequent
    ventricular ectopic and fusion beats, each fusion beat the sinus P wave and one of four
    blends of the sinus and the ventricular QRS and T, drawn beat by beat (ignored when paced
    or any of those). `sick_sinus_ectopy` is the range
    of a sick-sinus patient's share of atrial ectopic beats, `sick_sinus_coupling` the range
    of their RR as a share of the sinus cycle. `noise` scales baseline wander,
    muscle and powerline noise (0 gives a clean signal; f-waves and flutter waves stay, they
    are cardiac). A flag left off gives the same record as before the flag existed.
    """
    if leads not in (1, 2):
        raise ValueError(f"leads must be 1 or 2, got {leads}")
    rng = np.random.default_rng(seed)
    duration = float(minutes) * 60.0
    n = round(duration * fs)
    patient = draw_patient(rng, duration, leads, afib=afib, paced=paced, sick_sinus=sick_sinus,
                           flutter=flutter, bigeminy=bigeminy, afib_ectopy=afib_ectopy,
                           fusion=fusion, sick_sinus_ectopy=sick_sinus_ectopy,
                           sick_sinus_coupling=sick_sinus_coupling)  # fmt: skip
    beats = draw_beats(rng, patient, duration)
    waves = beat_waves(rng, beats, patient, fs)

    signal_LN = np.zeros((leads, n))
    render(waves, signal_LN)
    add_fwaves(rng, patient, signal_LN, fs)
    add_flutter_waves(rng, patient, signal_LN, fs)
    add_noise(rng, patient, signal_LN, fs, noise)
    sample = np.rint(peak_times(beats, patient) * fs).astype(np.int64)

    rhythm_sample = [
        max(0, int(sample[np.searchsorted(beats.time, t)]) - int(0.05 * fs))
        for t, _ in beats.episodes
    ]
    all_sample = np.concatenate([np.array(rhythm_sample, np.int64), sample])
    all_symbol = ["+"] * len(rhythm_sample) + beats.symbol.tolist()
    all_aux = [aux for _, aux in beats.episodes] + [""] * len(sample)
    order = np.argsort(all_sample, kind="stable")
    return SynthRecord(
        signal=np.ascontiguousarray(signal_LN.T),
        fs=float(fs),
        sig_names=list(LEAD_NAMES[:leads]),
        ann_sample=all_sample[order],
        ann_symbol=[all_symbol[i] for i in order],
        ann_aux=[all_aux[i] for i in order],
    )
