"""Multi-process training with torchrun: PyTorch's DistributedDataParallel, nothing home-made.

    torchrun --nproc_per_node=2 -m seq2seq train CONFIG          # one machine, 2 processes
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 -m seq2seq train CONFIG

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; `init()` reads them and joins the process group
(NCCL on CUDA, gloo on CPU). Without them everything here is a no-op for a single process.

The batch in the config is the global batch: one optimizer step consumes training.accum_steps
token-bounded batches of training.max_tokens in total, shared out over the processes (each takes
accum_steps / world_size of them, so accum_steps must be a multiple of the number of processes).
The same config therefore trains the same model on 1 or N processes, up to float summation order.

Elastic restarts (torchrun --max-restarts N, `--resume`): when a worker dies, torchrun stops the
others and starts a new round of workers, which resume from the last complete checkpoint. torchrun's
agents keep one key-value store for all rounds (TORCHELASTIC_USE_AGENT_STORE), and the process
group of a new round would read the addresses the previous round's workers left in it (gloo:
"connectFullMesh failed ... Connection refused", a wasted restart). `init` therefore joins each
round's group under a key prefix of its own that rank 0 chooses (`_round_prefix`).
"""

from __future__ import annotations

import datetime
import logging
import os
import time
import uuid
from contextlib import contextmanager
from typing import Iterator, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

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
        timeout = datetime.timedelta(seconds=timeout_s)
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            store = _agent_store(timeout)
            rank_, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            prefix = _round_prefix(store, rank_, world, timeout_s)
            dist.init_process_group(backend, store=dist.PrefixStore(prefix, store), rank=rank_, world_size=world,
                                    timeout=timeout)
        else:
            dist.init_process_group(backend, timeout=timeout)
        if not is_main():
            logging.getLogger("seq2seq").setLevel(logging.WARNING)
        log.info("distributed training: %d processes (%s)", world_size(), backend)
    return True


ROUND_KEY = "seq2seq/round"  # rank 0's name for the current round of workers
HELLO_WAIT_S = 2.0  # how long a rank waits for rank 0's answer before it checks for a newer round


def _agent_store(timeout: datetime.timedelta) -> dist.Store:
    """A client of the store torchrun's agents share across rounds (MASTER_ADDR:MASTER_PORT)."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timeout)


def _round_prefix(store: dist.Store, rank_: int, world: int, timeout_s: float) -> str:
    """A key prefix that every worker of this round shares and no earlier round used.

    Rank 0 names the round (a random id under ROUND_KEY) and then answers each other rank's hello.
    A rank that read an id left by an earlier round (rank 0 had not written the new one yet) gets no
    answer, as that round's rank 0 is gone: it reads the key again, and joins the id that rank 0
    answers under. Every wait is bounded by timeout_s (`training.collective_timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    if rank_ == 0:
        name = uuid.uuid4().hex
        store.set(ROUND_KEY, name)
        for other in range(1, world):
            store.wait([f"seq2seq/{name}/hello/{other}"], datetime.timedelta(seconds=max(deadline - time.monotonic(), 1)))
            nonce = store.get(f"seq2seq/{name}/hello/{other}").decode()
            store.set(f"seq2seq/{name}/welcome/{nonce}", "1")
        return f"seq2seq/{name}/pg/"
    seen, nonce = "", ""
    while True:
        name = store.get(ROUND_KEY).decode()
        if name != seen:  # (a new nonce each time: a welcome from a round long gone can never match)
            seen, nonce = name, uuid.uuid4().hex
            store.set(f"seq2seq/{name}/hello/{rank_}", nonce)
        try:
            store.wait([f"seq2seq/{name}/welcome/{nonce}"], datetime.timedelta(seconds=HELLO_WAIT_S))
            return f"seq2seq/{name}/pg/"
        except (dist.DistStoreError, RuntimeError):
            if time.monotonic() > deadline:
                raise dist.DistStoreError(f"rank {rank_}: rank 0 did not start this round of workers within "
                                          f"{timeout_s:g} s (training.collective_timeout_s)") from None


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


def broadcast_object(obj: T) -> T:
    """Rank 0's `obj` on every process."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: T) -> list[T]:
    """Every process's `obj`, in rank order, on every process."""
    if world_size() == 1:
        return [obj]
    out = [obj] * world_size()  # every entry is replaced by the rank's own object
    dist.all_gather_object(out, obj)
    return out


def shard(batches: list[T]) -> list[T]:
    """This process's share of one step's batches: batches[rank::world_size]."""
    return batches[rank():: world_size()]


def shutdown(clean: bool = True) -> None:
    """Leave the process group together: a rank that tears its connections down while another
    still uses them can abort the job at exit (gloo: 'terminate called without an active exception').
    After a failure (`clean` False: a peer may be dead) no barrier: it would wait for the collective
    timeout once more before the process could exit and torchrun restart the round."""
    if dist.is_available() and dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()
