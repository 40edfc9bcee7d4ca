"""Builders of small synthetic Kineto traces with known timings (µs), for exact tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


class Trace:
    """Accumulates Kineto events of one rank."""

    def __init__(self, rank: int = 0, world_size: int = 1, pid: int = 100) -> None:
        self.rank, self.world_size, self.pid = rank, world_size, pid
        self.events: list[dict] = []
        self.corr = 0
        self.host_name: str | None = None  # Kineto's "host_name": ranks on one host, one clock

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1,
             **args: object) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid,
                            "ts": ts, "dur": dur, "args": {"External id": len(self.events),
                                                           **args}})

    def step(self, n: int, ts: float, dur: float) -> None:
        self.host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def launch(self, kernel: str, ts: float, dur: float, k_ts: float, k_dur: float,
               stream: int = 7, cat: str = "kernel", api: str = "cudaLaunchKernel",
               tid: int = 1, **kargs: object) -> None:
        self.corr += 1
        c = self.corr
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": self.pid,
                            "tid": tid, "ts": ts, "dur": dur,
                            "args": {"correlation": c, "External id": c}})
        self.events.append({"ph": "X", "cat": cat, "name": kernel, "pid": 0, "tid": stream,
                            "ts": k_ts, "dur": k_dur,
                            "args": {"device": 0, "stream": stream, "correlation": c,
                                     "External id": c, **kargs}})

    def document(self) -> dict:
        doc = {"schemaVersion": 1,
               "distributedInfo": {"backend": "nccl", "rank": self.rank,
                                   "world_size": self.world_size},
               "traceEvents": self.events}
        if self.host_name is not None:
            doc["host_name"] = self.host_name
        return doc

    def write(self, folder: Path, name: str | None = None) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        p = folder / (name or f"rank-{self.rank}.pt.trace.json.gz")
        with gzip.open(p, "wt") as f:
            json.dump(self.document(), f)
        return p


def single_rank_gpu(folder: Path) -> Path:
    """One step of 480 µs: a GEMM (300 µs) and an elementwise kernel (100 µs) launched back
    to back, then cudaDeviceSynchronize waits for them (wakes 5 µs after), then 40 µs of CPU.
    """
    t = Trace()
    t.step(1, 0, 480)
    t.launch("volta_sgemm_128x64_nn", 10, 5, 20, 300)
    t.launch("void at::native::vectorized_elementwise_kernel<4>", 20, 5, 320, 100)
    t.host("cudaDeviceSynchronize", 30, 395, cat="cuda_runtime")
    t.host("aten::add", 430, 40)
    return t.write(folder)


def two_rank_allreduce(folder: Path, late_compute_us: float = 300.0,
                       host_name: str | None = None) -> Path:
    """Two ranks: a GEMM, then an NCCL all_reduce (50 µs transfer after the last arrival),
    a stream sync and 10 µs of CPU. Rank 0's GEMM takes 100 µs, rank 1's
    ``late_compute_us``; ``host_name`` puts both ranks on one named host (one clock)."""
    for rank, comp in ((0, 100.0), (1, late_compute_us)):
        t = Trace(rank=rank, world_size=2, pid=100 + rank)
        t.host_name = host_name
        arrive = 20 + comp
        coll_end = 20 + max(100.0, late_compute_us) + 50
        t.step(1, 0, coll_end + 20)
        t.launch("volta_sgemm_128x64_nn", 10, 5, 20, comp)
        t.host("nccl:all_reduce", 15, 10, cat="user_annotation",
               **{"Input Dims": [[1024]], "Input type": ["float"]})
        t.launch("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 16, 5, arrive,
                 coll_end - arrive, stream=13)
        t.host("cudaStreamSynchronize", 30, coll_end + 5 - 30, cat="cuda_runtime")
        t.host("aten::item", coll_end + 6, 10)
        t.write(folder)
    return folder
