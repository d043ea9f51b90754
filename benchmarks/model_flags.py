"""The model study's fixed settings: DS1's folds, the goals, the pretraining and fine-tuning
flags every recipe starts from, and the pretraining variants (model_configs re-exports them;
read them there, as `model_configs.NAME`)."""

from __future__ import annotations

from heartlm.ecg.labels import MITDB_DS1

# Two record-wise folds of DS1, balanced by hand for S (209/118/124 vs 201/207/220/223),
# V (208/203 vs 106/119/223/201) and AF (203 vs 201), so each fold trains on every class
# and on irregular rhythm. Rounds 1-6 used folds with both AF records on one side: 85 % of
# the S false positives of the model trained without them were N beats inside AF or
# flutter (tree on DS1: S F1 0.37 there, 0.54 with these folds; benchmarks/README.md).
FOLDS = (
    ("101", "108", "109", "112", "115", "118", "124", "203", "208", "209", "230"),
    ("106", "114", "116", "119", "122", "201", "205", "207", "215", "220", "223"),
)


assert sorted(FOLDS[0] + FOLDS[1]) == sorted(MITDB_DS1)


GOALS = {"accuracy": 0.95, "V_f1": 0.93, "S_f1": 0.70, "afib_f1": 0.90}


# fmt: off
PRETRAIN = ["--preset", "small", "--window", "256", "--stride", "32", "--batch", "256",
            "--steps", "2000", "--warmup", "200", "--lr", "6e-4", "--val-every", "500"]


BEATS = ["--window", "128", "--stride", "32", "--epochs", "20", "--batch", "64", "--lr", "3e-4",
         "--warmup", "100"]


AFIB = ["--window", "32", "--stride", "16", "--epochs", "5", "--batch", "64", "--lr", "3e-4",
        "--warmup", "100"]


# fmt: on
REL = ["--inputs", "relative", "--dropout", "0.1"]


RHYTHM = ["--inputs", "rhythm", "--dropout", "0.1"]


W32 = ["--window", "32", "--stride", "8"]


ALL = ["--val-fraction", "0"]
"""Train on every training record and export the last weights: DS1 has 22 records (AFIB:
3 real ones with AF), and the default holds a fifth of them out to choose the exported
checkpoint, which the LightGBM floor beside it never does."""


BEST = ["--val-every", "100", "--export", "best", "--patience", "5"]
"""Validate every 100 steps, export the lowest validation loss's weights, and stop 5
validations after it (`--patience`, from round 53): in 229 of the 230 best-exporting runs of
rounds 15-52 the export is the same step as the whole 2 000 steps give (the one other,
round 16's `features`, improved again at step 2 000), and the runs of rounds 46-52 stopped at
step 836 (`nextleads`) and 1 007 (`best`) on average: half a call's pretraining time."""


