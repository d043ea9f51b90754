"""One synthetic patient: heart rate, ectopy, rhythm and noise levels, and beat morphologies.

Every number is drawn from the record's own random generator, so two records differ the way two
patients do (amplitudes, widths, electrical axis, ectopic burden) while one seed gives one patient.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

QRS_REACH_S = 0.08  # waves centred further than this from a beat's peak are P or T waves


@dataclass
class Template:
    """A beat shape as a sum of Gaussian waves, times in seconds relative to the annotated peak.

    `qt` marks repolarisation waves whose delay stretches with the preceding RR (QT adaptation);
    `spike` marks pacemaker spikes, which are drawn but never taken for the beat's peak.
    """

    offset: np.ndarray  # (K,) seconds
    width: np.ndarray  # (K,) seconds (Gaussian sigma)
    amp_KL: np.ndarray  # (K, leads) mV
    qt: np.ndarray  # (K,) bool
    spike: np.ndarray  # (K,) bool

    @staticmethod
    def of(waves: list[tuple[float, float, list[float], bool, bool]]) -> Template:
        off, wid, amp, qt, spike = zip(*waves, strict=True)
        return Template(
            np.array(off), np.array(wid), np.array(amp, dtype=float), np.array(qt), np.array(spike)
        )

    def peak_offset(self) -> float:
        """Where this beat's own QRS has its largest |amplitude| in lead 0 (seconds from 0).

        This is the fiducial point the beat's label marks: the R peak, or a wide beat's dominant
        lobe. P and T waves and pacemaker spikes are not part of the QRS.
        """
        qrs = ~self.qt & ~self.spike & (np.abs(self.offset) < QRS_REACH_S)
        grid = np.arange(-QRS_REACH_S, QRS_REACH_S, 1e-4)
        z = (grid[:, None] - self.offset[None, qrs]) / self.width[None, qrs]
        wave = np.exp(-0.5 * z * z) @ self.amp_KL[qrs, 0]
        return float(grid[np.argmax(np.abs(wave))])

    def scaled(self, factor: float) -> Template:
        return Template(self.offset, self.width, self.amp_KL * factor, self.qt, self.spike)

    def plus(self, other: Template) -> Template:
        return Template(
            np.concatenate([self.offset, other.offset]),
            np.concatenate([self.width, other.width]),
            np.concatenate([self.amp_KL, other.amp_KL]),
            np.concatenate([self.qt, other.qt]),
            np.concatenate([self.spike, other.spike]),
        )


SICK_SINUS_ECTOPY: tuple[float, float] = (0.55, 0.8)
"""Range of a sick-sinus patient's share of atrial ectopic beats (drawn per patient)."""
SICK_SINUS_COUPLING: tuple[float, float] = (0.6, 0.8)
"""Range of a sick-sinus patient's atrial ectopic RR as a share of the sinus cycle."""
FUSION_PATIENT_V: tuple[float, float] = (0.05, 0.2)
FUSION_PATIENT_F: tuple[float, float] = (0.08, 0.16)
"""Ranges of a fusion patient's chances of a ventricular and of a fusion beat (drawn per
patient; an ectopic beat after an ectopic beat is drawn again as sinus, so fewer are): MIT-BIH
208 and 213's fusion beats are 11-13 % of their beats."""
FUSION_TEMPLATES = 4
FUSION_SINUS_SHARE: tuple[float, float] = (0.2, 0.8)
"""A fusion patient's fusion beats: this many blends, each with the sinus beat's share drawn in
this range (the usual patient has one, at 35-65 %)."""


