"""Beat times and beat symbols: sinus rhythm with heart-rate variability, ectopy, AFIB, atrial
flutter, pacing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heartlm.synth.patient import Patient

MIN_RR_S = 0.28
AFIB_VARIANT = 1  # templates["N"][1]: a conducted beat without a P wave
FLUTTER_RATIOS = np.array([2, 3, 4])  # atrial cycles per conducted beat (AV block 2:1 to 4:1)
NO_P_WAVE = ("(AFIB", "(AFL")  # rhythms whose conducted beats use AFIB_VARIANT
BIGEMINY_EPISODE = "bigeminy"  # the episode kind; its rhythm annotation is bigeminy_aux's


@dataclass
class Beats:
    """Nominal beat times of one record, before they are snapped to drawn peaks."""

    time: np.ndarray  # (B,) seconds
    symbol: np.ndarray  # (B,) MIT-BIH beat symbols ('<U1')
    variant: np.ndarray  # (B,) which template of the symbol
    episodes: list[tuple[float, str]]  # (first beat time, aux_note such as '(AFIB')


def draw_beats(rng: np.random.Generator, p: Patient, duration_s: float) -> Beats:
    """Lay out one record's beats rhythm episode by rhythm episode."""
    if p.paced:
        segments = [("(P", 0.0, duration_s)]
    elif p.sick_sinus:
        segments = [("(SBR", 0.0, duration_s)]
    else:
        segments, t = [], 0.0
        episodes = [(s, e, "(AFIB") for s, e in p.afib] + [(s, e, "(AFL") for s, e in p.flutter]
        episodes += [(s, e, BIGEMINY_EPISODE) for s, e in p.bigeminy]
        for start, end, aux in sorted(episodes):
            if start > t:
                segments.append(("(N", t, start))
            segments.append((aux, start, end))
            t = end
        if t < duration_s:
            segments.append(("(N", t, duration_s))
    times, symbols, auxes = [], [], []
    last = -rng.uniform(0.2, 0.8)  # the last beat before the record starts
    for aux, start, end in segments:
        draw = {
            "(N": _sinus,
            "(AFIB": _afib,
            "(AFL": _flutter,
            "(P": _paced,
            "(SBR": _sick_sinus,
            BIGEMINY_EPISODE: _bigeminy,
        }[aux]
        t, s = draw(rng, p, max(start, last), end)
        t, s = t[t < end], s[t < end]
        if len(t) == 0:
            continue
        times.append(t)
        symbols.append(s)
        auxes.append(bigeminy_aux(p) if aux == BIGEMINY_EPISODE else aux)
        last = float(t[-1])
    time = np.concatenate(times) if times else np.zeros(0)
    symbol = np.concatenate(symbols) if symbols else np.zeros(0, "<U1")
    segment = np.repeat(np.arange(len(times)), [len(t) for t in times]).astype(int)
    variant = rng.integers(0, len(p.templates["V"]), len(time))
    variant[symbol != "V"] = 0
    if p.fusion:  # drawn only for such a patient: every other record stays the same
        fused = np.flatnonzero(symbol == "F")
        variant[fused] = rng.integers(0, len(p.templates["F"]), len(fused))
    no_p_wave = np.isin(segment, [k for k, aux in enumerate(auxes) if aux in NO_P_WAVE])
    variant[no_p_wave & (symbol == "N")] = AFIB_VARIANT
    keep = (time > 0.15) & (time < duration_s - 0.15)
    time, symbol, variant, segment = time[keep], symbol[keep], variant[keep], segment[keep]
    starts = np.flatnonzero(np.diff(segment, prepend=-1) != 0)
    episodes = [(float(time[i]), auxes[segment[i]]) for i in starts]
    episodes = [e for k, e in enumerate(episodes) if k == 0 or e[1] != episodes[k - 1][1]]
    return Beats(time, symbol, variant, episodes)


