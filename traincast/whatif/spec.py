"""What-if specifications: parsing and validation of ``--what-if KEY=VALUE``.

Keys (several may be combined; they apply in this order):

=================  ===========================================================================
``speedup``        ``REGEX=F`` (event names matching REGEX run F times faster),
                   ``family:NAME=F`` (an op family: gemm, conv, attention, embedding,
                   elementwise, norm, optimizer, comm, memcpy, other) or ``kind:KIND=F``
                   (an event kind: kernel, memcpy, memset, cpu_op, runtime...; ``device``
                   = every kernel, memcpy and memset; F < 1 slows them down); any of them
                   prefixed ``rank:R:`` applies to rank R only (``rank:1:family:embedding=
                   1.3``: balance one rank's load). Repeatable.
``batch_size``     per-rank batch size; shape-dependent ops are rescaled with the compute
                   model (the recorded batch comes from ``.run.json`` beside the traces or
                   ``batch_size_from``).
``batch_size_from`` the batch size the traces were recorded with, if ``run.json`` is absent.
``gpu``            another GPU from the hardware catalog: device ops rescaled by the compute
                   model's roofline position (bounded by the peak ratios).
``world_size``     data-parallel ranks: every collective of a group spanning the world is
                   rescaled with the communication model for the new group size.
``ranks_per_node`` GPUs per node for the new layout (default: as recorded).
``inter_node_gbps`` / ``intra_node_gbps``  network bandwidth per GPU, Gb/s per direction
                   (e.g. 400 for one NDR port per GPU).
``overlap``        ``ideal``: communication hidden behind compute (nothing waits for a
                   collective's transfer).
``comm_algorithm`` ``ring``, ``tree``, ``pairwise`` or ``best``: collectives timed with that
                   algorithm (:meth:`CommModel.predict_ns`) instead of the fitted curve.
``node``           a node preset of the hardware catalog (``DGX-A100``, ``DGX-H100``...):
                   ``gpu`` = its GPU, ``intra_node_gbps`` / ``inter_node_gbps`` = its
                   NVLink and NIC bandwidth per GPU, ``ranks_per_node`` = its GPUs per node
                   (a key given explicitly wins). The catalog has no host CPU speed model,
                   so host time is kept as recorded (said in the notes).
``efficiency``     how a shape change rescales an op: ``constant`` (default: time in
                   proportion to its work, FLOPs or bytes) or ``fitted`` (the compute model's
                   size-dependent efficiency curve, fitted on the recorded trace).
=================  ===========================================================================

Keys that act only together with another are refused alone (:data:`NEEDS`):
``ranks_per_node`` (the layout of a new ``world_size`` or network), ``batch_size_from`` and
``efficiency`` (both only shape a ``batch_size`` change). A speedup that matches no event of
the traces is refused when the what-if is applied
(:func:`traincast.whatif.speedup.speedup_factors`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.trace.schema import GPU_WORK_KINDS, KINDS, OP_FAMILIES
from traincast.util.user_regex import compile_user_regex

KEYS = ("speedup", "batch_size", "batch_size_from", "gpu", "world_size", "ranks_per_node",
        "inter_node_gbps", "intra_node_gbps", "overlap", "efficiency", "comm_algorithm", "node")

#: key -> (keys of which one must be given too, what to tell the user): keys that change
#: nothing alone (:func:`traincast.whatif.apply.apply_what_if` reads them only with another)
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "ranks_per_node": (("world_size", "inter_node_gbps", "intra_node_gbps", "comm_algorithm",
                        "node"),
                       "it is the layout of a new world size: add world_size=N (or a network "
                       "change: inter_node_gbps, intra_node_gbps, comm_algorithm, node)"),
    "batch_size_from": (("batch_size",), "it is the recorded batch of a batch change: add "
                                          "batch_size=N"),
    "efficiency": (("batch_size",), "it says how a batch change rescales ops: add "
                                     "batch_size=N"),
}


@dataclass
class Speedup:
    """Events whose name matches ``pattern`` (or whose op family is ``family``, or whose
    kind is one of ``kinds``) run ``factor`` times faster."""

    factor: float
    pattern: Any = None  # a compiled user regex (traincast.util.user_regex, RE2)
    family: str | None = None
    kinds: tuple[str, ...] | None = None
    kind_name: str | None = None
    rank: int | None = None  # only this rank's events (None: every rank)

    def describe(self) -> str:
        where = f"rank:{self.rank}:" if self.rank is not None else ""
        if self.kinds:
            return f"{where}kind:{self.kind_name}={self.factor:g}"
        what = f"family:{self.family}" if self.family else self.pattern.pattern  # type: ignore[union-attr]
        return f"{where}{what}={self.factor:g}"


@dataclass
class WhatIf:
    """A validated set of what-if changes (see the module docstring)."""

    speedups: list[Speedup] = field(default_factory=list)
    batch_size: int | None = None
    batch_size_from: int | None = None
    gpu: str | None = None
    world_size: int | None = None
    ranks_per_node: int | None = None
    inter_node_gbps: float | None = None
    intra_node_gbps: float | None = None
    overlap: str | None = None
    efficiency: str | None = None
    comm_algorithm: str | None = None
    node: str | None = None
    #: how ``node`` was expanded, for the notes (empty without ``node``)
    node_notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.speedups or self.batch_size or self.gpu or self.world_size
                    or self.inter_node_gbps or self.intra_node_gbps or self.overlap
                    or self.comm_algorithm)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form, as reported in the prediction output."""
        out: dict[str, Any] = {}
        if self.speedups:
            out["speedup"] = [s.describe() for s in self.speedups]
        for k in KEYS[1:]:
            v = getattr(self, k)
            if k == "node" and v is None:
                continue
            if v is not None:
                out[k] = v
        return out


