"""Run one heartlm command on this rank's own CPU cores (a torchrun entry point).

`python -m torch.distributed.run ... -m heartlm.scale.bind --cores 0,1/2,3 -- pretrain ...`
pins local rank r to the r-th core group before torch starts its thread pools, then runs
the heartlm command. torchrun starts every rank with the same arguments, so the per-rank
choice has to happen inside the rank.
"""

from __future__ import annotations

import os
import signal
import sys

from heartlm.lifeline import die_with_parent


def parse_groups(spec: str) -> list[set[int]]:
    """'0,1/2,3' -> [{0, 1}, {2, 3}]; an empty spec means no pinning."""
    return [{int(c) for c in group.split(",")} for group in spec.split("/") if group]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--cores" or argv[2] != "--":
        print("usage: python -m heartlm.scale.bind --cores SPEC -- COMMAND...", file=sys.stderr)
        return 2
    # A rank must not outlive torchrun, even one killed outright: nothing would reap it.
    die_with_parent(os.getppid(), signal.SIGKILL)
    groups = parse_groups(argv[1])
    if groups:
        rank = int(os.environ.get("LOCAL_RANK", "0"))
        os.sched_setaffinity(0, groups[rank % len(groups)])
    from heartlm.cli import main as heartlm_main

    return heartlm_main(argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
