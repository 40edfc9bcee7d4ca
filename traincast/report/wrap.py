"""Text for a terminal of a given width: prose wrapped at spaces (a number is never cut), shell
commands wrapped between arguments with ``\\`` continuations (still valid to paste), long
names folded at their own joints (``_``, ``::``, ``<``, ``,``), and kernel labels made distinct
(rows whose names shorten to the same text get the template argument that tells them apart).
Widths are in characters (terminal columns); nothing here measures East-Asian wide characters."""

from __future__ import annotations

import re
import shlex
import textwrap
from collections import Counter

__all__ = ["distinct_labels", "fold_name", "wrap_command", "wrap_prose"]

#: narrowest width text is wrapped to (below it a line would hold a word or two)
MIN_WIDTH = 20


def wrap_prose(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """``text`` as lines of at most ``width`` characters, broken at spaces (a number is never
    cut); a word longer than the line (a kernel's full name, a path) is folded at its joints
    (:func:`fold_name`); ``first`` prefixes the first line (default ``indent``), ``indent`` the
    others."""
    first = indent if first is None else first
    w = max(width, MIN_WIDTH, len(first) + 8, len(indent) + 8)
    lines = textwrap.wrap(text, width=w, initial_indent=first, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False) or [first.rstrip()]
    out: list[str] = []
    for line in lines:  # a word longer than the line (a kernel's full name): folded at joints
        if len(line) <= w:
            out.append(line)
            continue
        lead = first if not out else indent
        for k, piece in enumerate(fold_name(line[len(lead):], w - len(indent))):
            out.append((lead if k == 0 else indent) + piece)
    return out


def wrap_command(cmd: str, width: int, indent: str = "", prompt: str = "$ ") -> list[str]:
    """A shell command (as :func:`shlex.join` writes it) on lines of at most ``width``
    characters, broken between arguments with a trailing `` \\``; an option stays on the line
    of its value (``--what-if KEY=VALUE``). Pasted into a POSIX shell the lines run as one
    command. An argument longer than the line stays whole."""
    try:
        args = shlex.split(cmd)
    except ValueError:
        return [indent + prompt + cmd]
    words = [shlex.quote(a) for a in args]
    groups: list[str] = []
    i = 0
    while i < len(words):
        if words[i].startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            groups.append(words[i] + " " + words[i + 1])
            i += 2
        else:
            groups.append(words[i])
            i += 1
    w = max(width, MIN_WIDTH)
    cont = indent + " " * len(prompt) + "  "
    lines: list[str] = []
    cur = indent + prompt
    fresh = True
    for g in groups:
        if fresh:
            cur += g
            fresh = False
        elif len(cur) + 1 + len(g) + 2 <= w:  # room for " g" and a later " \"
            cur += " " + g
        else:
            lines.append(cur + " \\")
            cur = cont + g
    lines.append(cur)
    return lines


_JOINT = re.compile(r"(?<=[_:<,\s/.+])|(?<=-)(?=[^>])|(?=[<(])|(?<=[a-z])(?=[A-Z][a-z])")


def fold_name(name: str, width: int) -> list[str]:
    """``name`` on lines of at most ``width`` characters, broken after ``_``, ``::``, ``,``,
    ``/``, ``.``, ``-``, ``+`` or a space, before ``<``/``(`` or a capitalised word (so ``vectorized_elementwise_kernel`` folds
    as ``vectorized_`` / ``elementwise_kernel``); a piece longer than ``width`` with no joint is
    cut at ``width`` (the only case that cuts)."""
    width = max(width, 4)
    if len(name) <= width:
        return [name]
    pieces = [p for p in _JOINT.split(name) if p]
    lines: list[str] = []
    cur = ""
    for p in pieces:
        while len(p) > width:  # no joint: cut (rare: hashes, mangled names)
            if cur:
                lines.append(cur)
                cur = ""
            lines.append(p[:width])
            p = p[width:]
        if len(cur) + len(p) <= width:
            cur += p
        else:
            if cur:
                lines.append(cur)
            cur = p
    if cur:
        lines.append(cur)
    return [ln.rstrip() for ln in lines]


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: words of a template argument that do not tell kernels apart
_NOISE = frozenset({
    "at", "native", "detail", "c10", "void", "int", "long", "float", "double", "char", "bool",
    "unsigned", "const", "signed", "short", "half", "Half", "BFloat16", "true", "false",
    "operator", "lambda", "anonymous", "namespace", "Array", "std", "cuda", "cub", "size_t",
    "TensorIteratorBase", "TensorIterator", "Scalar", "OffsetCalculator",
    "TrivialOffsetCalculator", "func_wrapper_t", "ReduceOp", "uint32_t", "int64_t",
})


def _tail(short: str) -> str:
    """The last component of a qualified name (``at::native::foo`` -> ``foo``)."""
    return short.rsplit("::", 1)[-1] or short


def _qualifier(full: str, short: str) -> str:
    """The first telling identifier of ``full``'s template or call arguments (``sqrt_kernel_cuda``
    in ``vectorized_elementwise_kernel<4, at::native::sqrt_kernel_cuda(...)...>``), or ""."""
    at = full.find(short.rsplit("::", 1)[-1])
    rest = full[at + len(_tail(short)):] if at >= 0 else full
    for m in _IDENT.finditer(rest):
        word = m.group()
        if word not in _NOISE and not word.isdigit() and len(word) > 2:
            return word
    return ""


def distinct_labels(names: list[str], short: list[str]) -> list[str]:
    """Display labels for rows: ``short[i]`` (the name without templates and arguments) with
    its namespaces dropped where that stays unique, and, where several different ``names``
    shorten to the same text, ``label<telling template argument>``; rows still alike get
    ``#k``. Rows with the same full name keep the same label."""
    tails = [_tail(s) for s in short]
    fulls_per_tail: dict[str, set[str]] = {}
    for n, t in zip(names, tails, strict=True):
        fulls_per_tail.setdefault(t, set()).add(n)
    labels = []
    for n, s, t in zip(names, short, tails, strict=True):
        if len(fulls_per_tail[t]) == 1:
            labels.append(t)
            continue
        q = _qualifier(n, s)
        labels.append(f"{t}<{q}>" if q else t)
    # still alike: number them in order of appearance, per full name
    seen: dict[str, dict[str, int]] = {}
    counts = Counter(labels)
    fulls_per_label: dict[str, set[str]] = {}
    for n, lab in zip(names, labels, strict=True):
        fulls_per_label.setdefault(lab, set()).add(n)
    out = []
    for n, lab in zip(names, labels, strict=True):
        if counts[lab] > 1 and len(fulls_per_label[lab]) > 1:
            k = seen.setdefault(lab, {}).setdefault(n, len(seen[lab]) + 1)
            out.append(f"{lab}#{k}")
        else:
            out.append(lab)
    return out
