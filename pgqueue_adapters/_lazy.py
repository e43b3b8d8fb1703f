"""Lazy exports for the adapter packages: their library is imported on first use of a driver.

The registry imports an adapter package to read its ``ADAPTER``'s capabilities (which URL
schemes name it, which objects it wraps), for every adapter, whatever the user runs: that
must not import psycopg, asyncpg or SQLAlchemy. So a package imports ``ADAPTER`` at once and
everything else (driver classes, entry functions) only when first asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

__all__ = ["lazy_exports"]


def lazy_exports(package: str, modules: Sequence[str]) -> Callable[[str], object]:
    """Return a module ``__getattr__`` that imports ``package``'s exported names on first use.

    A name in the package's ``__all__`` is looked up in ``modules`` (relative to
    ``package``), in order, importing each as needed, and kept on the package afterwards.
    """

    def __getattr__(name: str) -> object:
        this = sys.modules[package]
        if name in getattr(this, "__all__", ()):
            for module_name in modules:
                module = importlib.import_module(module_name, package)
                if hasattr(module, name):
                    value = getattr(module, name)
                    setattr(this, name, value)
                    return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
