"""The :class:`Catalog`: GPUs, links and node presets looked up by name, alias or a Kineto
``deviceProperties`` entry. Built by :func:`traincast.costs.hardware.files.load_catalog`."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from traincast.costs.hardware.devices import CPU, GPU, Link, Node, _norm
from traincast.errors import ParameterError

_KINDS = ("gpu", "link", "node")
_KIND_LABEL = {"gpu": "GPU", "link": "link", "node": "node"}


class Catalog:
    """GPUs, links and node presets, looked up by name or alias (case-insensitive).

    Build it with :func:`load_catalog`. ``gpus``/``links``/``nodes`` map catalog names to
    entries; ``files`` lists the files it was read from.
    """

    def __init__(
        self,
        gpus: Mapping[str, GPU],
        links: Mapping[str, Link],
        nodes: Mapping[str, Node],
        files: tuple[str, ...] = (),
    ) -> None:
        self.gpus: Mapping[str, GPU] = dict(gpus)
        self.links: Mapping[str, Link] = dict(links)
        self.nodes: Mapping[str, Node] = dict(nodes)
        self.files = files
        self._keys: dict[str, dict[str, str]] = {}
        for kind, table in (("gpu", self.gpus), ("link", self.links), ("node", self.nodes)):
            keys: dict[str, str] = {}
            for name, entry in table.items():
                for alias in entry.aliases:
                    keys[_norm(alias)] = name
            for name in table:  # names win over aliases
                keys[_norm(name)] = name
            self._keys[kind] = keys
        self._patterns = [
            (re.compile(p, re.IGNORECASE), gpu) for gpu in self.gpus.values() for p in gpu.patterns
        ]

    def __repr__(self) -> str:
        return (
            f"Catalog({len(self.gpus)} GPUs, {len(self.links)} links, {len(self.nodes)} nodes"
            f" from {', '.join(self.files) or 'memory'})"
        )

    def _lookup(self, kind: str, name: str) -> str:
        keys = self._keys[kind]
        found = keys.get(_norm(str(name)))
        if found is not None:
            return found
        table = {"gpu": self.gpus, "link": self.links, "node": self.nodes}[kind]
        close = difflib.get_close_matches(_norm(str(name)), list(keys), n=5, cutoff=0.5)
        suggestions = list(dict.fromkeys(keys[c] for c in close))
        label = _KIND_LABEL[kind]
        if suggestions:
            raise ParameterError(
                f"unknown {label} {name!r}; close matches: {', '.join(suggestions)}"
            )
        raise ParameterError(f"unknown {label} {name!r}; known: {', '.join(sorted(table))}")

    def gpu(self, name: str) -> GPU:
        """The GPU called ``name`` (catalog name or alias, case-insensitive)."""
        return self.gpus[self._lookup("gpu", name)]

    def link(self, name: str) -> Link:
        """The link called ``name`` (catalog name or alias, case-insensitive)."""
        return self.links[self._lookup("link", name)]

    def node(self, name: str) -> Node:
        """The node preset called ``name`` (catalog name or alias, case-insensitive)."""
        return self.nodes[self._lookup("node", name)]

    def names(self) -> dict[str, tuple[str, ...]]:
        """Catalog names by kind: ``{"gpu": (...), "link": (...), "node": (...)}``."""
        return {
            "gpu": tuple(sorted(self.gpus)),
            "link": tuple(sorted(self.links)),
            "node": tuple(sorted(self.nodes)),
        }

    def peak_flops(self, gpu: GPU | CPU | str, dtype: object) -> float:
        """Peak dense FLOP/s (OP/s for int8) of ``gpu`` (an entry or a name) for ``dtype``."""
        device = self.gpu(gpu) if isinstance(gpu, str) else gpu
        return device.peak_flops(dtype)

    def match_device(
        self,
        trace_name: str,
        *,
        num_sms: int | None = None,
        memory_bytes: int | None = None,
    ) -> GPU | None:
        """The GPU whose patterns match a Kineto ``deviceProperties.name``, else None.

        When several patterns match, the longest match wins (on a tie, the entry defined last,
        i.e. a user file's). A generic name that matches no pattern (ROCm reports some
        Instinct parts as ``AMD Radeon Graphics``, some vLLM runs on MI300X record ``""``)
        is resolved from the other recorded properties: ``num_sms`` (``numSms``: SMs or CUs)
        and ``memory_bytes`` (``totalGlobalMem``), both required for an empty name. The GPUs
        of a compatible vendor with that SM/CU count and, when given, a capacity within 10%
        (GB or GiB) are the candidates: one candidate is the answer; several are accepted
        only when they are the same part for every cost model (same SM/CU count, memory
        bandwidth and capacity, peaks within 1% for every dtype; e.g. MI210 and one MI250
        GCD), and then the first defined is returned; else None.
        """
        name = str(trace_name or "").strip()
        if not name:
            if num_sms is None or memory_bytes is None:
                return None
            return self._match_properties("", num_sms, memory_bytes)
        best: tuple[int, GPU] | None = None
        for regex, gpu in self._patterns:
            m = regex.search(name)
            if m and (best is None or len(m.group(0)) >= best[0]):  # ties: later entry
                best = (len(m.group(0)), gpu)
        if best is not None:
            return best[1]
        if num_sms is None:
            return None
        return self._match_properties(name, num_sms, memory_bytes)

    def match_recorded(self, props: Mapping[str, Any]) -> GPU | None:
        """:meth:`match_device` on one Kineto ``deviceProperties`` entry (``name``, ``numSms``,
        ``totalGlobalMem``); values of the wrong type are ignored. None when nothing matches."""

        def _int(key: str) -> int | None:
            v = props.get(key)
            try:
                return int(v) if v is not None and not isinstance(v, bool) else None
            except (TypeError, ValueError, OverflowError):
                return None

        return self.match_device(str(props.get("name") or ""), num_sms=_int("numSms"),
                                 memory_bytes=_int("totalGlobalMem"))

    def match_first(self, props: Iterable[Mapping[str, Any]]) -> GPU | None:
        """The first of several ``deviceProperties`` entries that :meth:`match_recorded`
        resolves (e.g. every entry of every rank of a TraceSet), else None."""
        for p in props:
            gpu = self.match_recorded(p)
            if gpu is not None:
                return gpu
        return None

    def _match_properties(self, name: str, num_sms: int, memory_bytes: int | None) -> GPU | None:
        vendor = _vendor_of(name)
        candidates = [
            g
            for g in self.gpus.values()
            if g.sm_count == num_sms
            and (not vendor or g.vendor == vendor)
            and (memory_bytes is None or _capacity_close(g.hbm_gb, memory_bytes))
        ]
        if not candidates:
            return None
        first = candidates[0]
        return first if all(_equivalent(first, g) for g in candidates[1:]) else None


def _equivalent(a: GPU, b: GPU) -> bool:
    """Same part for every cost model: SMs, memory, bandwidth equal, peaks within 1%."""
    if (a.sm_count, a.hbm_gb, a.hbm_gbps) != (b.sm_count, b.hbm_gb, b.hbm_gbps):
        return False
    if set(a.peak_tflops) != set(b.peak_tflops):
        return False
    return all(abs(a.peak_tflops[k] - b.peak_tflops[k]) <= 0.01 * a.peak_tflops[k]
               for k in a.peak_tflops)


def _vendor_of(name: str) -> str:
    low = name.lower()
    if any(w in low for w in ("amd", "radeon", "instinct")):
        return "amd"
    if any(w in low for w in ("nvidia", "tesla", "geforce", "quadro")):
        return "nvidia"
    return ""


def _capacity_close(hbm_gb: float, memory_bytes: int) -> bool:
    return any(abs(memory_bytes - hbm_gb * unit) <= 0.1 * hbm_gb * unit for unit in (1e9, 2**30))
