"""Loading a Tool class by its ``"package.module:ClassName"`` name (the registry and the worker pool both do).

Its own module, not ``tools/base.py``: every tool's version (the perception cache's key) hashes the
source of the modules its class is built from, ``base.py`` among them, so a helper added there would
turn every cached observation into a miss.
"""

from __future__ import annotations

import importlib

from orchestra.errors import ToolError
from orchestra.tools.base import Tool

__all__ = ["load_tool_class"]


def load_tool_class(spec: str) -> type[Tool]:
    """The Tool subclass named by ``"package.module:ClassName"``."""
    module_name, _, class_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ToolError(f"tool {spec}: cannot import {module_name}: {e}") from e
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Tool)):
        raise ToolError(f"tool {spec}: {module_name} has no Tool class {class_name!r}")
    return cls