PRETRAIN_VARIANTS: dict[str, list[str]] = {
    "": [],
    "plr": ["--feature-embedding", "periodic"],
    "short": ["--steps", "500", "--warmup", "50", "--val-every", "100"],
    "best": BEST,
    "features": [*BEST, "--feature-target", "all", "--code-weight", "0", "--mask-span", "4"],
    "next": [*BEST, "--objective", "next"],
    "nextscale": [*BEST, "--objective", "next"],
    "nextleads": [*BEST, "--objective", "next"],
    "nextleadsmlp": [
        *BEST,
        "--objective",
        "next",
        "--beat-mlp",
        "1024",
        "--beat-mlp-depth",
        "2",
        "--beat-mlp-bins",
        "32",
        "--beat-mlp-inputs",
        "relative",
    ],
    "bestleads": BEST,
    "nextrel": [*BEST, "--objective", "next", "--inputs", "relative"],
    "nextrhythm": [*BEST, "--objective", "next", "--inputs", "rhythm"],
    "forecast": [*BEST, "--objective", "forecast", "--feature-target", "all"],
    "nextdrop": [*BEST, "--objective", "next", "--dropout", "0.1"],
    "bestdrop": [*BEST, "--dropout", "0.1"],
    "contrastive": [
        *BEST,
        "--objective",
        "contrastive",
        "--feature-target",
        "all",
        "--code-weight",
        "0",
    ],
}
"""Pretraining runs beside PRETRAIN, by variant (its flags after PRETRAIN's: the last of a
repeated flag counts). A configuration whose name has the word fine-tunes that variant's
run (from scratch: takes its architecture).

- `plr` (round 13, lost on the folds): each beat feature enters through learnt cosines and
  sines and a small layer of its own (PLR embeddings) instead of one linear map of the row.
- `short` (round 15): 500 steps instead of 2 000. PRETRAIN's 2 000 steps of 256 windows are
  about 66 passes over the 7 700 training windows, which overlap 8-fold (stride 32 in 256
  beats); round 13's three runs ended at training loss 0.92-0.95 against validation loss
  2.8-4.2 on their held-out records: the encoder may be fitted to its training patients.
- `best` (round 15, won on the folds): the same 2 000-step run, exporting the weights of its
  validation with the lowest loss (`--export best`; validation every 100 steps) instead of
  the last. In round 15 every seed's validation loss was lowest at step 400-500 and rose
  after it while the training loss kept falling.
- `features` and `next` (round 16), both exporting their best validation as `best` does.
  `features`: the masked beats' continuous description is the whole target (`--code-weight
  0`), every feature column of a replaced beat is hidden and reconstructed, RR and P wave
  included, and its rhythm token too (`--feature-target all`), in aligned runs of 4 beats
  (`--mask-span 4`: a lone hidden beat's RR could be read off its neighbours'); 41 % of the
  codes belong to
  a single DS1 record, so predicting a code partly means recognising the patient, and the
  shape-only target never asks for the timing and P wave that S beats and AF differ by.
  `next`: next-beat prediction with a causal encoder (the issue's other objective;
  fine-tuning reads it bidirectionally).
- `nextscale` (round 17): `next` on the pretraining corpus with SCALE's synthetic records
  added (PRETRAIN_CORPUS). In round 16 every `next` run fitted its training windows almost
  exactly (training loss 0.001 at step 2 000) while its validation loss was lowest at step
  300 and then rose from 2.3-3.4 to 6-8: 2 000 steps of 256 windows pass over the corpus
  about 66 times, and a causal model can learn each window's next beat by heart. The issue
  asks for pretraining on synthetic data at scale; SCALE makes the corpus about 5 times
  larger (about 1.9 M beats against 0.35 M), so the same steps pass over it about 12 times.
- `nextrel` and `nextrhythm` (round 19): `next` pretrained on the inputs that fine-tuning
  reads (`pretrain --inputs relative` / `rhythm`). Every recipe that won on the folds
  fine-tunes with `--inputs relative` (beats) or `rhythm` (AFIB), which read every code as
  MASK and hide the absolute shape columns; `next` and `best` were pretrained on the codes
  and every column, so fine-tuning handed them inputs they had never seen, and the next code
  could be copied from earlier ones in the window (the training loss reached 0.000 while
  the validation loss rose from step 300). Pretrained on the relative view, the encoder
  must predict the next code from the patient-relative description alone.
- `forecast` (round 22): `next`, and the next beat's every feature column regressed beside
  its code (`pretrain --objective forecast --feature-target all`): its RR intervals and P
  wave as well as its shape. `next` learnt which code comes next, never when it comes; S
  beats and AF differ from their neighbours in timing and P wave, and the objectives that
  paid at 1-10 % of labels in the literature are predictive ones (CPC, benchmarks/README.md).
  The forecast reads only what looks back (`heartlm.inputs.FORECAST_INPUTS`: the RR before
  each beat, its P segment and QRS region), so its encoder has not seen the `rr_` columns
  that fine-tuning with `--inputs relative` or `rhythm` reads; the folds decide whether what
  it learnt transfers. It won on the beat folds and scored as `next` does on DS2.
- `nextdrop` and `bestdrop` (round 23): `next` and `best` with the model's dropout at 0.1
  while pretraining (`pretrain --dropout`; it was 0, and every fine-tuning recipe here
  uses 0.1: REL, RHYTHM). In round 22 every objective overfitted this corpus: the
  validation loss was lowest at step 100-800 (`next` fitted its training windows almost
  exactly by step 2 000), so the encoder exported there had trained for a few hundred
  steps. 0.1 is the usual pretraining dropout of BERT-style encoders and the
  value fine-tuning already uses; it is not tuned here. Measured: `bestdrop`'s best
  validation moved to step 900-1300 (`best`: 400-600), `nextdrop`'s stayed at 300; neither
  paid beyond the re-run spread (benchmarks/README.md, round 23).
- `contrastive` (round 32): `forecast`'s inputs; instead of regressing the next beat's
  features, a learnt critic (a query from each position's state, a key from each beat's
  every feature column) learns to pick the real next beat out of the window's later beats
  (`pretrain --objective contrastive`, new: contrastive predictive coding with the window's
  other beats as negatives), and no code (`--code-weight 0`). A regression aims at the mean
  next beat, which in an irregular rhythm is no beat at all; the predictive objectives that
  paid at 1-10 % of the labels in the literature are contrastive (benchmarks/README.md).
- `nextleads` (round 35): `next` on the pretraining corpus with LEADS added: every lead of
  the real pretraining records that ingest leaves out (MIT-BIH's second lead, LUDB's other
  eleven), as records of their own (PRETRAIN_CORPUS). Rounds 16-23 found every objective
  overfitting tok_pre within a few hundred steps and concluded that more *real* unlabelled
  ECG is what is missing (round 17's synthetic patients delayed the overfitting and lost
  on the folds); these leads are the real ECG outside DS2 that `../shared` holds and the
  study had not used. Their patients are tok_pre's; until round 37 the record-wise validation
  split could hold out one lead of a patient whose other lead trained, so `--export best` may
  have chosen a later step than on tok_pre (since then `heartlm pretrain` and `finetune` hold
  out a recording with all its leads: `heartlm.ingest.leads.recorded_in`). Measured: its
  best validation came at step 400 (`next`: 300), and the folds chose it over `next`
  (benchmarks/README.md, round 35).
- `bestleads` (round 36): `best` (masked prediction, the AFIB recipes' encoder) on the same
  corpus: the other leads show the P wave and the atrial activity that AF is read from in
  other projections (V1 above all).
- `nextleadsmlp` (round 68): `nextleads`, and the per-beat network of the beat recipes from
  round 63 on (1,024 wide, two hidden layers, 32 bins: fine-tuning's `--beat-mlp` flags)
  pretrained beside it to name each unlabelled beat's own morphology code from the
  patient-relative columns of the beat and its neighbours (`pretrain --beat-mlp
  --beat-mlp-inputs relative`: what fine-tuning with `--inputs relative` shows it), while the
  transformer learns `next` on every input as in `nextleads`. The recipes read V from that
  network alone (`V=1`), which every earlier pretrained recipe started at random, so
  pretraining the transformer could not lift V; on the DS1 folds a CPU probe of the same
  objective lifted such a network's V F1 at 10 % of the labels beyond the seed spread
  (benchmarks/beat_mlp_pretraining_probe.py). In round 68 the validation loss counted the
  network's code loss, which chose step 100 for the export; from round 69 it does not
  (`pretrain`'s `val_beat_code_loss`)."""


