"""Solution-program helper: a restricted arithmetic evaluator (answers are formatted by orchestra.text)."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from orchestra.errors import WorldError

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS: dict[str, Callable[..., Any]] = {"abs": abs, "round": round, "int": int, "min": min, "max": max}


def safe_eval(expression: str, variables: dict[str, Any]) -> int | float:
    """Evaluate arithmetic over numbers and ``variables`` (+ - * / // %, abs/round/int/min/max only)."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise WorldError(f"bad expression {expression!r}: {e.msg}") from e

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise WorldError(f"{expression!r}: unknown variable {node.id!r}")
            value = variables[node.id]
            if type(value) not in (int, float):
                raise WorldError(f"{expression!r}: variable {node.id} is not a number: {value!r}")
            return value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _CALLS
            and not node.keywords
        ):
            return _CALLS[node.func.id](*(ev(a) for a in node.args))
        raise WorldError(f"{expression!r}: {type(node).__name__} is not allowed")

    try:
        return ev(tree)
    except ZeroDivisionError as e:
        raise WorldError(f"{expression!r}: division by zero") from e
