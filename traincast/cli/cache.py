"""``traincast cache info|clear``: what the parse cache holds, and emptying it
(:mod:`traincast.trace.cache`, :mod:`traincast.trace.cache_size`)."""

from __future__ import annotations

import json
import time

import typer

from traincast.cli.options import Format, FormatOpt

cache_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="The parse cache: what it holds, and emptying it.")


def _size(n: int | None) -> str:
    if n is None:
        return "none"
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:,.1f} {unit}"
    return f"{n:,} B"


@cache_app.command("info")
def cache_info(format: FormatOpt = Format.table) -> None:
    """The cache folder, its entries, bytes and cap ($TRAINCAST_CACHE_MAX)."""
    # lazy: pyarrow and the readers (CLI start-up time)
    from traincast.trace.cache import CACHE_SCHEMA, cache_dir
    from traincast.trace.cache_size import info  # lazy, as the line above

    d = info(cache_dir(), CACHE_SCHEMA)
    if format is Format.json:
        typer.echo(json.dumps(d, indent=2))
        return
    if d["folder"] is None:
        typer.echo("parse cache: off (TRAINCAST_CACHE_DIR)")
        return
    typer.echo(f"parse cache: {d['folder']}")
    if not d["exists"]:
        typer.echo("  empty (the folder does not exist yet)")
        return

    def when(t: float | None) -> str:
        return "-" if t is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

    typer.echo(f"  {d['trace_entries']:,} trace files and {d['job_entries']:,} whole jobs, "
               f"{_size(d['bytes'])} (cap {_size(d['max_bytes'])}, TRAINCAST_CACHE_MAX)")
    graphs = d.get("graph_entries", 0)
    if graphs:
        typer.echo(f"  {graphs:,} execution graph{'s' if graphs != 1 else ''} of whole jobs "
                   "(a second run skips the build)")
    if d["other_schema_bytes"]:
        typer.echo(f"  {_size(d['other_schema_bytes'])} written by another traincast version "
                   "(deleted at the next write)")
    typer.echo(f"  used from {when(d['oldest_use'])} to {when(d['newest_use'])}")


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete the cache folder (every entry; the next load parses the traces again)."""
    from traincast.trace.cache import cache_dir, clear  # lazy: CLI start-up time

    root = cache_dir()
    if root is None:
        typer.echo("parse cache: off (TRAINCAST_CACHE_DIR): nothing to clear")
        return
    typer.echo(f"parse cache: {root}: {_size(clear(root))} freed")
