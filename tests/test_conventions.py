"""One shape for each thing, checked over the source tree (what ruff cannot check):

* Typer parameters are ``Annotated[..., typer.Option(...)]``, never a ``typer.Option(...)``
  default;
* no ``contextlib.suppress(Exception)`` / ``suppress(BaseException)``: it swallows any error (a
  bug, a lost report) and a cancellation; catch the types meant and log them (ruff's BLE001
  does the same for ``except Exception``);
* tests wait on state through :mod:`tests.fixtures.waiting` only: no loop of their own that
  sleeps and polls;
* tests build their screenshots with :mod:`tests.fixtures.images` only;
* a set of statuses is spelled in SQL in :mod:`master.db.statuses` only (from the enums);
  migrations, frozen history, keep theirs;
* the text and pixel bounds (``10_000``, ``16_384``) are written in :mod:`coda.bounds` only;
* an application adapter that is a package (``worker/tasks/adapters/<app>/``) keeps its code in
  named modules: its ``__init__.py`` is a docstring saying what each module holds;
* no module of the installed packages (benchmarks/ and tests/ aside, as in the import
  contracts) passes :data:`MAX_MODULE_LINES` lines: a module that grows past it is split by
  what it holds (as ``worker/providers/vsphere/`` is);
* the master's SQL lives in :mod:`master.repos` (its query plumbing in :mod:`master.db`, the
  schema's history in ``master/migrations``): no other module of the master holds SQL text.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from coda.contracts.records import BatchStatus, EpisodeStatus, JobStatus
from coda.contracts.training import GroupStatus

ROOT = Path(__file__).resolve().parents[1]
CODE = [p for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name != "tests"]
TESTS = ROOT / "tests"
WAITING = TESTS / "fixtures" / "waiting.py"
IMAGES = TESTS / "fixtures" / "images.py"
MAX_MODULE_LINES = 550
ADAPTERS = ROOT / "worker" / "tasks" / "adapters"
ADAPTER_INIT_PENDING: set[str] = set()
"""Adapter packages whose ``__init__.py`` still holds the adapter (none now: every adapter is
in named modules)."""


def trees(*folders: Path) -> Iterator[tuple[str, ast.AST]]:
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def dotted(node: ast.AST) -> str:
    """``a.b.c`` of a name or attribute chain ('' for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def test_typer_parameters_are_annotated() -> None:
    bad = []
    for where, tree in trees(*CODE, TESTS):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defaults = node.args.defaults + [d for d in node.args.kw_defaults if d]
                bad += [f"{where}:{d.lineno} {node.name}" for d in defaults
                        if isinstance(d, ast.Call) and dotted(d.func) in (
                            "typer.Option", "typer.Argument", "Option", "Argument")]
    assert not bad, "typer.Option/Argument as a default (use Annotated[...]):\n" + "\n".join(bad)


def test_nothing_suppresses_every_exception() -> None:
    bad = []
    for where, tree in trees(*CODE, TESTS):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and dotted(node.func).endswith("suppress") and any(
                    dotted(a) in ("Exception", "BaseException") for a in node.args):
                bad.append(f"{where}:{node.lineno}")
    assert not bad, "suppress(Exception | BaseException) (catch the types meant, log them):\n" \
        + "\n".join(bad)


def _sleeps(loop: ast.AST) -> list[int]:
    """Lines of the sleeps (not ``sleep(0)``, a yield to the event loop) inside a loop."""
    return [n.lineno for n in ast.walk(loop)
            if isinstance(n, ast.Call) and dotted(n.func).split(".")[-1] == "sleep"
            and not (n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == 0)]


def test_tests_wait_through_the_waiting_module() -> None:
    bad = []
    for where, tree in trees(TESTS):
        if where == str(WAITING.relative_to(ROOT)):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.While | ast.For | ast.AsyncFor):
                bad += [f"{where}:{line}" for line in _sleeps(node)]
    assert not bad, "a polling loop in a test (use tests.fixtures.waiting.wait_for / " \
        "wait_for_async):\n" + "\n".join(sorted(set(bad)))


def test_tests_build_images_in_one_place() -> None:
    bad = []
    for where, tree in trees(TESTS):
        if where == str(IMAGES.relative_to(ROOT)):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            args = [*node.args, *(k.value for k in node.keywords)]
            chunk = dotted(node.func) in ("zlib.crc32", "crc32")  # a PNG written by hand
            encoded = isinstance(node.func, ast.Attribute) and node.func.attr == "save" and any(
                isinstance(a, ast.Constant) and a.value in ("PNG", "JPEG", "WEBP") for a in args)
            if chunk or encoded:
                bad.append(f"{where}:{node.lineno}")
    assert not bad, "an image encoded outside tests/fixtures/images.py:\n" + "\n".join(bad)


