"""ScienceBoard's task files carry Python lambdas as strings (ChimeraX ``states`` checkers:
``"lambda key: key.startswith('...')"``) and ScienceBoard ``eval``s them. Task files reach this
project over its REST API, so here a lambda is parsed and only a small, side-effect-free subset
is allowed: comparisons, boolean logic, literals, indexing and slicing, arithmetic (``+ - * /
% **``), assignment expressions (``:=``, Celestia B-12's geometry), list comprehensions (GRASS
GIS's ``info`` checkers), ``any``/``all``/``abs``/``range``/``min``/``max``/``round``, the
string methods those files use, ``__import__('math')`` with :data:`MATH_NAMES` only, and
``__import__('datetime').datetime.today().strftime(...)``. Anything else is refused with a
clear error (:class:`UnsafeExpression`).

Bounds: the source's size and nesting depth; every attribute is checked on its object at run
time, not only by name; arithmetic, ``join`` and ``range`` refuse results over
:data:`MAX_LEN` items or :data:`MAX_INT_BITS`-bit integers before building them; and a call
runs at most :data:`MAX_STEPS` bytecode instructions and :data:`MAX_SECONDS` seconds
(:class:`ExpressionLimit`, a ``ValueError``: a checker's expression error fails its check, as
in ScienceBoard)."""

from __future__ import annotations

import ast
import datetime
import math
import operator
import sys
import time
import types
from collections.abc import Callable
from typing import Any

MAX_SOURCE = 4000  # characters (ScienceBoard's longest lambda: 417)
MAX_DEPTH = 60  # syntax tree nesting
MAX_LEN = 1_000_000  # items of a string or list an operation may build
MAX_INT_BITS = 4096
MAX_STEPS = 2_000_000  # bytecode instructions per call
MAX_SECONDS = 5.0
CLOCK_EVERY = 4096  # steps between looks at the clock
STRING_METHODS = frozenset({"startswith", "endswith", "split", "join", "strip", "lower",
                            "upper"})
MATH_NAMES = frozenset({"sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
                        "degrees", "radians", "hypot", "fabs", "floor", "ceil", "log",
                        "log10", "exp", "isclose", "pi", "e"})
DATETIME_NAMES = frozenset({"datetime", "today", "strftime"})
ALLOWED_METHODS = STRING_METHODS | MATH_NAMES | DATETIME_NAMES
ALLOWED_NODES = (ast.Expression, ast.Lambda, ast.arguments, ast.arg, ast.Name, ast.Load,
                 ast.Constant, ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not,
                 ast.USub, ast.UAdd, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow,
                 ast.Mod, ast.Call, ast.ListComp, ast.comprehension, ast.Store, ast.Attribute,
                 ast.Subscript, ast.Slice, ast.List, ast.Tuple, ast.IfExp, ast.NamedExpr,
                 ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn,
                 ast.Is, ast.IsNot)
BINOPS: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv), ast.Mod: ("%", operator.mod), ast.Pow: ("**", pow)}
OPS = dict(BINOPS.values())


class UnsafeExpression(ValueError):
    pass


class ExpressionLimit(UnsafeExpression):
    """An expression that went past a bound while it ran."""


MATH = types.SimpleNamespace(**{n: getattr(math, n) for n in MATH_NAMES})


def _import(name: str, *_: Any, **__: Any) -> Any:
    """``datetime`` and the :data:`MATH_NAMES` of ``math`` for the expression; ``time`` too,
    which ``strftime`` imports internally through the calling frame's builtins (its attributes
    stay out of reach of the expression)."""
    if name == "datetime":
        return datetime
    if name == "math":
        return MATH
    if name == "time":
        return time
    raise UnsafeExpression(f"import of {name!r} is not allowed")


def _sized(value: Any) -> bool:
    return isinstance(value, str | bytes | list | tuple)


def _int_bits(value: Any) -> int:
    return abs(value).bit_length() if isinstance(value, int) else 0


def _binop(symbol: str, a: Any, b: Any) -> Any:
    """``a symbol b``, refused before it builds something past the bounds."""
    if symbol == "+" and _sized(a) and _sized(b) and len(a) + len(b) > MAX_LEN:
        raise ExpressionLimit(f"'+' would build {len(a) + len(b)} items (at most {MAX_LEN})")
    if symbol == "*":
        for seq, n in ((a, b), (b, a)):
            if _sized(seq) and isinstance(n, int) and len(seq) * max(n, 0) > MAX_LEN:
                raise ExpressionLimit(f"'*' would build {len(seq) * n} items (at most "
                                      f"{MAX_LEN})")
        if _int_bits(a) + _int_bits(b) > MAX_INT_BITS:
            raise ExpressionLimit(f"'*' of integers past {MAX_INT_BITS} bits")
    if symbol == "**" and isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 \
            and (b > MAX_INT_BITS or _int_bits(a) * b > MAX_INT_BITS):
        raise ExpressionLimit(f"'**' of integers past {MAX_INT_BITS} bits")
    if symbol == "%" and not isinstance(a, int | float):
        raise UnsafeExpression(f"'%' is for numbers only, not {type(a).__name__}")
    try:
        return OPS[symbol](a, b)
    except OverflowError as exc:
        raise ExpressionLimit(f"{symbol!r} overflowed: {exc}") from exc


