"""Keep the ``otf2`` package's own error reports off the terminal; keep their gist for ours.

The ``otf2`` package (the OTF2 reference C library and its ctypes wrapper) reports a bad
trace twice before the Python call fails: the C library prints one ``[OTF2] src/...: error:``
line per failing layer on file descriptor 2 (its default error handler), and the wrapper's
reader callbacks write the full traceback of any exception raised while converting a record
(a name that is not UTF-8: a ``UnicodeDecodeError``) to ``sys.stderr``. The reader then
raises one :class:`~traincast.errors.TraceFormatError`, which is the only line a user
should see.

:func:`quiet` installs, once per process, (1) an error callback in the C library
(``OTF2_Error_RegisterCallback``, OTF2 3.x ``otf2/OTF2_ErrorCodes.h``) that returns the
error code unchanged and prints nothing, and (2) in place of ``sys`` in the wrapper's reader
callback modules, a stand-in whose ``stderr`` keeps the text per thread. :func:`take` returns
(and clears) the last line kept on the calling thread, e.g.
``UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 6``.

Both are best-effort: with another version of the package that lacks either hook, reading
works as before and only the extra lines come back.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from types import ModuleType

__all__ = ["quiet", "take"]

_lock = threading.Lock()
_installed = False
#: the ctypes callback handed to the C library; kept alive for the life of the process
_keep: list[object] = []


class _CallbackStderr:
    """Stands in for ``sys`` in the wrapper's callback modules (they only use
    ``sys.stderr.write``): what is written is kept per thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def stderr(self) -> _CallbackStderr:
        return self

    def write(self, text: str) -> int:
        self._local.text = getattr(self._local, "text", "") + str(text)
        return len(text)

    def flush(self) -> None:
        pass

    def take(self) -> str:
        text, self._local.text = getattr(self._local, "text", ""), ""
        lines = [x.strip() for x in text.splitlines() if x.strip()]
        return lines[-1] if lines else ""


_sink = _CallbackStderr()


def _silence_c_library(lib: ctypes.CDLL) -> None:
    # OTF2_ErrorCode (*)(void* userData, const char* file, uint64_t line,
    #                    const char* function, OTF2_ErrorCode errorCode,
    #                    const char* msgFormatString, va_list va); va is never read
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64,
                             ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

    def handler(user_data, file, line, function, code, fmt, va):  # noqa: ANN001, ARG001
        return code

    cb = proto(handler)
    register = lib.OTF2_Error_RegisterCallback
    register.argtypes = [proto, ctypes.c_void_p]
    register.restype = ctypes.c_void_p
    register(cb, None)
    _keep.append(cb)


def quiet() -> None:
    """Install both hooks (once per process; the ``otf2`` package must be importable)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        try:
            # optional dependency (traincast[otf2]), already imported by the reader
            from _otf2.Config import conf

            _silence_c_library(conf.lib)
        except (ImportError, AttributeError, OSError):
            pass
        for name, mod in list(sys.modules.items()):
            if name.startswith("_otf2.") and name.endswith("Callbacks") and \
                    isinstance(getattr(mod, "sys", None), ModuleType):
                mod.sys = _sink  # type: ignore[attr-defined]


def take() -> str:
    """The last line the wrapper's callbacks wrote on this thread ('' if none); cleared."""
    return _sink.take()
