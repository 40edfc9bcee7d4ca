"""Plan config files (YAML or JSON) read into the spec dataclasses of :mod:`traincast.plan.spec`.

A config is a mapping with ``model``, ``system`` and ``layout`` sections, or the same keys
flat at the top level (a section's value wins over a flat key). Keys per section:

- ``model`` (transformer): ``layers, hidden, heads, seq, vocab, ffn, experts, top_k,
  moe_every, dtype, name`` (:class:`~traincast.plan.spec.TransformerSpec`);
  (DLRM): ``tables`` (a list of ``{rows, dim, pooling}``), ``dense_features, bottom_mlp,
  top_mlp, dtype, index_distribution, zipf_alpha, name``
  (:class:`~traincast.plan.spec.DLRMSpec`), plus top-level ``batch`` and ``sharding``;
- ``system``: ``gpu, gpus, node, gpus_per_node, intra_node_gbps, inter_node_gbps``
  (:meth:`SystemSpec.from_catalog <traincast.plan.spec.SystemSpec.from_catalog>`);
- ``layout`` (transformer): ``tp, pp, dp, micro_batch, global_batch, recompute,
  sequence_parallel, zero, schedule, virtual_stages, ep, overlap_grad_reduce``
  (:class:`~traincast.plan.spec.Layout`; ``dp`` defaults to the GPUs ``tp x pp`` leave).

Keyword overrides (the CLI's flags) replace config values; None means "not given".

Public functions: :func:`read_config` (the raw mapping), :func:`load_transformer_config`
and :func:`load_dlrm_config` (the specs), e.g.::

    cfg = load_transformer_config("gpt.yaml", gpus=64)
    traincast.plan(cfg.model, cfg.system, cfg.layout())

Input limits (a config is a few KB written by hand): at most :data:`CONFIG_MAX_BYTES`, YAML
flow collections nested at most :data:`MAX_FLOW_DEPTH` deep (PyYAML's scanner is quadratic in
that nesting), no YAML anchors or aliases (a 1-KB file of nested aliases, "billion laughs",
expands to gigabytes once walked). Every bad input raises
:class:`~traincast.plan.spec.PlanError` with the file's path and the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from traincast.errors import InputTooLargeError, TraincastError
from traincast.plan.spec import (
    DLRMSpec,
    EmbeddingTable,
    Layout,
    PlanError,
    SystemSpec,
    TransformerSpec,
)
from traincast.util.fileio import read_regular

__all__ = ["CONFIG_MAX_BYTES", "MAX_FLOW_DEPTH", "DLRMConfig", "TransformerConfig",
           "load_dlrm_config", "load_transformer_config", "read_config"]

#: the largest config file read (a model config is a few KB)
CONFIG_MAX_BYTES = 1 << 20

#: deepest ``[``/``{`` nesting accepted in a YAML config (a model config needs 3 or 4)
MAX_FLOW_DEPTH = 32

MODEL_KEYS = ("layers", "hidden", "heads", "seq", "vocab", "ffn", "experts", "top_k",
              "moe_every", "dtype", "name")
SYSTEM_KEYS = ("gpu", "gpus", "node", "gpus_per_node", "intra_node_gbps", "inter_node_gbps")
LAYOUT_KEYS = ("tp", "pp", "dp", "micro_batch", "global_batch", "recompute",
               "sequence_parallel", "zero", "schedule", "virtual_stages", "ep",
               "overlap_grad_reduce")
DLRM_KEYS = ("tables", "dense_features", "bottom_mlp", "top_mlp", "dtype",
             "index_distribution", "zipf_alpha", "name")


def flow_depth(text: str) -> int:
    """The deepest nesting of YAML flow collections (``[``, ``{``) in ``text``, skipping
    quoted strings and comments; one linear pass."""
    depth = deepest = 0
    quote = ""
    prev = "\n"
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "#" and prev in " \t\n":
            j = text.find("\n", i)
            i = n if j < 0 else j
            prev = "\n"
            continue
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        prev = c
        i += 1
    return deepest


def _load_yaml(text: str, path: Path) -> Any:
    """YAML without anchors and aliases: the event stream is checked first (linear in the
    text: aliases are not expanded there), then the text is read with ``yaml.safe_load``."""
    depth = flow_depth(text)
    if depth > MAX_FLOW_DEPTH:
        raise PlanError(f"{path}: brackets nested {depth} deep; at most {MAX_FLOW_DEPTH} in a "
                        "config")
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.events.AliasEvent):
            raise PlanError(f"{path}: YAML aliases are not allowed in a config "
                            f"(line {event.start_mark.line + 1})")
    return yaml.safe_load(text)


def read_config(path: str | Path | None) -> dict[str, Any]:
    """The mapping in a YAML or JSON config file (``.json``: JSON, anything else: YAML);
    ``{}`` for None. Raises :class:`PlanError` for an unreadable, oversized or invalid file,
    or one that is not a mapping."""
    if path is None:
        return {}
    path = Path(path)
    try:
        text = read_regular(path, CONFIG_MAX_BYTES).decode()
    except InputTooLargeError:
        raise PlanError(f"{path}: config larger than {CONFIG_MAX_BYTES // 2**20} MiB") from None
    except TraincastError as exc:  # a FIFO, a device: never read (it could block forever)
        raise PlanError(f"{path}: {exc.message}") from None
    except UnicodeDecodeError:
        raise PlanError(f"{path}: config is not UTF-8 text") from None
    except OSError as exc:
        raise PlanError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = _load_yaml(text, path)
    except PlanError:
        raise
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError
        raise PlanError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: "
                        f"{str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: the config must be a mapping")
    return data


def section(cfg: dict[str, Any], name: str, keys: tuple[str, ...], path: str | Path | None
            ) -> dict[str, Any]:
    """Section ``name`` of ``cfg``: its flat ``keys`` updated by the ``name:`` mapping.
    Raises :class:`PlanError` for a section that is not a mapping or holds unknown keys."""
    sec = cfg.get(name, {})
    if not isinstance(sec, dict):
        raise PlanError(f"{path}: '{name}' must be a mapping")
    out = {k: cfg[k] for k in keys if k in cfg}
    out.update(sec)
    unknown = set(sec) - set(keys)
    if unknown:
        raise PlanError(f"{path}: unknown {name} key(s): {', '.join(sorted(unknown))}")
    return out


def _merge(base: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    out = dict(base)
    out.update({k: v for k, v in overrides.items() if v is not None})
    return out


def system_spec(cfg: dict[str, Any], path: str | Path | None, **overrides: Any) -> SystemSpec:
    """The :class:`SystemSpec` of a config's ``system`` section (or flat keys), overridden.
    Raises :class:`PlanError` without a number of GPUs."""
    scfg = _merge(section(cfg, "system", SYSTEM_KEYS, path), **overrides)
    if "gpus" not in scfg:
        raise PlanError("give the number of GPUs (--gpus)")
    n = scfg.pop("gpus")
    return SystemSpec.from_catalog(n, node=scfg.pop("node", None), gpu=scfg.pop("gpu", None),
                                   **scfg)


# ------------------------------------------------------------------------------ transformer


@dataclass
class TransformerConfig:
    """A transformer plan read from a config: the model and system, and the layout's fields
    (unvalidated: a search needs only ``global_batch``; :meth:`layout` builds one layout)."""

    model: TransformerSpec
    system: SystemSpec
    layout_fields: dict[str, Any] = field(default_factory=dict)

    def layout(self) -> Layout:
        """The :class:`Layout` of :attr:`layout_fields`; ``dp`` defaults to the GPUs that
        ``tp x pp`` leave (at least 1). Raises :class:`PlanError` for an invalid layout."""
        lcfg = dict(self.layout_fields)
        if "dp" not in lcfg:  # validated by Layout below
            tp_pp = lcfg.get("tp", 1) * lcfg.get("pp", 1) if all(
                isinstance(lcfg.get(k, 1), int) for k in ("tp", "pp")) else 0
            lcfg["dp"] = max(1, self.system.gpus // tp_pp) if tp_pp >= 1 else 1
        return Layout(**lcfg)


def load_transformer_config(path: str | Path | None = None, **overrides: Any
                            ) -> TransformerConfig:
    """Read a transformer plan from ``path`` (None: from ``overrides`` alone).

    ``overrides`` are keys of the ``model``, ``system`` or ``layout`` sections (module
    docstring); a None value is ignored. Raises :class:`PlanError` for a bad file, unknown
    keys, a missing model size (``layers, hidden, heads, seq``) or number of GPUs, or values
    the specs refuse.
    """
    cfg = read_config(path)
    unknown = set(overrides) - set(MODEL_KEYS) - set(SYSTEM_KEYS) - set(LAYOUT_KEYS)
    if unknown:
        raise TypeError(f"unknown override(s): {', '.join(sorted(unknown))}")
    pick = {name: {k: v for k, v in overrides.items() if k in keys}
            for name, keys in (("model", MODEL_KEYS), ("system", SYSTEM_KEYS),
                               ("layout", LAYOUT_KEYS))}
    mcfg = _merge(section(cfg, "model", MODEL_KEYS, path), **pick["model"])
    missing = [k for k in ("layers", "hidden", "heads", "seq") if k not in mcfg]
    if missing:
        raise PlanError("missing model size: give --" + ", --".join(missing)
                        + " (or a --config)")
    model = TransformerSpec(**mcfg)
    system = system_spec(cfg, path, **pick["system"])
    lcfg = _merge(section(cfg, "layout", LAYOUT_KEYS, path), **pick["layout"])
    return TransformerConfig(model, system, lcfg)


# ------------------------------------------------------------------------------------- DLRM


def dlrm_spec(cfg: dict[str, Any], path: str | Path | None) -> DLRMSpec:
    """A :class:`DLRMSpec` from a config mapping: ``tables`` (list of ``{rows, dim,
    pooling}``), ``dense_features``, ``bottom_mlp``, ``top_mlp`` (flat or under ``model:``)."""
    m = section(cfg, "model", DLRM_KEYS, path)
    tabs = m.pop("tables", None)
    if not isinstance(tabs, list) or not tabs:
        raise PlanError(f"{path}: 'tables' must be a non-empty list of {{rows, dim, pooling}}")
    tables = []
    for i, t in enumerate(tabs):
        if not isinstance(t, dict):
            raise PlanError(f"{path}: table {i} must be a mapping {{rows, dim, pooling}}")
        unknown = set(t) - {"rows", "dim", "pooling"}
        if unknown or "rows" not in t or "dim" not in t:
            raise PlanError(f"{path}: table {i} needs rows and dim (and optionally pooling)"
                            + (f"; unknown key(s): {', '.join(sorted(unknown))}"
                               if unknown else ""))
        tables.append(EmbeddingTable(**t))
    for k in ("bottom_mlp", "top_mlp"):
        if k in m:
            if not isinstance(m[k], list | tuple):
                raise PlanError(f"{path}: '{k}' must be a list of layer widths")
            m[k] = tuple(m[k])
    try:
        return DLRMSpec(tables=tuple(tables), **m)
    except TypeError as exc:  # pragma: no cover - keys are filtered above
        raise PlanError(f"{path}: {exc}") from None


def check_batch(batch: Any) -> int:
    """The global batch of a DLRM plan as an int; :class:`PlanError` when missing or not an
    integer."""
    if batch is None:
        raise PlanError("give the global batch (--batch)")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise PlanError(f"batch must be an integer, got {batch!r}")
    return batch


def parse_sharding(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A sharding value as per-table names: ``"table"``, ``"row,table"`` or a list."""
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split(","))
    return tuple(value)


@dataclass
class DLRMConfig:
    """A DLRM plan read from a config: the model, the raw mapping (for its ``system``
    section, read by :meth:`system` once the flags are known), and ``batch`` and ``sharding``
    as written (None when absent)."""

    model: DLRMSpec
    raw: dict[str, Any]
    path: Path | None = None
    batch: Any = None
    sharding: Any = None

    def system(self, **overrides: Any) -> SystemSpec:
        """The config's :class:`SystemSpec` with ``overrides`` (system keys)."""
        return system_spec(self.raw, self.path, **overrides)

    def system_fields(self) -> dict[str, Any]:
        """The config's ``system`` section (or flat system keys), unvalidated."""
        return section(self.raw, "system", SYSTEM_KEYS, self.path)


def load_dlrm_config(path: str | Path) -> DLRMConfig:
    """Read a DLRM plan (module docstring) from ``path``. Raises :class:`PlanError` for a bad
    file, unknown keys or tables the spec refuses; ``batch`` and ``sharding`` are checked
    where they are used (:func:`check_batch`, :func:`parse_sharding`)."""
    path = Path(path)
    cfg = read_config(path)
    model = dlrm_spec(cfg, path)
    extra = set(cfg) - set(DLRM_KEYS) - {"model", "system", "batch", "sharding", *SYSTEM_KEYS}
    if extra:
        raise PlanError(f"{path}: unknown key(s): {', '.join(sorted(extra))}")
    return DLRMConfig(model, cfg, path, cfg.get("batch"), cfg.get("sharding"))