def _join(sep: str) -> Callable[[Any], str]:
    def join(parts: Any) -> str:
        items = list(parts)
        if len(items) > MAX_LEN or sum(len(str(p)) for p in items) + len(sep) * max(
                len(items) - 1, 0) > MAX_LEN:
            raise ExpressionLimit(f"join would build more than {MAX_LEN} characters")
        return sep.join(items)
    return join


def _attr(obj: Any, name: str) -> Any:
    """``obj.name`` where the pair is allowed: a string method, the math names, the datetime
    chain."""
    if isinstance(obj, str) and name in STRING_METHODS:
        return _join(obj) if name == "join" else getattr(obj, name)
    if obj is MATH and name in MATH_NAMES:
        return getattr(MATH, name)
    if (obj is datetime and name == "datetime") or (
            obj is datetime.datetime and name == "today") or (
            isinstance(obj, datetime.date) and name == "strftime"):
        return getattr(obj, name)
    raise UnsafeExpression(f"attribute {name!r} of {type(obj).__name__} is not allowed")


def _range(*args: int) -> range:
    found = range(*args)
    if len(found) > MAX_LEN:
        raise ExpressionLimit(f"range of {len(found)} numbers (at most {MAX_LEN})")
    return found


BUILTINS: dict[str, Any] = {"len": len, "str": str, "int": int, "float": float, "any": any,
                            "all": all, "abs": abs, "min": min, "max": max, "round": round,
                            "range": _range, "__import__": _import}
HELPERS: dict[str, Any] = {"__coda_binop__": _binop, "__coda_attr__": _attr}


class _Bound(ast.NodeTransformer):
    """Arithmetic and attributes through :func:`_binop` and :func:`_attr`."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        symbol = BINOPS[type(node.op)][0]
        return ast.copy_location(ast.Call(func=ast.Name("__coda_binop__", ast.Load()), args=[
            ast.Constant(symbol), node.left, node.right], keywords=[]), node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        return ast.copy_location(ast.Call(func=ast.Name("__coda_attr__", ast.Load()), args=[
            node.value, ast.Constant(node.attr)], keywords=[]), node)


def _depth(node: ast.AST, limit: int = MAX_DEPTH) -> int:
    stack = [(node, 1)]
    deepest = 0
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(current))
    return deepest


def _check(tree: ast.Expression, source: str) -> None:
    if not isinstance(tree.body, ast.Lambda):
        raise UnsafeExpression(f"not a lambda: {source!r}")
    if _depth(tree) > MAX_DEPTH:
        raise UnsafeExpression(f"nested deeper than {MAX_DEPTH}: {source[:200]!r}")
    bound = {a.arg for a in tree.body.args.args}
    bound |= {t.id for node in ast.walk(tree) if isinstance(node, ast.comprehension | ast.NamedExpr)
              for t in ast.walk(node.target) if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if not isinstance(node, ALLOWED_NODES):
            raise UnsafeExpression(f"{type(node).__name__} is not allowed in {source!r}")
        if isinstance(node, ast.Lambda) and node is not tree.body:
            raise UnsafeExpression(f"a lambda inside the lambda is not allowed in {source!r}")
        if isinstance(node, ast.Attribute) and node.attr not in ALLOWED_METHODS:
            raise UnsafeExpression(f"attribute {node.attr!r} is not allowed in {source!r}")
        if isinstance(node, ast.Name) and (
                (node.id.startswith("__") and node.id != "__import__")
                or (node.id not in bound and node.id not in BUILTINS)):
            raise UnsafeExpression(f"name {node.id!r} is not allowed in {source!r}")
        if isinstance(node, ast.arg) and node.arg.startswith("__"):
            raise UnsafeExpression(f"name {node.arg!r} is not allowed in {source!r}")


def _bounded(fn: Callable[..., Any], source: str) -> Callable[..., Any]:
    """``fn`` run under a tracer that stops it past :data:`MAX_STEPS` instructions or
    :data:`MAX_SECONDS` seconds."""
    def run(*args: Any) -> Any:
        steps = [0]
        deadline = time.monotonic() + MAX_SECONDS

        def local(frame: types.FrameType, event: str, arg: Any) -> Any:
            steps[0] += 1
            if steps[0] > MAX_STEPS or (steps[0] % CLOCK_EVERY == 0
                                        and time.monotonic() > deadline):
                raise ExpressionLimit(f"ran past {MAX_STEPS} steps or {MAX_SECONDS} s: "
                                      f"{source[:200]!r}")
            return local

        def tracer(frame: types.FrameType, event: str, arg: Any) -> Any:
            frame.f_trace_opcodes = True
            return local(frame, event, arg)

        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            return fn(*args)
        except (OverflowError, RecursionError, MemoryError) as exc:
            raise ExpressionLimit(f"{type(exc).__name__}: {exc}") from exc
        finally:
            sys.settrace(previous)
    return run


def compile_lambda(source: str) -> Callable[..., Any]:
    """A callable from ``"lambda ...: ..."`` text, or :class:`UnsafeExpression`."""
    source = str(source)
    if len(source) > MAX_SOURCE:
        raise UnsafeExpression(f"expression of {len(source)} characters (at most {MAX_SOURCE})")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise UnsafeExpression(f"not a Python expression: {source[:200]!r}") from exc
    _check(tree, source)
    tree = ast.fix_missing_locations(_Bound().visit(tree))
    fn = eval(compile(tree, "<task lambda>", "eval"), {"__builtins__": {**BUILTINS, **HELPERS}})
    return _bounded(fn, source)
