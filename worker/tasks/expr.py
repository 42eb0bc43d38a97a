"""ScienceBoard's task files carry Python lambdas as strings (ChimeraX ``states`` checkers:
``"lambda key: key.startswith('...')"``) and ScienceBoard ``eval``s them. Task files reach this
project over its REST API, so here a lambda is parsed and only a small, side-effect-free subset
is allowed: comparisons, boolean logic, literals, indexing and slicing, ``+``, ``-``, ``%``, list
comprehensions (GRASS GIS's ``info`` checkers), ``any``/``all``/``abs``, and the string methods
those files use (plus ``__import__('datetime').datetime.today().strftime(...)``, the one
import they make). Anything else is refused with a clear error."""

from __future__ import annotations

import ast
import datetime
import time
import types
from collections.abc import Callable
from typing import Any

ALLOWED_METHODS = frozenset({"startswith", "endswith", "split", "join", "strip", "lower",
                             "upper", "replace", "datetime", "today", "strftime"})
ALLOWED_NODES = (ast.Expression, ast.Lambda, ast.arguments, ast.arg, ast.Name, ast.Load,
                 ast.Constant, ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not,
                 ast.USub, ast.BinOp, ast.Add, ast.Sub, ast.Mod, ast.Call, ast.ListComp,
                 ast.comprehension, ast.Store, ast.Attribute, ast.Subscript, ast.Slice,
                 ast.List, ast.Tuple, ast.IfExp, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt,
                 ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot)


class UnsafeExpression(ValueError):
    pass


def _import(name: str, *_: Any, **__: Any) -> types.ModuleType:
    """``datetime`` for the expression; ``time`` too, which ``strftime`` imports internally
    through the calling frame's builtins (its attributes stay out of reach of the expression)."""
    if name == "datetime":
        return datetime
    if name == "time":
        return time
    raise UnsafeExpression(f"import of {name!r} is not allowed")


BUILTINS: dict[str, Any] = {"len": len, "str": str, "int": int, "float": float, "any": any,
                            "all": all, "abs": abs, "__import__": _import}


def compile_lambda(source: str) -> Callable[..., Any]:
    """A callable from ``"lambda ...: ..."`` text, or :class:`UnsafeExpression`."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise UnsafeExpression(f"not a Python expression: {source!r}") from exc
    if not isinstance(tree.body, ast.Lambda):
        raise UnsafeExpression(f"not a lambda: {source!r}")
    params = {a.arg for a in tree.body.args.args}
    params |= {t.id for node in ast.walk(tree) if isinstance(node, ast.comprehension)
               for t in ast.walk(node.target) if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if not isinstance(node, ALLOWED_NODES):
            raise UnsafeExpression(f"{type(node).__name__} is not allowed in {source!r}")
        if isinstance(node, ast.Attribute) and node.attr not in ALLOWED_METHODS:
            raise UnsafeExpression(f"attribute {node.attr!r} is not allowed in {source!r}")
        if isinstance(node, ast.Name) and node.id not in params and node.id not in BUILTINS:
            raise UnsafeExpression(f"name {node.id!r} is not allowed in {source!r}")
    fn = eval(compile(tree, "<task lambda>", "eval"), {"__builtins__": BUILTINS})
    return fn
