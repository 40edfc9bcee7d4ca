"""A package that is also the function of the same name on ``traincast``'s face.

``traincast.plan(model, system, layout)`` and ``traincast.predict(ts)`` are functions, and
``traincast.plan`` / ``traincast.predict`` are packages: importing any submodule
(``traincast.plan.spec``) binds the package as the attribute of ``traincast``, hiding the
function. :func:`make_callable` gives the package module a ``__call__`` that forwards to the
function (Python's documented way to customise module attribute access: the data model,
"Customizing module attribute access", assigning ``__class__`` of a module).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


def make_callable(package: str, module: str, function: str) -> None:
    """Make the imported package ``package`` callable as ``module.function``.

    Args:
        package: the package's ``__name__`` (it must be in ``sys.modules``).
        module: the module defining the function, imported on the first call (so the
            package itself stays cheap to import).
        function: the function's name in ``module``.
    """

    class CallablePackage(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(module), function)(*args, **kwargs)

    CallablePackage.__doc__ = f"The package {package}, callable as {module}.{function}."
    sys.modules[package].__class__ = CallablePackage
