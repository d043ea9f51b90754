"""The beat-morphology codebook: batched torch k-means, nearest-centroid assignment, save/load.

The codebook file also carries the beat feature space (`heartlm.tokens.features`): principal
components and standardisation learnt with the centroids, so one codebook means one
vocabulary *and* one set of feature columns.

Why not scikit-learn: it is not a dependency and runs on the CPU only, while assigning
50 M beats in minutes needs the GPU. The k-means here is a few matrix products
(`||x||² − 2 x·c + ||c||²`), so the same code runs on CPU and GPU.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from heartlm.errors import HeartlmError
from heartlm.log import progress
from heartlm.outdir import atomic_write_text
from heartlm.runinfo import json_field, parse_json_file
from heartlm.tensorfile import save_tensors
from heartlm.tokens.features import FeatureSpace
from heartlm.tokens.normalize import Normalization

FORMAT = "heartlm.codebook"
VERSION = 4
SEEDING_PER_CODE = 16  # k-means++ seeds from 16·K sample beats: cost O(K²·W), not O(K·n·W)


@dataclass
class Codebook:
    centroids: np.ndarray  # (K, W) float32, in normalised units
    fs: float
    pre_samples: int
    window_samples: int
    normalization: Normalization
    seed: int
    trained_on: dict[str, Any]
    space: FeatureSpace

    @property
    def vocab(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def content_hash(self) -> str:
        h = hashlib.sha256(np.ascontiguousarray(self.centroids, dtype="<f4").tobytes())
        for name, array in sorted(self.space.tensors().items()):
            h.update(name.encode() + np.ascontiguousarray(array, dtype="<f4").tobytes())
        h.update(json.dumps(self.normalization.to_dict(), sort_keys=True).encode())
        h.update(f"{self.fs}:{self.pre_samples}:{self.window_samples}".encode())
        return h.hexdigest()[:16]

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        arrays = {"centroids": np.ascontiguousarray(self.centroids, np.float32)}
        arrays.update(self.space.tensors())
        save_tensors(
            {name: torch.from_numpy(array) for name, array in arrays.items()},
            folder / "codebook.safetensors",
            metadata={"format": FORMAT, "version": str(VERSION), "hash": self.content_hash},
        )
        info = {
            "format": FORMAT,
            "version": VERSION,
            "vocab": self.vocab,
            "fs": self.fs,
            "pre_samples": self.pre_samples,
            "window_samples": self.window_samples,
            "normalization": self.normalization.to_dict(),
            "seed": self.seed,
            "trained_on": self.trained_on,
            "hash": self.content_hash,
        }
        atomic_write_text(folder / "codebook.json", json.dumps(info, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Codebook:
        """Load from a token folder, its `codebook.json` or its `codebook.safetensors`."""
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        meta_path, tensor_path = folder / "codebook.json", folder / "codebook.safetensors"
        for p in (meta_path, tensor_path):
            if not p.is_file():
                raise HeartlmError("codebook file is missing", p)
        try:
            meta = parse_json_file(meta_path)
            foreign = meta.get("format") != FORMAT
            if foreign or json_field(meta, "version", int, meta_path) != VERSION:
                raise HeartlmError(
                    f"codebook {meta.get('format')} v{meta.get('version')}, this heartlm reads"
                    f" {FORMAT} v{VERSION}: learn a new codebook with heartlm tokenize",
                    meta_path,
                )
            tensors = {k: v.numpy() for k, v in load_file(str(tensor_path)).items()}
            centroids = tensors["centroids"]
            book = cls(
                centroids=centroids,
                fs=float(meta["fs"]),
                pre_samples=int(meta["pre_samples"]),
                window_samples=int(meta["window_samples"]),
                normalization=Normalization(**meta["normalization"]),
                seed=int(meta["seed"]),
                trained_on=dict(meta.get("trained_on", {})),
                space=FeatureSpace.from_tensors(tensors),
            )
        except (KeyError, TypeError, ValueError, OSError, SafetensorError) as exc:
            raise HeartlmError(f"not a readable heartlm codebook ({exc})", folder) from None
        if centroids.ndim != 2 or centroids.shape[1] != book.window_samples:
            raise HeartlmError(f"centroids of shape {tuple(centroids.shape)}", tensor_path)
        if meta.get("hash") != book.content_hash:
            raise HeartlmError("centroids do not match the hash in codebook.json", tensor_path)
        return book

    def check_compatible(
        self, fs: float, pre_samples: int, window_samples: int, where: Any
    ) -> None:
        """Refuse a store whose beat windows differ from the ones this codebook was learnt on."""
        if abs(self.fs - fs) > 1e-6 or self.window_samples != window_samples:
            raise HeartlmError(
                f"codebook is for {self.window_samples}-sample windows at {self.fs:g} Hz,"
                f" the store has {window_samples} samples at {fs:g} Hz",
                where,
            )
        if self.pre_samples != pre_samples:
            raise HeartlmError(
                f"codebook windows start {self.pre_samples} samples before the R peak,"
                f" the store's {pre_samples}",
                where,
            )


def nearest(
    x_BW: torch.Tensor, c_KW: torch.Tensor, c_sq_K: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the nearest centroid and the squared distance to it, for each row."""
    d_BK = c_sq_K[None, :] - 2.0 * (x_BW @ c_KW.T)
    best_B, code_B = d_BK.min(dim=1)
    dist_B = (best_B + (x_BW * x_BW).sum(dim=1)).clamp_min(0.0)
    return code_B, dist_B


