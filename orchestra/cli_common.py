"""What every `orchestra` sub-command shares: reporting an error on stderr with exit code 2."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(error: object) -> typer.Exit:
    """Print ``error`` (an exception or a message, never parsed as markup); return the Exit to raise."""
    err.print(f"[red]error:[/red] {escape(str(error))}")
    return typer.Exit(code=2)