def _positive(key: str, value: Any, kind: type = float, maximum: float | None = None,
              minimum: float | None = None) -> Any:
    try:
        v = kind(value)
    except (TypeError, ValueError):
        raise ParameterError(f"--what-if {key}: expected a number, got {value!r}") from None
    if isinstance(v, float) and not math.isfinite(v):
        raise ParameterError(f"--what-if {key}: must be finite, got {value!r}")
    if v <= 0:
        raise ParameterError(f"--what-if {key}: must be > 0, got {value!r}")
    if maximum is not None and v > maximum:
        raise ParameterError(f"--what-if {key}: {value!r} is beyond {maximum:g}")
    if minimum is not None and v < minimum:
        raise ParameterError(f"--what-if {key}: {value!r} is below {minimum:g}")
    return v


def _speedup(text: str) -> Speedup:
    if text.startswith("rank:"):
        r, colon, rest = text[len("rank:"):].partition(":")
        if not colon or not r.isdigit() or len(r) > 9:
            raise ParameterError(f"--what-if speedup: expected rank:R:TARGET=FACTOR with R a "
                                 f"rank number, got {text!r}")
        sp = _speedup(rest)
        sp.rank = int(r)
        return sp
    target, sep, factor = text.rpartition("=")
    if not sep or not target:
        raise ParameterError(f"--what-if speedup: expected PATTERN=FACTOR or "
                             f"family:NAME=FACTOR, got {text!r}")
    f = _positive("speedup", factor, float, maximum=1e6, minimum=1e-6)
    if target.startswith("family:"):
        fam = target[len("family:"):]
        if fam not in OP_FAMILIES:
            raise ParameterError(f"--what-if speedup: unknown op family {fam!r} "
                                 f"(one of {', '.join(OP_FAMILIES)})")
        return Speedup(f, family=fam)
    if target.startswith("kind:"):
        kn = target[len("kind:"):]
        kinds = GPU_WORK_KINDS if kn == "device" else (kn,)
        if kn != "device" and kn not in KINDS:
            raise ParameterError(f"--what-if speedup: unknown event kind {kn!r} "
                                 f"(one of device, {', '.join(KINDS)})")
        return Speedup(f, kinds=kinds, kind_name=kn)
    return Speedup(f, pattern=compile_user_regex(target, "--what-if speedup"))


