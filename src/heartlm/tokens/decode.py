"""Tokens back to waveforms: codebook usage, reconstruction error and an original-vs-decoded PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from heartlm.outdir import atomic_write_text
from heartlm.shards import NUM_SPECIAL, UNK
from heartlm.store import BeatStore
from heartlm.tokens.codebook import Codebook
from heartlm.tokens.normalize import normalize_beats
from heartlm.tokens.tokenset import TokenSet

MAX_SCORED = 100_000  # beats scored for reconstruction error, evenly spread over the store
BEATS_PER_PLOT = 6


def reconstruct(
    morph: np.ndarray, book: Codebook, baseline: np.ndarray, amplitude: np.ndarray
) -> np.ndarray:
    """Waveforms (n, W) in mV from tokens: centroid × amplitude + baseline; UNK beats are NaN."""
    code = morph.astype(np.int64) - NUM_SPECIAL
    known = morph != UNK
    out = np.full((len(morph), book.window_samples), np.nan, dtype=np.float32)
    out[known] = book.centroids[code[known]] * amplitude[known, None] + baseline[known, None]
    return out


def usage(morph: np.ndarray, vocab: int) -> dict[str, Any]:
    """Perplexity and dead codes of the morphology stream (UNK left out)."""
    known = morph[morph != UNK].astype(np.int64) - NUM_SPECIAL
    counts = np.bincount(known, minlength=vocab)
    p = counts[counts > 0] / max(counts.sum(), 1)
    return {
        "codes": vocab,
        "used": int((counts > 0).sum()),
        "dead": int((counts == 0).sum()),
        "perplexity": float(np.exp(-(p * np.log(p)).sum())) if len(p) else 0.0,
        "unk": int((morph == UNK).sum()),
        "unk_fraction": float((morph == UNK).mean()) if len(morph) else 0.0,
    }


def reconstruction_error(
    store: BeatStore, tokens: TokenSet, book: Codebook, device: torch.device
) -> dict[str, Any]:
    """Per-beat normalised RMSE (‖x − x̂‖ / ‖x − mean x‖) and correlation, on up to
    MAX_SCORED usable beats; amplitude and baseline come from the original beats."""
    n = len(tokens)
    idx = np.unique(np.linspace(0, n - 1, min(n, MAX_SCORED)).astype(np.int64))
    x, baseline, amplitude = _originals(store, idx, book, device)
    morph = np.asarray(tokens.morph[idx])
    keep = morph != UNK
    x, x_hat = x[keep], reconstruct(morph[keep], book, baseline[keep], amplitude[keep])
    xc = x - x.mean(axis=1, keepdims=True)
    hc = x_hat - x_hat.mean(axis=1, keepdims=True)
    err = np.sqrt(((x - x_hat) ** 2).sum(axis=1))
    nrmse = err / np.maximum(np.sqrt((xc**2).sum(axis=1)), 1e-12)
    corr = (xc * hc).sum(axis=1) / np.maximum(
        np.sqrt((xc**2).sum(axis=1) * (hc**2).sum(axis=1)), 1e-12
    )
    rmse_mv = err / np.sqrt(x.shape[1])

    def summary(v: np.ndarray) -> dict[str, float]:
        if not len(v):
            return {"mean": float("nan"), "median": float("nan"), "p90": float("nan")}
        return {
            "mean": float(v.mean()),
            "median": float(np.median(v)),
            "p90": float(np.quantile(v, 0.9)),
        }

    return {
        "beats_scored": int(keep.sum()),
        "nrmse": summary(nrmse),
        "correlation": summary(corr),
        "rmse_mv": summary(rmse_mv),
    }


def _originals(
    store: BeatStore, idx: np.ndarray, book: Codebook, device: torch.device
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = torch.from_numpy(np.asarray(store.beats[idx], dtype=np.float32)).to(device)
    _, baseline, amplitude, _ = normalize_beats(x, book.normalization)
    return x.cpu().numpy(), baseline.cpu().numpy(), amplitude.cpu().numpy()


def plot(
    path: Path,
    store: BeatStore,
    tokens: TokenSet,
    book: Codebook,
    n_records: int,
    device: torch.device,
) -> list[str]:
    """PNG of the first beats of a few records (spread over the store): original vs decoded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = np.unique(np.linspace(0, len(tokens.records) - 1, n_records).astype(int))
    chosen = [r for r in chosen if tokens.records[r]["n_beats"] > 0]
    fig, axes = plt.subplots(len(chosen), 1, figsize=(10, 2.2 * len(chosen)), squeeze=False)
    for ax, r in zip(axes[:, 0], chosen, strict=True):
        span = tokens.record_slice(r)
        idx = np.arange(span.start, min(span.stop, span.start + BEATS_PER_PLOT))
        x, baseline, amplitude = _originals(store, idx, book, device)
        x_hat = reconstruct(np.asarray(tokens.morph[idx]), book, baseline, amplitude)
        t = np.arange(x.size) / store.fs
        ax.plot(t, x.reshape(-1), color="black", lw=1.0, label="original")
        ax.plot(t, x_hat.reshape(-1), color="tab:red", lw=1.0, alpha=0.8, label="decoded")
        for k in range(1, len(idx)):
            ax.axvline(k * x.shape[1] / store.fs, color="0.85", lw=0.5)
        rec = tokens.records[r]
        ax.set_title(f"{rec['db']}/{rec['name']}: first {len(idx)} beat windows", fontsize=9)
        ax.set_ylabel("mV")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("s (beat windows placed end to end)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [tokens.records[r]["name"] for r in chosen]


def write_decode(
    folder: Path, store: BeatStore, book: Codebook, n_records: int, device: torch.device
) -> dict[str, Any]:
    """Write folder/decode/{report.json, reconstruction.png} from the shards in `folder`."""
    tokens = TokenSet.load(folder)
    out = folder / "decode"
    out.mkdir(exist_ok=True)
    report = {
        "usage": usage(np.asarray(tokens.morph), book.vocab),
        "reconstruction": reconstruction_error(store, tokens, book, device),
    }
    report["plotted_records"] = plot(
        out / "reconstruction.png", store, tokens, book, n_records, device
    )
    atomic_write_text(out / "report.json", json.dumps(report, indent=1) + "\n")
    return report


def format_table(report: dict[str, Any]) -> str:
    u, r = report["usage"], report["reconstruction"]
    rows = [
        ("codes used / dead", f"{u['used']} / {u['dead']} of {u['codes']}"),
        ("perplexity", f"{u['perplexity']:.1f}"),
        ("UNK beats", f"{u['unk']} ({100 * u['unk_fraction']:.2f} %)"),
        ("beats scored", f"{r['beats_scored']}"),
        ("NRMSE mean / median / p90", _triple(r["nrmse"])),
        ("correlation mean / median / p90", _triple(r["correlation"])),
        ("RMSE mV mean / median / p90", _triple(r["rmse_mv"])),
    ]
    width = max(len(k) for k, _ in rows)
    return "".join(f"{k:<{width}}  {v}\n" for k, v in rows)


def _triple(s: dict[str, float]) -> str:
    return f"{s['mean']:.3f} / {s['median']:.3f} / {s['p90']:.3f}"
