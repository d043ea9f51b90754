"""Figures of an evaluation: the confusion matrix (beats) and the ROC curve (AFIB windows)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt
import numpy as np


def confusion_png(cm: np.ndarray, names: tuple[str, ...], path: Path, title: str) -> None:
    """Counts in each cell, coloured by the row-normalised fraction (per-class sensitivity)."""
    cm = np.asarray(cm)
    rows = cm.sum(axis=1, keepdims=True)
    frac = np.divide(cm, rows, out=np.zeros(cm.shape, dtype=float), where=rows > 0)
    fig, ax = plt.subplots(figsize=(4.8, 4.2), dpi=120)
    ax.imshow(frac, cmap="Blues", vmin=0.0, vmax=1.0)
    for i in range(cm.shape[0]):
        for j in range(cm.shape[1]):
            ax.text(
                j, i, str(cm[i, j]), ha="center", va="center",
                color="white" if frac[i, j] > 0.5 else "black", fontsize=9,
            )  # fmt: skip
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("reference")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def roc_png(labels: np.ndarray, scores: np.ndarray, path: Path, title: str) -> None:
    """ROC curve of a binary score; nothing is drawn but the diagonal when one class is absent."""
    labels = np.asarray(labels).astype(bool)
    order = np.argsort(-np.asarray(scores), kind="stable")
    hits = labels[order]
    n_pos, n_neg = hits.sum(), (~hits).sum()
    fig, ax = plt.subplots(figsize=(4.2, 4.2), dpi=120)
    ax.plot([0, 1], [0, 1], color="0.7", lw=1, ls="--")
    if n_pos and n_neg:
        tpr = np.concatenate([[0.0], np.cumsum(hits) / n_pos])
        fpr = np.concatenate([[0.0], np.cumsum(~hits) / n_neg])
        ax.plot(fpr, tpr, lw=1.5)
    ax.set_xlabel("1 - specificity")
    ax.set_ylabel("sensitivity")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