def assign(
    x_NW: torch.Tensor, c_KW: torch.Tensor, batch: int = 65536
) -> tuple[torch.Tensor, torch.Tensor]:
    """`nearest` in batches, so the (B, K) distance matrix stays within 2**26 floats."""
    batch = max(1, min(batch, 2**26 // len(c_KW)))
    c_sq_K = (c_KW * c_KW).sum(dim=1)
    parts = [nearest(x_NW[i : i + batch], c_KW, c_sq_K) for i in range(0, len(x_NW), batch)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def kmeans_pp(x_NW: torch.Tensor, k: int, rng: np.random.Generator) -> torch.Tensor:
    """k-means++ seeding on a subset of 16·K rows; random draws come from `rng` (host)."""
    n = len(x_NW)
    subset = np.sort(rng.choice(n, size=min(n, SEEDING_PER_CODE * k), replace=False))
    xs_NW = x_NW[torch.from_numpy(subset).to(x_NW.device)]
    u = torch.from_numpy(rng.random(k)).to(xs_NW.device, torch.float64)
    c_KW = torch.empty((k, x_NW.shape[1]), dtype=x_NW.dtype, device=x_NW.device)
    first = int(rng.integers(len(xs_NW)))
    c_KW[0] = xs_NW[first]
    d2_N = ((xs_NW - c_KW[0]) ** 2).sum(dim=1).double()
    for j in range(1, k):
        # Draw ∝ D² by inverse CDF on the device: no host sync per centroid. The CDF sums
        # integers (D² in steps of 2^-40 of its largest value): CUDA's floating-point cumsum
        # may add in another order on another run, integer sums cannot differ.
        top = d2_N.max()
        q_N = torch.where(top > 0, d2_N / top * 2.0**40, 0.0).floor().long()
        cdf_N = torch.cumsum(q_N, dim=0)
        target = (u[j] * cdf_N[-1].double()).floor().long().reshape(1)
        pick = torch.searchsorted(cdf_N, target, right=True).clamp_max(len(xs_NW) - 1)
        c_KW[j] = xs_NW[pick[0]]
        d2_N = torch.minimum(d2_N, ((xs_NW - c_KW[j]) ** 2).sum(dim=1))
    return c_KW


def cluster_sums(x_NW: torch.Tensor, code_N: torch.Tensor, k: int) -> torch.Tensor:
    """(K, W) sum of the rows of each cluster, the same bits on every run: CUDA's plain
    `index_add_` adds in whatever order its atomics land, so the same seed could give another
    codebook on another run. Its deterministic version (sorted, then summed) is switched on
    for this one call. The switch is process-wide: `heartlm tokenize` trains the codebook
    before it starts any thread."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return torch.zeros((k, x_NW.shape[1]), dtype=x_NW.dtype, device=x_NW.device).index_add_(
            0, code_N, x_NW
        )
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def train_kmeans(
    x_NW: torch.Tensor, k: int, iters: int, seed: int, batch: int = 65536
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Lloyd iterations from k-means++ seeds; empty clusters are re-seeded with the
    worst-fitted beats. Returns centroids (K, W) and a summary of the fit."""
    if k > len(x_NW):
        raise ValueError(f"k = {k} is larger than the {len(x_NW)} training rows")
    rng = np.random.default_rng(seed)
    c_KW = kmeans_pp(x_NW, k, rng)
    previous = None
    reseeded = 0
    inertia = float("nan")
    iteration = 0
    steps = progress(range(1, iters + 1), total=iters, desc="k-means", unit="iter")
    for iteration in steps:  # noqa: B007 (reported after the loop)
        code_N, dist_N = assign(x_NW, c_KW, batch)
        inertia = float(dist_N.mean())
        counts_K = torch.bincount(code_N, minlength=k)
        sums_KW = cluster_sums(x_NW, code_N, k)
        nonempty_K = counts_K > 0
        c_KW = torch.where(
            nonempty_K[:, None], sums_KW / counts_K.clamp_min(1)[:, None].to(c_KW.dtype), c_KW
        )
        empty = torch.nonzero(~nonempty_K).flatten()
        if len(empty):
            worst = torch.topk(dist_N, len(empty)).indices
            c_KW[empty] = x_NW[worst]
            reseeded += len(empty)
        elif previous is not None and torch.equal(code_N, previous):
            break
        previous = code_N
    return c_KW, {"iterations": iteration, "mean_sq_dist": inertia, "reseeded": reseeded}
