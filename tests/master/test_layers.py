"""Revocation in the master's layers, checked over the source (as the conventions are): one
give-back serves lease expiry and a revoked token; the routes read the typed auth object of
the app's state and keep no state of their own; nothing outside the queue reaches into Redis
behind its methods. (The SQL outside ``master/repos``: ``tests/test_conventions.py``; load
shedding's route mark: ``tests/master/test_shedding.py``.)"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_conventions import dotted, trees

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "master"


def _functions(path: Path) -> dict[str, ast.AsyncFunctionDef | ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {f.name: f for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}


def _calls(node: ast.AST) -> set[str]:
    return {dotted(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}


def test_one_give_back_serves_expiry_and_revocation() -> None:
    jobs = _functions(MASTER / "jobs.py")
    assert {name for name, f in jobs.items() if "_give_back" in _calls(f)} == {
        "expire_leases", "take_back"}
    tokens = _functions(MASTER / "tokens.py")
    assert {name for name, f in tokens.items() if "jobs.take_back" in _calls(f)} == {
        "revoke", "unless_revoked"}
    settles = [name for name, f in tokens.items()
               if any(c.startswith(("job_rows.", "conn.")) for c in _calls(f))]
    assert not settles, f"master/tokens.py settles jobs itself: {settles}"


def test_routes_use_the_typed_auth_and_keep_no_state() -> None:
    bad = []
    for where, tree in trees(MASTER / "routes"):
        assert isinstance(tree, ast.Module)
        module = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Name)}
        module |= {n.target.id for n in tree.body
                   if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and dotted(node).endswith("app.state.auth"):
                bad.append(f"{where}:{node.lineno} reads request.app.state.auth")
            if isinstance(node, ast.Call) and dotted(node.func) == "isinstance" and \
                    "Auth" in ast.unparse(node.args[1]):
                bad.append(f"{where}:{node.lineno} checks the auth object's type")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    dotted(node.func.value) in module and node.func.attr in (
                        "add", "clear", "append", "update", "pop", "discard", "setdefault"):
                bad.append(f"{where}:{node.lineno} changes the module's "
                           f"{dotted(node.func.value)}")
    assert not bad, "\n".join(bad)


def test_nothing_reaches_into_redis_behind_the_queue() -> None:
    bad = []
    for where, tree in trees(MASTER):
        if where.startswith("master/queue/"):
            continue
        bad += [f"{where}:{n.lineno} {dotted(n)}" for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and n.attr == "r"
                and dotted(n.value).endswith("queue")]
    assert not bad, "the queue's Redis client used behind its methods:\n" + "\n".join(bad)
