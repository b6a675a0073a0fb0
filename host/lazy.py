"""Names a package exports from its submodules, imported on first use (PEP 562): importing the
package stays cheap (no torch, SciPy or grpc until a name that needs them is used)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(namespace: dict[str, Any], exports: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for the package whose ``globals()`` is ``namespace``: a name of
    ``exports`` (name -> submodule) is imported from its submodule and kept in the package;
    any other is an ``AttributeError`` as for a plain module."""

    def getattr_(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return getattr_