def parse_what_if(items: Iterable[str] | Mapping[str, Any] | WhatIf | None) -> WhatIf:
    """Parse ``["gpu=H100", "speedup=family:gemm=2", ...]`` or a dict into a WhatIf.

    A dict may give ``speedup`` as a string or a list of strings.

    Raises:
        ParameterError: unknown key, bad value, absurd number, unknown ``node`` preset, or a
            key given without the key it needs (:data:`NEEDS`).
    """
    if isinstance(items, WhatIf):
        return items
    w = WhatIf()
    if not items:
        return w
    pairs: list[tuple[str, Any]] = []
    if isinstance(items, Mapping):
        for k, v in items.items():
            if k == "speedup" and isinstance(v, (list, tuple)):
                pairs += [("speedup", x) for x in v]
            else:
                pairs.append((k, v))
    else:
        for it in items:
            k, sep, v = str(it).partition("=")
            if not sep:
                raise ParameterError(f"--what-if expects KEY=VALUE, got {it!r}")
            pairs.append((k.strip(), v.strip()))
    for k, v in pairs:
        if k not in KEYS:
            raise ParameterError(f"--what-if: unknown key {k!r} (one of {', '.join(KEYS)})")
        if k == "speedup":
            w.speedups.append(_speedup(str(v)))
        elif k in ("batch_size", "batch_size_from"):
            setattr(w, k, _positive(k, v, int, maximum=1 << 20))
        elif k == "world_size":
            w.world_size = _positive(k, v, int, maximum=1 << 20)
        elif k == "ranks_per_node":
            w.ranks_per_node = _positive(k, v, int, maximum=1024)
        elif k in ("inter_node_gbps", "intra_node_gbps"):
            # 1 Mb/s .. 1 Pb/s per GPU: outside, step times overflow int64 ns or mean nothing
            setattr(w, k, _positive(k, v, float, maximum=1e6, minimum=1e-3))
        elif k == "gpu":
            w.gpu = str(v)
        elif k == "comm_algorithm":
            if str(v) not in ("ring", "tree", "pairwise", "best"):
                raise ParameterError(f"--what-if comm_algorithm: ring, tree, pairwise or best, "
                                     f"got {v!r}")
            w.comm_algorithm = str(v)
        elif k == "efficiency":
            if str(v) not in ("constant", "fitted"):
                raise ParameterError(f"--what-if efficiency: 'constant' or 'fitted', got {v!r}")
            w.efficiency = str(v)
        elif k == "overlap":
            if str(v) != "ideal":
                raise ParameterError(f"--what-if overlap: only 'ideal' is supported, got {v!r}")
            w.overlap = "ideal"
        elif k == "node":
            w.node = str(v)
    if w.node is not None:
        _expand_node(w, {k for k, _ in pairs})
    given = {k for k, _ in pairs}
    for key, (partners, why) in NEEDS.items():
        if key in given and not given & set(partners):
            raise ParameterError(f"--what-if {key} has no effect alone: {why}")
    if w.world_size and w.ranks_per_node and w.world_size % w.ranks_per_node and \
            w.world_size > w.ranks_per_node:
        raise ParameterError(f"--what-if world_size={w.world_size} is not a multiple of "
                             f"ranks_per_node={w.ranks_per_node}")
    return w


def _expand_node(w: WhatIf, given: set[str]) -> None:
    """Set ``gpu``, the link bandwidths and ``ranks_per_node`` of ``w`` from the catalog node
    preset ``w.node`` (keys in ``given`` keep their explicit values); notes in
    ``w.node_notes``.

    Raises:
        ParameterError: no such node preset.
    """
    cat = load_catalog()
    try:
        node = cat.node(str(w.node))
    except (KeyError, ParameterError):
        raise ParameterError(f"--what-if node: unknown node preset {w.node!r} (one of "
                             f"{', '.join(cat.names()['node'])})") from None
    w.node = node.name
    intra = node.intra_gbps_per_gpu * 8
    inter = node.inter_gbps_per_gpu * 8 if node.inter_link is not None else None
    kept = [k for k in ("gpu", "intra_node_gbps", "inter_node_gbps", "ranks_per_node")
            if k in given]
    if "gpu" not in given:
        w.gpu = node.gpu.name
    if "intra_node_gbps" not in given:
        w.intra_node_gbps = intra
    if "inter_node_gbps" not in given and inter is not None:
        w.inter_node_gbps = inter
    if "ranks_per_node" not in given:
        w.ranks_per_node = int(node.gpus_per_node)
    net = f"{node.intra_link.name} {intra:g} Gb/s per GPU inside the node"
    if inter is not None:
        net += (f", {node.nics_per_node}x {node.inter_link.name} = {inter:g} Gb/s per GPU "
                "across nodes")
    w.node_notes = [
        f"node {node.name}: gpu={w.gpu}, {net}, {node.gpus_per_node} ranks per node"
        + (f" (given explicitly: {', '.join(kept)})" if kept else ""),
        f"node {node.name}: host CPU kept as recorded (assumption: the catalog has no host "
        "CPU speed model, so host time, launches and Python overhead are unchanged)",
    ]
