"""Jupyter's display protocol for the result classes: ``_repr_html_`` as a title and a pandas
table, every string escaped. The classes build the DataFrame they show (data); this module
only turns it into HTML, so it sits below every layer like :mod:`traincast.util.fileio`."""

from __future__ import annotations

import html

import pandas as pd

__all__ = ["html_table"]


def html_table(title: str, df: pd.DataFrame) -> str:
    """``<div><b>title</b> table</div>``: ``title`` is escaped here, the cells by pandas;
    floats with 3 decimals."""
    table = df.to_html(index=False, escape=True, border=0,
                       float_format=lambda v: f"{v:,.3f}")
    return f"<div>{html.escape(title)}{table}</div>"
