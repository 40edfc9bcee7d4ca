"""The ``traincast`` command: a thin layer over the library, one module per command.

- :mod:`~traincast.cli.app`: the typer app and :func:`main` (the console script
  ``traincast = "traincast.cli:main"``; also ``python -m traincast.cli``), which builds the
  named command alone;
- :mod:`~traincast.cli.coercion`: typer's conversion of parameter values, without pydantic
  where the result is known;
- :mod:`~traincast.cli.options`: options shared by the commands, declared once;
- :mod:`~traincast.cli.output`: loading with progress and table output (analyze, diff);
- one module per command: :mod:`~traincast.cli.predict`, :mod:`~traincast.cli.demo`,
  :mod:`~traincast.cli.analyze`, :mod:`~traincast.cli.diff`,
  :mod:`~traincast.cli.calibrate`, :mod:`~traincast.cli.plan` (``plan transformer``,
  ``plan dlrm``), :mod:`~traincast.cli.convert`, :mod:`~traincast.cli.kernels`
  (``bench``, ``fit``).

Exit codes: 0 success, 2 bad input or usage (one line on stderr naming the file and the
problem, no traceback), 1 an internal error. Heavy libraries (numpy, pandas, pyarrow, rich,
torch, and pydantic through typer) are imported inside the command bodies, or not at all,
so that every start (``--help`` included) stays fast.
"""

from __future__ import annotations

from traincast.cli.app import app, main

__all__ = ["app", "main"]
