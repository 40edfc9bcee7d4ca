"""The canonical tables every reader produces and every analysis reads (see DESIGN.md).

``events`` has one row per complete event. Times are integer nanoseconds on the recording
rank's clock (trace files store microseconds; readers convert with ``round(us * 1000)``).
Host events have ``device == stream == -1``.
"""

from __future__ import annotations

import pyarrow as pa

#: Values of the ``kind`` column.
KINDS: tuple[str, ...] = (
    "cpu_op",  # ATen op or other CPU operator (Kineto cat ``cpu_op``)
    "annotation",  # user/record_function range: ProfilerStep#N, nccl:all_reduce (host or GPU)
    "python",  # python_function
    "runtime",  # CUDA/HIP runtime or driver API call on a host thread
    "kernel",  # GPU compute kernel
    "memcpy",  # GPU memcpy
    "memset",  # GPU memset
    "collective",  # GPU communication kernel (NCCL/RCCL), or a host-side gloo collective
    "sync",  # cuda_sync events (Event Sync / Stream Wait Event / Stream Sync / Context Sync)
)

#: Kinds of the GPU work a program launches that is not communication: compute kernels,
#: copies and fills (a "device" speedup in the what-ifs scales these).
GPU_WORK_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")

#: Kinds of the events that execute on a device or carry out a collective: the GPU work plus
#: ``collective`` (NCCL kernels; a gloo collective is a host event of this kind, so select by
#: ``device >= 0`` as well where only GPU streams count).
DEVICE_KINDS: tuple[str, ...] = GPU_WORK_KINDS + ("collective",)

#: Values of the ``op_family`` column.
OP_FAMILIES: tuple[str, ...] = (
    "gemm",
    "conv",
    "attention",
    "embedding",
    "elementwise",
    "norm",
    "optimizer",
    "comm",
    "memcpy",
    "other",
)

_DICT = pa.dictionary(pa.int32(), pa.string())

#: Arrow schema of the ``events`` table.
EVENTS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("iteration", pa.int32()),
        pa.field("kind", _DICT),
        pa.field("name", _DICT),
        pa.field("ts", pa.int64()),
        pa.field("dur", pa.int64()),
        pa.field("pid", pa.int64()),
        pa.field("tid", pa.int64()),
        pa.field("device", pa.int32()),
        pa.field("stream", pa.int32()),
        pa.field("correlation", pa.int64()),
        pa.field("external_id", pa.int64()),
        pa.field("op_family", _DICT),
    ]
)

#: ``events`` id columns (int64 in :data:`EVENTS_SCHEMA`) that :func:`traincast.load` stores as
#: int32 when every value of the whole job fits in int32 (decided per column and per job: one
#: value beyond int32 on any rank keeps the column int64 for every rank). Readers of these
#: columns widen before arithmetic that could leave int32 (sums, products, shifts).
NARROW_INT_COLUMNS: tuple[str, ...] = ("pid", "tid", "correlation", "external_id", "rf_id")

#: ``events`` columns that only link the events to execution traces (the Kineto ``External
#: id`` and ``Record function id`` args; :mod:`traincast.trace.link.match` reads them while
#: :func:`traincast.load` links ``et_dir``). Nothing after the load reads them:
#: :func:`traincast.trace.traceset.drop_link_columns` lets a program that holds a large job
#: free them.
LINK_COLUMNS: tuple[str, ...] = ("external_id", "rf_id")

#: ``events`` dictionary columns. Their index type is not fixed: readers write int32 codes,
#: :func:`traincast.load` stores each with the narrowest signed index type its dictionary
#: fits (int8, int16, int32). Readers of the codes accept any signed integer width and widen
#: before arithmetic that could leave it (products, sums of codes).
DICT_COLUMNS: tuple[str, ...] = ("kind", "op_family", "name")

#: Arrow schema of the ``collectives`` table (one row per collective call on a rank).
COLLECTIVES_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("event", pa.int64()),  # row in ``events`` of the host-side call
        pa.field("kernel_event", pa.int64()),  # row of the GPU kernel, -1 if none (CPU backend)
        pa.field("issue_event", pa.int64()),  # gloo: row of the enqueuing c10d:: op, else -1
        pa.field("collective", pa.string()),  # all_reduce, all_gather, ... (normalised)
        pa.field("process_group", pa.string()),  # process group name, "" if unknown
        pa.field("seq", pa.int64()),  # order of this call within its process group on the rank
        pa.field("recorded_seq", pa.int64()),  # c10d sequence number if recorded, else -1
        pa.field("group_size", pa.int32()),
        pa.field("members", pa.int32()),  # row of ``member_lists``: the group's ranks
        pa.field("dtype", pa.string()),
        pa.field("in_bytes", pa.int64()),
        pa.field("out_bytes", pa.int64()),
    ]
)

#: Arrow schema of the ``member_lists`` side table: one row per distinct list of a process
#: group's member ranks (as recorded), referenced by ``collectives.members`` (its row number).
#: A world-size group lists every rank in every call: one row per call and rank would hold
#: calls x ranks^2 ids in all (134M at 4,096 ranks with 8 calls per step).
MEMBER_LISTS_SCHEMA = pa.schema(
    [
        pa.field("ranks", pa.list_(pa.int32())),  # global ranks, in recorded order
    ]
)

#: Arrow schema of the ``shapes`` side table, keyed by ``event`` row (``record_shapes`` or ET).
SHAPES_SCHEMA = pa.schema(
    [
        pa.field("event", pa.int64()),
        pa.field("input_dims", pa.string()),  # JSON text, e.g. "[[64, 128], []]"
        pa.field("input_types", pa.string()),  # JSON text, e.g. '["float", "Scalar"]'
    ]
)

#: Integer sentinel for "none" in id and device columns.
NONE = -1