def _sinus(
    rng: np.random.Generator, p: Patient, last: float, end: float
) -> tuple[np.ndarray, np.ndarray]:
    """Sinus node firing times from an integrated, slowly modulated heart rate, then ectopy."""
    step = 0.25
    grid = np.arange(last, end + 3.0, step)
    rel = grid - last
    phase0 = rng.uniform(0, 2 * np.pi, 4)
    slow_hz = rng.uniform(0.003, 0.02, 2)
    rr_scale = (
        1.0
        + p.rsa * np.sin(2 * np.pi * p.resp_hz * grid + phase0[0])
        + p.mayer * np.sin(2 * np.pi * rng.uniform(0.08, 0.12) * grid + phase0[1])
        + p.drift * np.sin(2 * np.pi * slow_hz[0] * grid + phase0[2]) * 0.6
        + p.drift * np.sin(2 * np.pi * slow_hz[1] * grid + phase0[3]) * 0.4
    )
    rate_hz = p.hr_bpm / 60.0 / np.maximum(rr_scale, 0.3)
    cycles = np.concatenate([[0.0], np.cumsum(0.5 * (rate_hz[1:] + rate_hz[:-1]) * step)])
    t = np.interp(np.arange(1.0, cycles[-1]), cycles, rel) + last
    t = np.sort(t + rng.normal(0.0, 0.004, len(t)))  # beat-to-beat jitter on top of the rate

    n = len(t)
    draw = rng.uniform(size=n)
    symbol = np.full(n, "N", "<U1")
    edges = np.cumsum([p.p_ectopic["V"], p.p_ectopic["A"], p.p_ectopic["F"], p.p_ectopic["Q"]])
    for name, lo, hi in zip("VAFQ", np.r_[0, edges[:-1]], edges, strict=True):
        symbol[(draw >= lo) & (draw < hi)] = name
    # An ectopic beat needs a sinus beat before it to time itself against.
    ectopic = symbol != "N"
    ectopic[0] = False
    ectopic[1:] &= ~ectopic[:-1]
    symbol[~ectopic] = "N"
    if n < 2:
        return t, symbol

    rr = np.diff(t, prepend=t[0] - 60.0 / p.hr_bpm)
    new_t = t.copy()
    shift = np.zeros(n)
    v = np.flatnonzero(symbol == "V")
    # A PVC fires early and the next sinus beat is not conducted, but the sinus node keeps its
    # rhythm: the beat after the PVC comes on schedule (full compensatory pause).
    new_t[v] = t[v - 1] + rng.uniform(0.55, 0.75, len(v)) * rr[v]
    a = np.flatnonzero(symbol == "A")
    # A PAC resets the sinus node: the following beats start again one RR after it.
    new_t[a] = t[a - 1] + rng.uniform(0.6, 0.8, len(a)) * rr[a]
    a_next = a[a + 1 < n]
    shift[a_next + 1] = (
        new_t[a_next] + rr[a_next] * rng.uniform(1.0, 1.1, len(a_next)) - t[a_next + 1]
    )
    f = np.flatnonzero(symbol == "F")
    new_t[f] = t[f] - rng.uniform(0.0, 0.04, len(f))
    new_t += np.cumsum(shift)
    return new_t, symbol


def _sick_sinus(
    rng: np.random.Generator, p: Patient, last: float, end: float
) -> tuple[np.ndarray, np.ndarray]:
    """A slow sinus node with long pauses, interrupted by atrial ectopic beats that often come
    in runs: each ectopic beat fires a share of a sinus cycle (the patient's
    `sick_sinus_coupling`, 60-80 % unless asked) after the beat before it."""
    sinus_rr = 60.0 / p.hr_bpm
    shortest = min(0.6, p.sick_sinus_coupling[0]) * sinus_rr  # beats enough to reach `end`
    n = int((end - last) / shortest) + 2
    ectopic = rng.uniform(size=n) < p.p_ectopic["A"]
    pause = rng.uniform(size=n) < p.pause_prob
    rr = sinus_rr * np.where(
        ectopic,
        rng.uniform(*p.sick_sinus_coupling, n),
        np.where(pause, rng.uniform(2.0, 4.5, n), rng.uniform(0.95, 1.05, n)),
    )
    t = last + np.cumsum(np.maximum(rr, MIN_RR_S))
    return t, np.where(ectopic, "A", "N").astype("<U1")


def bigeminy_aux(p: Patient) -> str:
    """The rhythm annotation of a bigeminy episode, as MIT-BIH writes it: `(B` ventricular
    bigeminy, `(T` ventricular trigeminy; atrial bigeminy has no rhythm code of its own
    there (a sinus rhythm with premature atrial beats), so `(N`."""
    if p.bigeminy_symbol != "V":
        return "(N"
    return "(B" if p.bigeminy_every == 2 else "(T"


