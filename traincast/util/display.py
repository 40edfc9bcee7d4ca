"""Jupyter's display protocol for the result classes: ``_repr_html_`` as a title and a pandas
table, every string escaped. The classes build the DataFrame they show (data); this module
only turns it into HTML, so it sits below every layer like :mod:`traincast.util.fileio`."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


__all__ = ["html_scalars", "html_table"]


def html_table(title: str, df: pd.DataFrame) -> str:
    """``<div><b>title</b> table</div>``: ``title`` is escaped here, the cells by pandas;
    floats with 3 decimals."""
    table = df.to_html(index=False, escape=True, border=0,
                       float_format=lambda v: f"{v:,.3f}")
    return f"<div>{html.escape(title)}{table}</div>"


def html_scalars(title: str, values: Mapping[str, Any]) -> str:
    """:func:`html_table` of the scalar entries of ``values`` (numbers, strings, booleans,
    None; lists and dicts left out) as ``metric``/``value`` rows, in order."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    rows = [{"metric": k, "value": v} for k, v in values.items()
            if isinstance(v, int | float | str | bool) or v is None]
    return html_table(title, pd.DataFrame(rows, columns=["metric", "value"]))
