"""Command-line flags shared by every command that trains (pretrain, finetune)."""

from __future__ import annotations

import argparse


def add_optimizer_arguments(
    g: argparse._ArgumentGroup, *, batch: int, warmup: int, weight_decay: float
) -> None:
    """--batch, --micro-batch, --lr, --warmup, --weight-decay with a command's own defaults."""
    g.add_argument("--batch", type=int, default=batch, help="global batch in windows")
    g.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="windows per device per forward (accumulate to --batch)",
    )
    g.add_argument("--lr", type=float, default=3e-4)
    g.add_argument("--warmup", type=int, default=warmup, help="linear warm-up steps")
    g.add_argument("--weight-decay", type=float, default=weight_decay)


def add_device_arguments(g: argparse._ArgumentGroup) -> None:
    """--device, --precision, --compile."""
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    g.add_argument(
        "--precision",
        default="bf16",
        choices=["bf16", "fp32"],
        help="bf16 autocast on CUDA (CPU always runs fp32)",
    )
    g.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile (default: on for CUDA, off for CPU)",
    )
