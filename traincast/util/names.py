"""Kernel and op names for people: the name without return type, template and call arguments
(what the terminal, the verdict's evidence and the charts show; the full name stays in the
data)."""

from __future__ import annotations

__all__ = ["short_name"]


def short_name(name: str) -> str:
    """A kernel/op name without its return type, template and call arguments, for display
    (``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
    ``at::native::vectorized_elementwise_kernel``), as HTA's ``shorten_name`` does."""
    if name.startswith(("Memcpy ", "Memset ")):  # "Memcpy DtoD (Device -> Device)"
        return name
    out, depth = [], 0
    prev = ""
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth and not (ch == ">" and prev == "-"):  # "->" is no bracket
            depth -= 1
        elif depth == 0:
            out.append(ch)
        prev = ch
    s = "".join(out).strip()
    if s.startswith("void "):
        s = s[5:]
    return s or name