SCALE = {
    "folder": "synth_scale",
    "records": 1000,
    "minutes": 20,
    "seed": 11,
    "flags": ["--leads", 1, "--flutter-fraction", 0.1, "--sick-sinus-fraction", 0.1],
}
"""The synthetic records that only the `nextscale` corpus adds: 1 000 patients of 20 min
(about 1.5 M beats, one lead; AF, paced, flutter and sick-sinus patients among them as
`heartlm synth` draws them). Tokenized with tok_pre's codebook, so the codes mean the same."""


LEADS = "leads"
"""Work folder of `lead_copies.py`'s single-lead records: every lead of the real pretraining
records (MIT-BIH DS1 and paced, NSTDB, LUDB) that `heartlm ingest` leaves out, so the
`nextleads` corpus holds about twice the real beats of tok_pre."""


PRETRAIN_CORPUS = {
    "nextscale": "tok_pre_scale",
    "nextleads": "tok_pre_leads",
    "nextleadsmlp": "tok_pre_leads",
    "bestleads": "tok_pre_leads",
}
"""Token folder each pretraining variant trains on (others: tok_pre)."""


SCRATCH_VARIANT = "best"
"""The pretraining run a from-scratch configuration takes its architecture from (its weights
are not used): one that the pretrained recipes make anyway."""


NEXT_RECIPE = [*REL, *W32, "--epochs", "60", *ALL]
"""Rounds 16-17's fold winner from the `next` encoder (DS2 at 100 %: S F1 0.76-0.78)."""


EMA = ["--ema", "0.999"]
"""Fine-tuning validates and exports an exponential moving average of its weights (round 20)."""


def has_suffix(name: str, suffix: str) -> bool:
    """Whether a configuration's name carries `suffix` ("_word"), wherever later suffixes
    (round 39's SMOOTH_SUFFIX, round 40's for beats) put it."""
    return suffix.removeprefix("_") in name.split("_")


VIEWS_SUFFIX = r"_views(?P<views>\d+)"
"""A beat recipe's name ends so when it is scored over that many windows (`evaluate --views`)"""
SHARE_SUFFIX = r"_share(?P<share>(?=[01NSVFQ])(?:[01](?:\.\d+)?)?(?:[NSVFQ][01](?:\.\d+)?)*)"
"""... then so when its per-beat network's logits are weighed by that share (`evaluate
--beat-mlp-share`, round 59: `_share0.75`), or by one share for every class and another for
some (round 60: `_share0.25V1`, for `--beat-mlp-share 0.25,V=1`)"""
OFFSET_SUFFIX = r"_offset(?P<cls>[NSVFQ])(?P<offset>[+-]\d+(?:\.\d+)?)"
"""... and then so with one class's offset (`evaluate --class-offset`, round 56): `_offsetV+1`"""
