"""Text templates for the sbatch scripts and the Apptainer definition (`@NAME@` placeholders)."""

from __future__ import annotations

import re

_HEADER = """\
#!/bin/bash
# Written by `heartlm slurm`; edit freely. Submit with: sbatch @SCRIPT@
#SBATCH --job-name=@JOB_NAME@
#SBATCH --nodes=@NODES@
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=@GPUS@
#SBATCH --cpus-per-task=@CPUS@
#SBATCH --time=@TIME@
#SBATCH --output=%x-%j.out
#SBATCH --signal=B:USR1@@GRACE@
#SBATCH --requeue
@SBATCH_EXTRA@
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"

# One srun task per node runs torchrun, which starts one worker per GPU; the task's
# cores are bound to it and shared by its workers.
cores=${SLURM_CPUS_PER_TASK:-@CPUS@}
export OMP_NUM_THREADS=$(( cores / @GPUS@ > 0 ? cores / @GPUS@ : 1 ))

# NCCL. NVLink SHARP (NVLS) uses NVLink multicast objects; on shared or virtualised
# hosts (and where the fabric manager does not allow it) it can fail or wedge the GPUs,
# so it stays off; the cost is some all-reduce bandwidth on NVSwitch machines.
export NCCL_NVLS_ENABLE=0
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
# A restarted group (--max-restarts) must not reuse the rendezvous store of the dead one,
# or it may read stale addresses and fail to connect (pytorch/pytorch#135712).
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# Time for the workers to write their checkpoint once told to stop (torchrun's grace).
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=@SHUTDOWN@
export PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1
# torchrun's own records (a failed worker's error file, per attempt) go beside the job's
# output, not into a torchelastic_* folder left in each node's temporary directory.
export PET_LOG_DIR="${PET_LOG_DIR:-$PWD/torchrun-logs}"
# Site-specific, for InfiniBand between nodes (ask your admins, check `ibstat`):
# export NCCL_IB_HCA=mlx5              # which HCAs NCCL may use
# export NCCL_IB_GID_INDEX=3           # RoCE clusters usually need this
# export NCCL_SOCKET_IFNAME=ib0        # interface for bootstrap / TCP fallback
# export NCCL_IB_DISABLE=1             # no InfiniBand: use TCP sockets

# The time limit: SLURM sends USR1 to this script @GRACE@ s before it (--signal above). The
# workers then get SIGTERM (srun -> torchrun -> workers), write a checkpoint at the next
# step boundary and exit with code 75; the job is requeued and continues there (--resume).
# A USR1 between `srun ... &` and `step=$!` finds no step yet: it is acted on once there is.
requeue() {
    if [ -z "${step:-}" ]; then
        requeue_pending=1
        return
    fi
    echo "heartlm: time limit near: checkpointing, then requeueing job $SLURM_JOB_ID" >&2
    kill -TERM "$step" 2>/dev/null || true
    wait "$step" || true
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
}
unset step requeue_pending  # sbatch exports the submitting shell's variables
trap requeue USR1
"""

SINGLE_NODE = (
    _HEADER
    + """
# One node, @GPUS@ GPUs: a local rendezvous, no head node needed.
srun --cpu-bind=cores @CONTAINER@torchrun \\
    --standalone \\
    --nnodes=1 \\
    --nproc-per-node=@GPUS@ \\
    --max-restarts=@MAX_RESTARTS@ \\
    -m heartlm @HEARTLM_ARGS@ &
step=$!
[ -z "${requeue_pending:-}" ] || requeue
wait "$step"
"""
)

MULTI_NODE = (
    _HEADER
    + """
# @NODES@ nodes x @GPUS@ GPUs: the first node of the allocation hosts the c10d rendezvous.
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
head=${nodes%%$'\n'*}
export HEARTLM_RDZV_ENDPOINT="${head}:@PORT@"

srun --cpu-bind=cores @CONTAINER@torchrun \\
    --nnodes="$SLURM_NNODES" \\
    --nproc-per-node=@GPUS@ \\
    --rdzv-backend=c10d \\
    --rdzv-endpoint="$HEARTLM_RDZV_ENDPOINT" \\
    --rdzv-id="$SLURM_JOB_ID" \\
    --rdzv-conf=join_timeout=@RDZV_TIMEOUT@ \\
    --max-restarts=@MAX_RESTARTS@ \\
    -m heartlm @HEARTLM_ARGS@ &
step=$!
[ -z "${requeue_pending:-}" ] || requeue
wait "$step"
"""
)

APPTAINER_DEF = """\
# Written by `heartlm slurm`. Build with:  apptainer build @IMAGE@ heartlm.def
# (run it where @SOURCE@ exists: the heartlm sources are copied into the image).
Bootstrap: docker
From: @BASE_IMAGE@

%files
    @SOURCE@/pyproject.toml /opt/heartlm-src/pyproject.toml
    @SOURCE@/README.md /opt/heartlm-src/README.md
    @SOURCE@/src /opt/heartlm-src/src

%post
    # The base image already holds a CUDA build of torch; pip keeps it.
    python -m pip install --no-cache-dir /opt/heartlm-src
    rm -rf /opt/heartlm-src

%environment
    export NCCL_NVLS_ENABLE=0

%runscript
    exec heartlm "$@"

%test
    heartlm --version
    python -c "import torch, torch.distributed.run; print('torch', torch.__version__)"

%labels
    org.opencontainers.image.title heartlm
"""


def render(template: str, **values: object) -> str:
    """Fill `@NAME@` placeholders; every placeholder must get a value."""
    text = template
    for name, value in values.items():
        text = text.replace(f"@{name.upper()}@", str(value))
    left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if left:
        raise ValueError(f"template placeholders without a value: {', '.join(left)}")
    return text
