"""Host reads of device values: where they cost nothing, and where they stop a GPU.

Reading a tensor's value on the host (`.item()`, `bool(t)`, `.tolist()`, a boolean-mask gather, which
must know how many entries it keeps) is free on a CPU: the value is already there. On a GPU it waits
for all the work queued before it (a host sync), and the host stops feeding the device meanwhile. The
training step and the search therefore read at most once a step where the device is not the host, and
the code that chooses between a read and a way around it asks `sync.host_reads_are_free` (through the
module, so that one patch reaches every caller); tests make it answer False on a CPU to count the reads
a GPU would make (tests/test_host_syncs.py).
"""

from __future__ import annotations

import torch


def host_reads_are_free(device: torch.device | str) -> bool:
    """May code read a tensor's value on the host whenever it likes? True on a CPU."""
    return torch.device(device).type == "cpu"