def _bigeminy(
    rng: np.random.Generator, p: Patient, last: float, end: float
) -> tuple[np.ndarray, np.ndarray]:
    """Every `bigeminy_every`-th beat premature, at the patient's coupling (jittered by 0.02 of
    a sinus RR). A ventricular one leaves the sinus node on schedule: the sinus beat it hides
    is not conducted, and the next comes one sinus RR after that (full compensatory pause).
    An atrial one resets the sinus node, which fires again 1.0-1.1 sinus RR after it."""
    sinus_rr = 60.0 / p.hr_bpm
    cycles = int((end - last) / (sinus_rr * (p.bigeminy_every - 1 + p.bigeminy_coupling))) + 2
    times, symbols, t = [], [], last
    for _ in range(cycles):
        for _ in range(p.bigeminy_every - 1):
            t += sinus_rr * rng.normal(1.0, 0.02)
            times.append(t)
            symbols.append("N")
        rr = sinus_rr * rng.normal(1.0, 0.02)
        early = t + max(rr * (p.bigeminy_coupling + rng.normal(0.0, 0.02)), MIN_RR_S)
        times.append(early)
        symbols.append(p.bigeminy_symbol)
        if p.bigeminy_symbol == "V":
            t += rr  # the hidden sinus beat's time: the next one comes a sinus RR later
        else:  # the node restarts at the premature beat: the next one comes 1.0-1.1 RR later
            t = early + sinus_rr * (rng.uniform(1.0, 1.1) - 1.0)
    return np.array(times), np.array(symbols, dtype="<U1")


def _afib(
    rng: np.random.Generator, p: Patient, last: float, end: float
) -> tuple[np.ndarray, np.ndarray]:
    """Irregularly irregular ventricular response: independent RR intervals, no P waves."""
    sigma = np.sqrt(np.log1p(p.afib_cv**2))
    n = int((end - last) / (p.afib_rr * 0.8)) + 2
    rr = p.afib_rr * rng.lognormal(-0.5 * sigma**2, sigma, n)
    t = last + np.cumsum(np.maximum(rr, MIN_RR_S))
    v_share = p.p_ectopic["V"] * 0.5 if p.afib_v is None else p.afib_v
    symbol = np.where(rng.uniform(size=n) < v_share, "V", "N").astype("<U1")
    return t, symbol


def _flutter(
    rng: np.random.Generator, p: Patient, last: float, end: float
) -> tuple[np.ndarray, np.ndarray]:
    """Atrial flutter: the AV node conducts every 2nd, 3rd or 4th flutter wave, so each RR is a
    whole number of atrial cycles, the ratio drawn beat by beat from the patient's block."""
    n = int((end - last) / (FLUTTER_RATIOS[0] * p.flutter_cycle_s)) + 2
    ratio = rng.choice(FLUTTER_RATIOS, size=n, p=p.flutter_block)
    rr = ratio * p.flutter_cycle_s + rng.normal(0.0, 0.004, n)
    t = last + np.cumsum(np.maximum(rr, MIN_RR_S))
    symbol = np.where(rng.uniform(size=n) < p.p_ectopic["V"] * 0.5, "V", "N").astype("<U1")
    return t, symbol


def _paced(
    rng: np.random.Generator, p: Patient, last: float, end: float
) -> tuple[np.ndarray, np.ndarray]:
    """A fixed-rate ventricular pacemaker with occasional fusion, intrinsic and ectopic beats."""
    n = int((end - last) / p.pacer_rr) + 2
    t = last + p.pacer_rr * np.arange(1, n + 1) + rng.normal(0.0, 0.002, n)
    draw = rng.uniform(size=n)
    symbol = np.full(n, "/", "<U1")
    symbol[draw < p.p_ectopic["f"]] = "f"
    symbol[draw > 1.0 - 0.02] = "N"
    v = (draw > 0.5) & (draw < 0.5 + p.p_ectopic["V"] * 0.3)
    symbol[v] = "V"
    t[v] -= 0.3 * p.pacer_rr  # an early PVC; the pacer's next beat stays on its schedule
    return t, symbol
