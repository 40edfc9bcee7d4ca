"""``.npz`` archives as untrusted input: plain numeric arrays only, within a size limit.

:func:`read_npz` checks, before anything is inflated, that the archive's members (their sizes
as the zip directory records them) add up to at most ``max_bytes``, and that each member's
``.npy`` header (shape and dtype) fits the bytes its member holds; Python's ``zipfile`` then
inflates no member past its recorded size, so a small file cannot inflate to gigabytes. Arrays
are read with ``allow_pickle=False``: no object arrays, no code runs.
"""

from __future__ import annotations

import io
import math
import zipfile

import numpy as np
from numpy.lib import format as npy_format

#: most members (arrays) one archive may hold
MAX_MEMBERS = 4096


class NpzError(ValueError):
    """The archive is not a zip of ``.npy`` arrays, or is past the size limit; the message
    says which, in one line."""


def read_npz(data: bytes, max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive ``data`` (name without ``.npy`` -> array).

    Raises:
        NpzError: not a zip archive, more than :data:`MAX_MEMBERS` members, members
            inflating past ``max_bytes`` in all, a member whose header claims more data than
            it holds, or an array that is not plain numeric data.
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise NpzError(f"not an .npz archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise NpzError(f"{len(infos):,} arrays, more than the {MAX_MEMBERS:,} allowed")
        total = sum(i.file_size for i in infos)
        if total > max_bytes:
            raise NpzError(f"arrays inflate to {total:,} bytes, past the limit of "
                           f"{max_bytes:,}")
        out: dict[str, np.ndarray] = {}
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            try:
                with zf.open(info) as fh:
                    version = npy_format.read_magic(fh)
                    header = (npy_format.read_array_header_1_0 if version == (1, 0)
                              else npy_format.read_array_header_2_0)
                    shape, _order, dtype = header(fh)
                    need = math.prod(shape) * dtype.itemsize
                    if dtype.hasobject or need > info.file_size:
                        raise NpzError(f"array {name!r}: its header ({shape}, {dtype}) does "
                                       f"not fit its {info.file_size:,} bytes")
                with zf.open(info) as fh:
                    out[name] = npy_format.read_array(fh, allow_pickle=False)
            except NpzError:
                raise
            except Exception as exc:  # zlib, CRC, truncated or malformed .npy headers
                msg = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
                raise NpzError(f"array {name!r}: {msg}") from None
        return out
