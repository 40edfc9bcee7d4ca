"""A process group on this machine: the rendezvous port shared by the recorders that spawn
ranks (:mod:`traincast.record.comm_bench`, :mod:`traincast.record.ddp`,
:mod:`traincast.record.sharded_dlrm`)."""

from __future__ import annotations

import os
import socket

__all__ = ["free_port", "join_group"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def join_group(rank: int, world: int, port: int, backend: str = "gloo") -> None:
    """Join the ``world``-rank process group rendezvousing on ``127.0.0.1:port``."""
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world)
