"""WFDB files to token shards at scale: synth, ingest and tokenize timed stage by stage.

    python benchmarks/pipeline_bench.py --records 4500 --minutes 30 --workers 16 --out OUT

Writes a synthetic corpus (not part of the WFDB -> tokens time), ingests it with
`--workers` processes, tokenizes it (k-means codebook on a fixed sample, assignment on
the GPU when there is one), and reports beats/s per stage and the WFDB -> shards time,
with the linear extrapolation to 50 M beats (every stage streams records, so time is
linear in beats; the extrapolation is labelled as such).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from heartlm.runinfo import versions


def heartlm(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "heartlm", *args], check=True)
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=4500)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--fs", type=float, default=360)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--device", default="auto")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--work", type=Path, default=Path("/tmp/pipeline_bench"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    wfdb_dir, store, tokens = args.work / "wfdb", args.work / "store", args.work / "tokens"
    w = str(args.workers)
    corpus = ["--records", str(args.records), "--minutes", str(args.minutes), "--fs", str(args.fs)]
    t_synth = heartlm("synth", str(wfdb_dir), *corpus, "--leads", "1", "--workers", w)
    t_ingest = heartlm("ingest", str(wfdb_dir), "--out", str(store), "--workers", w)
    t_tok = heartlm("tokenize", str(store), "--out", str(tokens), "--device", args.device,
                    "--vocab", str(args.vocab))  # fmt: skip
    beats = json.loads((store / "run.json").read_text())["counts"]["beats"]
    tok_info = json.loads((tokens / "run.json").read_text())
    total = t_ingest + t_tok
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "gpu": _gpu(),
        "versions": versions(),
        "beats": beats,
        "records": args.records,
        "seconds": {"synth": t_synth, "ingest": t_ingest, "tokenize": t_tok},
        "tokenize_timings": tok_info.get("timings_s"),
        "beats_per_s": {
            "synth": beats / t_synth,
            "ingest": beats / t_ingest,
            "tokenize": beats / t_tok,
            "wfdb_to_shards": beats / total,
        },
        "wfdb_to_shards_s": total,
        "extrapolated_50M_beats_min": 50e6 / (beats / total) / 60,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pipeline.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def _gpu() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
