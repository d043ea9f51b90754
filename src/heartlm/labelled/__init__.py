"""Labelled windows, shared by finetune, evaluate and embed (which never import each other).

`windows` cuts W-beat windows with per-beat and per-window labels; `splits` decides which
records train and validate (MIT-BIH DS2 never does); `lineage` is what a run carries to
tokenize new records like its training data, and `tokens` does that to a WFDB folder;
`predict` runs a model over windows; `metrics` scores the predictions (Se, +P, F1 from
`heartlm.scores`).
"""
