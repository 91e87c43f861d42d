"""Multi-process training with torchrun: PyTorch's DistributedDataParallel, nothing home-made.

    torchrun --nproc_per_node=2 -m seq2seq train CONFIG          # one machine, 2 processes
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 -m seq2seq train CONFIG

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; `init()` reads them and joins the process group
(NCCL on CUDA, gloo on CPU). Without them everything here is a no-op for a single process.

The batch in the config is the global batch: one optimizer step consumes training.accum_steps
token-bounded batches of training.max_tokens in total, shared out over the processes (each takes
accum_steps / world_size of them, so accum_steps must be a multiple of the number of processes).
The same config therefore trains the same model on 1 or N processes, up to float summation order.
"""

from __future__ import annotations

import datetime
import logging
import os
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    """True in the process that writes checkpoints, logs, plots and progress bars (rank 0)."""
    return rank() == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device_type: str, timeout_s: float) -> bool:
    """Join the process group torchrun describes (once); returns True when distributed.

    CUDA processes use device cuda:LOCAL_RANK and NCCL; CPU processes use gloo. Ranks other than
    0 log warnings only. timeout_s (`training.collective_timeout_s`) bounds how long a collective waits
    for a dead peer."""
    if not launched_by_torchrun():
        return False
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        if not is_main():
            logging.getLogger("seq2seq").setLevel(logging.WARNING)
        log.info("distributed training: %d processes (%s)", world_size(), backend)
    return True


def local_device(device_type: str) -> torch.device:
    if device_type == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(device_type)


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


@contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block first (e.g. trains the tokenizer, builds the data cache), the others
    after it, so they reuse what it wrote instead of racing on the same files."""
    if not is_main():
        barrier()
    try:
        yield
    finally:
        if is_main():
            barrier()


def _reduce(value: float, dtype: torch.dtype, device: torch.device, broadcast: bool) -> float:
    t = torch.tensor([value], dtype=dtype, device=device)
    if broadcast:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)
    return t.item()


def sum_int(value: int, device: torch.device) -> int:
    """The sum of `value` over all processes."""
    return value if world_size() == 1 else int(_reduce(value, torch.long, device, broadcast=False))


def sum_float(value: float, device: torch.device) -> float:
    """The sum of `value` over all processes (float64)."""
    return value if world_size() == 1 else float(_reduce(value, torch.float64, device, broadcast=False))


def broadcast_float(value: float, device: torch.device) -> float:
    """Rank 0's `value` on every process (e.g. the elapsed training time)."""
    return value if world_size() == 1 else float(_reduce(value, torch.float64, device, broadcast=True))


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every process."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any) -> list[Any]:
    """Every process's `obj`, in rank order, on every process."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def shard(batches: list[Any]) -> list[Any]:
    """This process's share of one step's batches: batches[rank::world_size]."""
    return batches[rank():: world_size()]


def shutdown() -> None:
    """Leave the process group together: a rank that tears its connections down while another
    still uses them can abort the job at exit (gloo: 'terminate called without an active exception')."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
