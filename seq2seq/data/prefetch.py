"""Training steps' batches, prepared ahead of the step on a background thread.

    steps = training_steps(sampler, collate, accum_steps=2)        # the steps, made on demand
    for step in Prefetcher(steps, depth=2, prepare=Step.pinned):   # the same steps, made ahead
        step.batches        # this process's collated share of the step's accum_steps batches
        step.sampler_state  # the sampler's position after them: a checkpoint taken after this step
                            # resumes with the next one

What runs ahead: drawing the batches' rows (and, at an epoch's start, `TokenBatchSampler.batches`,
which with subword regularization segments the whole corpus anew), collating them (ids to padded
tensors; image and audio batches read, augmented and stacked by their processor), and copying them
into page-locked memory for a GPU (`Step.pinned`), which the training thread then copies to the
device without waiting (`Batch.to(device, non_blocking=True)`). The thread runs the same generator
the training thread would, one step at a time in order, so the steps are the same steps in the same
order either way (tests/test_prefetch.py); nothing it does draws from torch's or Python's random
generators (a media batch's augmentation has a generator of its own per row and epoch).

The sampler runs ahead of training by up to `depth` steps: a checkpoint must record the position of
the last step trained (`Step.sampler_state`), never the sampler's own, and a stopped prefetcher hands
the sampler back at that position (`Trainer.train` does both).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, replace
from typing import Callable, Generic, Iterator, TypeVar

from seq2seq.data.batching import Batch, TokenBatchSampler

T = TypeVar("T")


@dataclass
class Step:
    """One optimizer step's input: this process's collated batches and the sampler's state after them."""

    batches: list[Batch]
    sampler_state: dict[str, int]

    def pinned(self) -> Step:
        """The same step with every tensor in page-locked memory (for a CUDA device)."""
        return replace(self, batches=[b.pin_memory() for b in self.batches])


def training_steps(sampler: TokenBatchSampler, collate: Callable[[list[int]], Batch], accum_steps: int = 1,
                   max_epochs: int | None = None, world: int = 1, rank: int = 0) -> Iterator[Step]:
    """The training steps from the sampler's position on: each takes the next `accum_steps` batches of
    row indices (an epoch's end goes on into the next epoch, until `max_epochs`) and collates this
    process's share of them (batches rank, rank + world, ...), each as soon as it is drawn, so that a
    collate reading the sampler's epoch (subword samples, augmentation) reads the batch's own. Ends
    when the data does: at max_epochs, or, with several processes, before a step that has fewer
    batches than `accum_steps` (a single process trains a last, partial step)."""
    def batches() -> Iterator[list[int]]:
        while True:
            yield from sampler
            if max_epochs is not None and sampler.epoch + 1 >= max_epochs:
                return
            sampler.set_epoch(sampler.epoch + 1)

    stream = batches()
    while True:
        mine, drawn = [], 0
        for indices in stream:
            if drawn % world == rank:
                mine.append(collate(indices))
            drawn += 1
            if drawn == accum_steps:
                break
        if not drawn or (world > 1 and drawn < accum_steps):
            return
        yield Step(mine, sampler.state_dict())


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _End:
    """What the producer queues after the last item (`_END`, its one instance)."""


_END = _End()


class Prefetcher(Generic[T]):
    """`items` (an iterator), each passed through `prepare`, produced up to `depth` items ahead on a
    daemon thread; iterating gives them in order, and an error raised while producing one is raised
    where that item would have been taken. `close()` stops the thread (the items not yet taken are
    dropped); use it as a context manager or close it, so that it stops drawing from `items`."""

    def __init__(self, items: Iterator[T], depth: int = 2, prepare: Callable[[T], T] | None = None) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.items, self.prepare = items, prepare
        self.queue: queue.Queue[T | _Failure | _End] = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._produce, name="seq2seq-prefetch", daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        try:
            for item in self.items:
                if self.prepare is not None:
                    item = self.prepare(item)
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(_Failure(e))

    def _put(self, item: T | _Failure | _End) -> bool:
        """Queue `item`, waiting for room; False when the prefetcher was closed meanwhile."""
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Prefetcher[T]:
        return self

    def __next__(self) -> T:
        item = self.queue.get()
        if isinstance(item, _End):
            self.queue.put(_END)  # every later call ends too
            raise StopIteration
        if isinstance(item, _Failure):
            self.queue.put(item)
            raise item.error
        return item

    def close(self) -> None:
        """Stop producing and wait for the thread (it finishes the item it is making)."""
        self.stopping.set()
        while self.thread.is_alive():
            try:
                while True:
                    self.queue.get_nowait()
            except queue.Empty:
                pass
            self.thread.join(timeout=0.05)

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
