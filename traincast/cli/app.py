"""The ``traincast`` typer app: every command registered in the order ``--help`` lists them,
and :func:`main`, the console-script entry point.

Exit codes: 0 success, 2 bad input or usage (one line on stderr naming the file and the
problem, no traceback), 1 an internal error.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import warnings

import typer

from traincast import __version__
from traincast.cli import coercion, collector
from traincast.cli.analyze import analyze
from traincast.cli.cache import cache_app
from traincast.cli.calibrate import calibrate_app
from traincast.cli.convert import convert
from traincast.cli.demo import demo
from traincast.cli.diff import diff
from traincast.cli.kernels import bench, fit
from traincast.cli.plan import plan_app
from traincast.cli.predict import predict
from traincast.cli.record import CONTEXT as RECORD_CONTEXT
from traincast.cli.record import record
from traincast.errors import TraincastError, TraincastWarning
from traincast.report.wrap import wrap_prose
from traincast.util.allocator import arrow_small_pages

#: commands that start the user's training script: its processes inherit this one's
#: environment, which :func:`~traincast.util.allocator.arrow_small_pages` would change
_RUNS_TRAINING = frozenset({"record", "demo"})


def _list_type_plainly() -> None:
    """Help shows a repeatable value as ``<path>...`` instead of typer's ``<list[Path]>``
    (typer >= 0.20 names the Python annotation); other types as typer shows them."""
    param = getattr(getattr(typer, "core", None), "_TyperParameter", None)
    original = getattr(param, "display_type", None)
    if original is None or getattr(original, "_traincast", False):
        return

    def display_type(self, ctx):  # noqa: ANN001, ANN202 - typer's own signature
        label = original(self, ctx)
        m = re.fullmatch(r"<list\[(\w+)\]>", label)
        return f"<{m.group(1).lower()}>..." if m else label

    display_type._traincast = True  # type: ignore[attr-defined]
    param.display_type = display_type


_list_type_plainly()
coercion.install()  # typer converts values without pydantic where the result is known

def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True,
                                       callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    """Execution traces of (distributed) ML training -> analyses and a calibrated
    performance model."""


def version() -> None:
    """Print the version."""
    typer.echo(__version__)


#: every command in the order ``--help`` lists them: (name, command function or sub-app,
#: settings of ``app.command``)
_COMMANDS: tuple[tuple[str, object, dict], ...] = (
    ("predict", predict, {}),
    ("demo", demo, {}),
    ("analyze", analyze, {}),
    ("record", record, {"context_settings": RECORD_CONTEXT}),
    ("diff", diff, {}),
    ("calibrate", calibrate_app, {}),
    ("plan", plan_app, {}),
    ("cache", cache_app, {}),
    ("convert", convert, {}),
    ("bench", bench, {}),
    ("fit", fit, {}),
    ("version", version, {}),
)


def make_app(only: str | None = None) -> typer.Typer:
    """The ``traincast`` app with every command, or with the command ``only`` alone (none
    for ``""``).

    typer turns every registered command into a click command (evaluating each parameter's
    annotation) on every start, ~40 ms for all of them; :func:`main` builds the one the
    command line names, which parses, helps and fails as in the whole app."""
    new = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                      context_settings={"help_option_names": ["-h", "--help"]},
                      help="Execution traces of (distributed) ML training -> analyses and a "
                           "calibrated performance model.")
    new.callback()(_root)
    for name, target, settings in _COMMANDS:
        if only is not None and name != only:
            continue
        if isinstance(target, typer.Typer):
            new.add_typer(target, name=name)
        else:
            new.command(**settings)(target)
    return new


app = make_app()


def _app_for(args: list[str]) -> typer.Typer:
    """The app for the command line ``args``: the named command's alone when the first
    argument is a command's name (no option of the root before it), none for ``--version``
    first, else (help, usage errors, suggestions, shell completion) the whole app."""
    if not args or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return app
    if args[0] in ("--version", "-V"):  # eager: printed before any command is looked up
        return make_app(only="")
    if args[0] in {name for name, _, _ in _COMMANDS}:
        return make_app(only=args[0])
    return app


#: C0/C1 control characters, newline and tab included: a line on stderr stays one line, and a
#: file name holding ESC sequences (OSC 52 writes the clipboard) cannot reach the terminal raw
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _plain(text: object) -> str:
    """``text`` on one line, control characters shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning bad input into one line and exit code 2.

    Usage errors are reported by click itself (usage line, exit code 2). traincast's warnings
    (:class:`~traincast.errors.TraincastWarning`) print as one line each
    (``traincast: warning: ...``) on stderr when the command ends; the libraries' own warnings
    (a pandas ``FutureWarning``, torch's) are counted in one line and shown, with their origin,
    only with ``TRAINCAST_VERBOSE=1``; control
    characters (newlines included) shown as ``\\xNN``; when it fails
    on bad input, the error line is printed alone (the warnings before it only with
    ``TRAINCAST_VERBOSE=1``, the error still last), so a script reads one line.

    Called as the program (``argv`` None: the console script and ``python -m traincast.cli``,
    whose process ends when it returns), the garbage collector skips the objects of the
    imports and of the run once they are made (:mod:`traincast.cli.collector`).
    """
    if argv is None:
        collector.as_program()
        if not set(sys.argv[1:2]) & _RUNS_TRAINING:  # a recorded run keeps its environment
            arrow_small_pages()  # before pyarrow starts (its pool reads the setting once)
        try:
            return _main(argv)
        finally:
            collector.before_exit()
    return _main(argv)


def _drop_early_workers() -> None:
    """Stop the parse workers a command started ahead of a load it did not make (it failed
    before): :func:`traincast.trace.parse_server.drop_early`, if that module was loaded."""
    server = sys.modules.get("traincast.trace.parse_server")
    if server is not None:
        server.drop_early()


def _main(argv: list[str] | None) -> int:
    """:func:`main`'s body."""
    held: list[str] = []
    foreign: list[str] = []
    verbose = os.environ.get("TRAINCAST_VERBOSE", "") not in ("", "0")

    def one_line(message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: object = None, line: str | None = None) -> None:
        if issubclass(category, TraincastWarning):
            held.append(f"traincast: warning: {_plain(message)}")
        else:  # a library's own warning (pandas FutureWarning, torch ...): not traincast's
            foreign.append(f"warning ({category.__name__}, {_plain(filename)}:{lineno}): "
                           f"{_plain(message)}")

    def flush() -> None:
        # on a terminal, wrapped at spaces to its width; else one line per warning (scripts)
        width = shutil.get_terminal_size((80, 24)).columns if sys.stderr.isatty() else 0
        for w in held + (foreign if verbose else []):
            typer.echo("\n".join(wrap_prose(w, width, indent="  ", first="")) if width else w,
                       err=True)
        if foreign and not verbose:
            typer.echo(f"traincast: {len(foreign)} warning{'s' if len(foreign) > 1 else ''} of "
                       "the libraries it uses hidden (TRAINCAST_VERBOSE=1 shows them)",
                       err=True)
        held.clear()
        foreign.clear()

    warnings.showwarning = one_line  # type: ignore[assignment]
    try:
        try:
            chosen = _app_for(list(sys.argv[1:] if argv is None else argv))
            chosen(args=argv, prog_name="traincast", standalone_mode=True)
        finally:
            _drop_early_workers()
    except TraincastError as exc:
        if verbose:
            flush()
        typer.echo(f"traincast: error: {_plain(exc)}", err=True)
        return 2
    except SystemExit as exc:  # click's standalone mode ends with sys.exit
        code = exc.code
        code = code if isinstance(code, int) else (0 if code is None else 1)
        if code == 0:
            flush()
        return code
    except BaseException:
        flush()  # a bug: what was noticed before it helps to read the traceback
        raise
    flush()
    return 0
