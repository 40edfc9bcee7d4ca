"""Regular expressions given by users (``--what-if speedup=REGEX=K``, ``--iteration-marker``,
``predict_from_et(step_marker=...)``), compiled for linear-time matching.

Python's :mod:`re` backtracks: ``(a+)+$`` against a 30-character name runs for minutes. These
patterns are compiled with RE2 (``google-re2``; Cox, "Regular Expression Matching Can Be Simple
And Fast", 2007; syntax: https://github.com/google/re2/wiki/Syntax), whose matching time is
linear in the text, and whose compiled program is bounded in memory (:data:`MAX_MEM` bytes).
RE2 has no backreferences or lookaround; a pattern using them is refused with a one-line
:class:`UserRegexError` rather than run unbounded.
"""

from __future__ import annotations

from typing import Any

import re2

from traincast.errors import ParameterError

__all__ = ["MAX_MEM", "MAX_PATTERN", "UserRegexError", "compile_user_regex"]

#: memory bound of one compiled pattern, bytes (RE2's ``max_mem`` option; its default is 8 MiB)
MAX_MEM = 8 << 20
#: longest pattern accepted, characters
MAX_PATTERN = 4096


class UserRegexError(ParameterError):
    """A user's regular expression that RE2 cannot compile or that exceeds the bounds."""


def compile_user_regex(pattern: str, what: str) -> Any:
    """Compile ``pattern`` with RE2 (module docstring). The object has ``search``, ``match``,
    ``fullmatch`` and ``pattern`` like a :class:`re.Pattern`.

    Args:
        pattern: the user's expression.
        what: what it is for, e.g. ``"--iteration-marker"``, for the error message.

    Raises:
        UserRegexError: too long, or not valid RE2 syntax (the message says why, e.g.
            lookaround or backreferences, which RE2 does not support).
    """
    if not isinstance(pattern, str):
        raise UserRegexError(f"{what}: a regular expression must be a string, got "
                             f"{type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise UserRegexError(f"{what}: regular expression of {len(pattern)} characters; at most "
                             f"{MAX_PATTERN}")
    opts = re2.Options()
    opts.log_errors = False  # RE2 would print its own parse error on stderr
    opts.max_mem = MAX_MEM
    try:
        return re2.compile(pattern, opts)
    except re2.error as exc:
        msg = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        raise UserRegexError(f"{what}: bad regex {pattern!r}: {msg} (RE2 syntax: "
                             "no backreferences or lookaround)") from None