STATUSES = "|".join(sorted({s.value for e in (JobStatus, EpisodeStatus, BatchStatus, GroupStatus)
                            for s in e}))
STATUS_LIST = re.compile(rf"'(?:{STATUSES})'\s*,\s*'(?:{STATUSES})'")
STATUS_SQL = ROOT / "master" / "db" / "statuses.py"
MIGRATIONS = ROOT / "master" / "migrations" / "versions"


def test_status_sets_are_spelled_in_sql_once() -> None:
    bad = []
    for folder in CODE:
        for path in sorted(folder.rglob("*.py")):
            if path == STATUS_SQL or path.is_relative_to(MIGRATIONS):
                continue
            for no, line in enumerate(path.read_text().splitlines(), 1):
                if STATUS_LIST.search(line):
                    bad.append(f"{path.relative_to(ROOT)}:{no}")
    assert not bad, "a status set written in SQL (use master.db.statuses):\n" + "\n".join(bad)


BOUNDS = ROOT / "coda" / "bounds.py"
BOUND_VALUES = {10_000, 16_384}
OTHER_MEANINGS = {
    ("coda/inference/encoding.py", 16_384): "Qwen2.5-VL's budget of image patches",
    ("benchmarks/master_batch.py", 10_000): "the benchmark's batch size",
}


def test_bounds_are_written_in_coda_bounds_only() -> None:
    bad = []
    for where, tree in trees(*CODE):
        if where == str(BOUNDS.relative_to(ROOT)):
            continue
        bad += [f"{where}:{n.lineno} {n.value}" for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and type(n.value) is int
                and n.value in BOUND_VALUES and (where, n.value) not in OTHER_MEANINGS]
    assert not bad, "a bound written out (use coda.bounds):\n" + "\n".join(bad)


def test_no_module_passes_the_size_bound() -> None:
    too_long = {str(path.relative_to(ROOT)): lines for folder in CODE
                if folder.name != "benchmarks"
                for path in sorted(folder.rglob("*.py"))
                if "migrations/versions" not in path.as_posix()
                and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert too_long == {}, f"split these modules (at most {MAX_MODULE_LINES} lines each)"


def test_adapter_packages_keep_their_code_in_named_modules() -> None:
    crowded = []
    for init in sorted(ADAPTERS.glob("*/__init__.py")):
        body = ast.parse(init.read_text()).body
        if init.parent.name not in ADAPTER_INIT_PENDING and not (
                len(body) == 1 and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)):
            crowded.append(str(init.relative_to(ROOT)))
    assert crowded == [], "move the code into named modules (the docstring stays)"


SQL = re.compile(r"\b(select\s+.+\s+from\s|insert\s+into\s|update\s+\w+\s+set\s|delete\s+from\s"
                 r"|select\s+\d\b)", re.IGNORECASE | re.DOTALL)
SQL_HOMES = ("master/repos/", "master/db/", "master/migrations/")


def sql_outside_repos(where: str, tree: ast.AST) -> list[str]:
    """Lines of ``where`` (a master module outside :data:`SQL_HOMES`) that hold SQL text: a
    string (an f-string's text too) that reads as a statement. Docstrings are prose."""
    prose = {id(n.body[0].value) for n in ast.walk(tree)
             if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
             and n.body and isinstance(n.body[0], ast.Expr)
             and isinstance(n.body[0].value, ast.Constant)}
    return [f"{where}:{line}" for line in sorted({
        n.lineno for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose
        and SQL.search(n.value)})]


def test_the_masters_sql_lives_in_its_repositories() -> None:
    bad = []
    for where, tree in trees(ROOT / "master"):
        if not where.startswith(SQL_HOMES):
            bad += sql_outside_repos(where, tree)
    assert not bad, "SQL outside master/repos/ (move it to a repository function):\n" + \
        "\n".join(bad)


def test_the_sql_check_finds_sql() -> None:
    tree = ast.parse('"""select the rows from the docstring: prose."""\n'
                     'async def f(conn, where):\n'
                     '    """Update the row set aside."""\n'
                     '    await conn.fetch(f"select id from jobs where {where} for update")\n'
                     '    await conn.fetchval("select 1")\n'
                     '    return "insert into t (a) values ($1)"\n')
    assert sql_outside_repos("m.py", tree) == ["m.py:4", "m.py:5", "m.py:6"]