@dataclass
class Patient:
    """Everything about one record that is fixed before its beats are drawn."""

    hr_bpm: float
    rsa: float  # respiratory sinus arrhythmia, fraction of RR
    resp_hz: float
    mayer: float  # ~0.1 Hz baroreflex oscillation, fraction of RR
    drift: float  # slow heart-rate wander, fraction of RR
    p_ectopic: dict[str, float]  # per-beat probability of each non-N symbol
    paced: bool
    pacer_rr: float
    afib: list[tuple[float, float]]  # AFIB episodes (start s, end s)
    afib_rr: float
    afib_cv: float
    sick_sinus: bool = False
    """slow sinus rhythm with long pauses and runs of atrial ectopic beats that outnumber the
    sinus beats (as in MIT-BIH 232): every reference to 'the usual beat' is the ectopic one"""
    pause_prob: float = 0.0  # per sinus beat, sick sinus only
    sick_sinus_coupling: tuple[float, float] = SICK_SINUS_COUPLING
    """range of an atrial ectopic beat's RR as a share of the sinus cycle (sick sinus only;
    drawn per beat)"""
    flutter: list[tuple[float, float]] = field(default_factory=list)  # AFL episodes (start, end)
    flutter_cycle_s: float = 0.25  # atrial cycle of the flutter circuit
    flutter_block: tuple[float, float, float] = (1.0, 0.0, 0.0)  # P(2:1), P(3:1), P(4:1)
    flutter_mv: float = 0.15  # sawtooth amplitude (half its height, as fwave_mv is)
    bigeminy: list[tuple[float, float]] = field(default_factory=list)
    """episodes (start, end) in which every `bigeminy_every`-th beat is a premature
    `bigeminy_symbol` beat at the patient's fixed coupling: an irregular RR that is not AF"""
    bigeminy_every: int = 2  # 2: bigeminy, 3: trigeminy
    bigeminy_symbol: str = "V"  # "V" (ventricular) or "A" (atrial)
    bigeminy_coupling: float = 0.65  # premature beat's RR as a share of the sinus RR
    afib_v: float | None = None
    """share of ventricular ectopic beats in AFIB episodes (None: half the sinus rate's)"""
    fusion: bool = False
    """frequent ventricular and fusion beats, the fusion beats in several blends (templates["F"])"""
    templates: dict[str, list[Template]] = field(default_factory=dict)
    baseline_mv: float = 0.1
    emg_mv: float = 0.02
    line_hz: float = 60.0
    line_mv: float = 0.01
    fwave_mv: float = 0.06
    fwave_hz: float = 6.0
    resp_mod: float = 0.05  # respiratory modulation of beat amplitude


