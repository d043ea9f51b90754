"""The validation F1 that selects the exported fine-tuned weights (`--select f1`).

A trainer callback: at each validation it scores the model on the validation records the
way `heartlm evaluate` does and adds `val_f1`, which the engine's `keep_best` selects by.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.labelled.metrics import binary_scores, macro_f1
from heartlm.labelled.predict import afib_scores, beat_predictions
from heartlm.labelled.windows import callable_windows, cut_windows, streams_of
from heartlm.train.callbacks import Callback

MIN_VAL_SUPPORT = 10
BATCH = 64


class ValidationF1(Callback):
    """beats: the macro F1 over the classes with at least MIN_VAL_SUPPORT labelled
    validation beats (each beat scored once, from the window whose centre is nearest);
    afib: the F1 of non-overlapping windows at probability 0.5, as `evaluate` scores them
    (a record under AFIB_MIN_BEATS beats gets no call)."""

    def __init__(self, val_d: Any, task: str, window: int, device: torch.device) -> None:
        self.task, self.device, self.window = task, device, window
        streams, records = streams_of(val_d), range(len(val_d.records))
        stride = max(1, window // 2) if task == "beats" else window
        self.windows = cut_windows(streams, records, window, stride, task)
        self.reference = np.asarray(val_d.aami).astype(np.int64)
        support = np.bincount(self.reference[self.reference >= 0], minlength=len(AAMI_CLASSES))
        self.classes = np.flatnonzero(support >= MIN_VAL_SUPPORT)

    def on_validation(self, model: nn.Module) -> dict[str, float]:
        if self.task == "beats":
            beat, pred = beat_predictions(model, self.windows, BATCH, self.device)
            ref = self.reference[beat]
            keep = ref >= 0
            return {"val_f1": macro_f1(ref[keep], pred[keep], self.classes)}
        beats = (~self.windows.pad).sum(axis=1)
        labelled = (self.windows.window_label >= 0) & callable_windows(beats, self.window)
        scores = afib_scores(model, self.windows, BATCH, self.device)[labelled]
        return {"val_f1": binary_scores(self.windows.window_label[labelled], scores)["f1"]}