def draw_patient(
    rng: np.random.Generator,
    duration_s: float,
    leads: int,
    afib: bool,
    paced: bool,
    sick_sinus: bool = False,
    flutter: bool = False,
    bigeminy: bool = False,
    afib_ectopy: bool = False,
    fusion: bool = False,
    sick_sinus_ectopy: tuple[float, float] = SICK_SINUS_ECTOPY,
    sick_sinus_coupling: tuple[float, float] = SICK_SINUS_COUPLING,
) -> Patient:
    u = rng.uniform
    # Ectopic burden is patchy across patients, as in MIT-BIH: many have almost none, a few many.
    p_s = u(0.0, 0.002) if u() < 0.5 else rng.gamma(1.5, 0.05)
    p_v = u(0.0, 0.002) if u() < 0.4 else rng.gamma(1.2, 0.08)
    p_f = 0.0 if u() < 0.75 else rng.gamma(1.5, 0.015)
    p_ectopic = {
        "A": min(p_s, 0.2),
        "V": min(p_v, 0.25),
        "F": min(p_f, 0.05),
        "Q": u(0.0, 0.001),
        "f": u(0.02, 0.08),  # pacemaker fusion, paced records only
    }
    episodes = _afib_episodes(rng, duration_s) if afib and not paced else []
    p = Patient(
        hr_bpm=u(55, 95),
        rsa=u(0.01, 0.06),
        resp_hz=u(0.15, 0.35),
        mayer=u(0.005, 0.03),
        drift=u(0.02, 0.08),
        p_ectopic=p_ectopic,
        paced=paced,
        pacer_rr=60.0 / u(60, 80),
        afib=episodes,
        afib_rr=u(0.5, 0.85),
        afib_cv=u(0.15, 0.3),
        baseline_mv=u(0.03, 0.25),
        emg_mv=u(0.003, 0.03),
        line_hz=float(rng.choice([50.0, 60.0])),
        line_mv=u(0.0, 0.02),
        fwave_mv=u(0.03, 0.1),
        fwave_hz=u(4.5, 8.0),
        resp_mod=u(0.02, 0.08),
    )
    p.templates = _templates(rng, leads)
    if sick_sinus and not paced:  # drawn after everything else: other records stay the same
        p.sick_sinus, p.afib = True, []
        p.hr_bpm = u(38, 52)
        p.p_ectopic["A"] = u(*sick_sinus_ectopy)
        p.pause_prob = u(0.05, 0.15)
        p.sick_sinus_coupling = sick_sinus_coupling
    elif flutter and not paced:  # also drawn last
        p.afib = []
        p.flutter = _afib_episodes(rng, duration_s)
        p.flutter_cycle_s = 60.0 / u(240, 340)
        p.flutter_block = _flutter_block(rng)
        p.flutter_mv = u(0.08, 0.2)
    elif bigeminy and not paced:  # also drawn last
        p.afib = []
        p.bigeminy = _afib_episodes(rng, duration_s)
        p.bigeminy_every = 2 if u() < 0.6 else 3
        p.bigeminy_symbol = "V" if u() < 0.7 else "A"
        p.bigeminy_coupling = u(0.55, 0.75) if p.bigeminy_symbol == "V" else u(0.6, 0.8)
    elif afib_ectopy and not paced:  # also drawn last
        p.afib = _afib_episodes(rng, duration_s)
        p.afib_v = u(0.1, 0.25)
    elif fusion and not paced:  # also drawn last
        p.afib, p.fusion = [], True
        p.p_ectopic["V"], p.p_ectopic["F"] = u(*FUSION_PATIENT_V), u(*FUSION_PATIENT_F)
        p.templates["F"] = _fusions(rng, p.templates["N"][0], p.templates["V"][0])
    return p


def _fusions(rng: np.random.Generator, normal: Template, ventricular: Template) -> list[Template]:
    """FUSION_TEMPLATES fusion beats: the sinus beat's P wave whole (the atria are activated as
    usual), then a blend of its QRS and T with the ventricular beat's: a ventricular focus that
    fires as the sinus impulse arrives activates part of the ventricles."""
    shares = np.sort(rng.uniform(*FUSION_SINUS_SHARE, FUSION_TEMPLATES))
    p_wave = _without(normal, slice(1, None))
    ventricles = _without(normal, 0)
    return [
        p_wave.plus(ventricles.scaled(float(s))).plus(ventricular.scaled(1.0 - float(s)))
        for s in shares
    ]


def _afib_episodes(rng: np.random.Generator, duration_s: float) -> list[tuple[float, float]]:
    """One to three AFIB episodes covering 30-80 % of the record, each at least 15 s long."""
    count = int(rng.integers(1, 4)) if duration_s >= 180 else 1
    cover = rng.uniform(0.3, 0.8) * duration_s
    lengths = rng.dirichlet(np.ones(count)) * cover
    gaps = rng.dirichlet(np.ones(count + 1)) * (duration_s - cover)
    episodes, t = [], 0.0
    for gap, length in zip(gaps, lengths, strict=False):
        start = t + gap
        if length >= min(15.0, 0.25 * duration_s):
            episodes.append((float(start), float(start + length)))
        t = start + length
    return episodes


def _flutter_block(rng: np.random.Generator) -> tuple[float, float, float]:
    """Probabilities of 2:1, 3:1 and 4:1 AV conduction: one dominant ratio, and a variable
    share (10-60 %) split evenly over the other two."""
    dominant = rng.choice(3, p=[0.6, 0.1, 0.3])
    variable = rng.uniform(0.1, 0.6)
    block = np.full(3, variable / 2)
    block[dominant] = 1.0 - variable
    return (float(block[0]), float(block[1]), float(block[2]))


def _templates(rng: np.random.Generator, leads: int) -> dict[str, list[Template]]:
    u = rng.uniform
    w = u(0.85, 1.2)  # one patient's conduction: all QRS widths scale together
    r0 = u(0.6, 1.7)  # electrical axis and body habitus: R height in MLII

    def amp(mlii: float, v1_gain: float) -> list[float]:
        # V1 sees the same wave through a different projection: a per-patient gain around
        # the textbook one (small r, deep S, small P and T).
        return [mlii, mlii * v1_gain * u(0.7, 1.3)][:leads]

    pr = u(0.14, 0.2)
    qt = u(0.24, 0.3)
    p_amp, p_w = u(0.08, 0.2), u(0.02, 0.03)
    t_amp, t_w = u(0.15, 0.45), u(0.045, 0.07)
    normal = Template.of(
        [
            (-pr, p_w, amp(p_amp, 0.5), False, False),
            (-0.028 * w, 0.009 * w, amp(-u(0.03, 0.15), 0.0), False, False),
            (0.0, 0.010 * w, amp(r0, u(0.2, 0.45)), False, False),
            (0.028 * w, 0.010 * w, amp(-u(0.1, 0.3) * r0, 4.0), False, False),
            (qt, t_w, amp(t_amp, u(-0.4, 0.8)), True, False),
        ]
    )
    # Premature atrial beat: same conduction below the AV node, an abnormal (ectopic) P wave.
    p_sign = rng.choice([-1.0, 1.0])
    abnormal_p = Template.of(
        [(-pr + u(-0.02, 0.04), p_w * u(0.7, 1.3), amp(p_sign * u(0.05, 0.15), 0.8), False, False)]
    )
    atrial = _without(normal, 0).plus(abnormal_p)
    ventricular = [_wide_qrs(rng, leads, qt) for _ in range(int(rng.integers(1, 3)))]
    fusion_share = u(0.35, 0.65)
    fusion = normal.scaled(fusion_share).plus(ventricular[0].scaled(1.0 - fusion_share))
    spike_w = 0.0015
    spike = Template.of([(-u(0.05, 0.07), spike_w, amp(u(0.4, 1.2), u(0.3, 1.0)), False, True)])
    paced = _wide_qrs(rng, leads, qt).plus(spike)
    pace_fusion = normal.scaled(0.5).plus(paced.scaled(0.5))
    odd = _wide_qrs(rng, leads, qt, width=(0.015, 0.025)).plus(abnormal_p)
    # In AFIB the atria fibrillate: conducted beats keep their QRS and T but have no P wave.
    return {
        "N": [normal, _without(normal, 0)],
        "A": [atrial],
        "V": ventricular,
        "F": [fusion],
        "/": [paced],
        "f": [pace_fusion],
        "Q": [odd],
    }


def _without(tpl: Template, wave: int | slice) -> Template:
    keep = np.ones(len(tpl.offset), dtype=bool)
    keep[wave] = False
    return Template(
        tpl.offset[keep], tpl.width[keep], tpl.amp_KL[keep], tpl.qt[keep], tpl.spike[keep]
    )


def _wide_qrs(
    rng: np.random.Generator, leads: int, qt: float, width: tuple[float, float] = (0.028, 0.045)
) -> Template:
    """A ventricular-origin beat: no P, one wide dominant lobe, T of the opposite polarity."""
    u = rng.uniform
    s0 = 1.0 if u() < 0.6 else -1.0
    s1 = rng.choice([-1.0, 1.0])
    main = u(1.0, 2.0)
    side = rng.choice([-1.0, 1.0]) * u(0.04, 0.06)

    def amp(mlii: float, v1: float) -> list[float]:
        return [mlii, v1][:leads]

    return Template.of(
        [
            (0.0, u(*width), amp(s0 * main, s1 * main * u(0.5, 1.2)), False, False),
            (side, u(0.015, 0.025), amp(-s0 * main * u(0.15, 0.35), 0.0), False, False),
            (
                qt * u(1.05, 1.2),
                u(0.06, 0.09),
                amp(-s0 * u(0.25, 0.6), -s1 * u(0.2, 0.5)),
                True,
                False,
            ),
        ]
    )
