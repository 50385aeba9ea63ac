"""The typed seams hold (issue 38): every module of the frontier, the crawl's control plane
and the scheduler names its public API in ``__all__``, and nothing in it is typed ``Any``:
the parameters and return of each function and method, the public attributes of each class
(annotated in the class body or as ``self.name: T`` in a method), the module's public
constants, and the type aliases those use. mypy (``make lint``, pyproject.toml) checks the
bodies; this checks that what it checks against says something.

The annotations are read from the source (``ast``): ``self.x: T`` in ``__init__`` is not
kept at run time, and ``from __future__ import annotations`` leaves them strings anyway."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crawlplug/frontier", "crawlplug/crawl", "crawlplug/scheduler")
#: the feature stores moved out of the frontier (issue 38) stay held to it
STORES = (
    "crawlplug/alerts/store.py",
    "crawlplug/schedules/store.py",
    "crawlplug/scrapyd/store.py",
    "crawlplug/history/store.py",
    "crawlplug/reports/store.py",
)
MODULES = sorted([*(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")), *(ROOT / s for s in STORES)])


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        else:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            return list(ast.literal_eval(node.value))
    return None


def _defined_public(tree: ast.Module) -> set[str]:
    """The public names a module defines itself (not the ones it imports)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def _says_any(annotation: ast.expr | None, aliases: dict[str, ast.expr], seen: frozenset[str] = frozenset()) -> bool:
    """``annotation`` is, or contains, ``Any`` (``typing.Any``, a string of it, or a type
    alias of this module that does)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            parsed = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:  # a Literal's string
            return False
        return _says_any(parsed, aliases, seen)
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Any" or isinstance(node, ast.Attribute) and node.attr == "Any":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _says_any(node, aliases, seen):
            return True
        alias = node.id if isinstance(node, ast.Name) and node.id in aliases and node.id not in seen else None
        if alias is not None and _says_any(aliases[alias], aliases, seen | {alias}):
            return True
    return False


def _function_anys(func: ast.FunctionDef | ast.AsyncFunctionDef, where: str, aliases: dict[str, ast.expr]) -> list[str]:
    args = func.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]
    found = [f"{where}({p.arg})" for p in params if _says_any(p.annotation, aliases)]
    if _says_any(func.returns, aliases):
        found.append(f"{where} -> return")
    return found


def _class_anys(cls: ast.ClassDef, where: str, aliases: dict[str, ast.expr]) -> list[str]:
    found = []
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _public(node.name):
                found += _function_anys(node, f"{where}.{node.name}", aliases)
            for stmt in ast.walk(node):  # self.name: T in any method, public or not
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Attribute)
                    and isinstance(stmt.target.value, ast.Name)
                    and stmt.target.value.id == "self"
                    and _public(stmt.target.attr)
                    and _says_any(stmt.annotation, aliases)
                ):
                    found.append(f"{where}.{stmt.target.attr}")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _public(node.target.id):
            if _says_any(node.annotation, aliases):
                found.append(f"{where}.{node.target.id}")
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            found += _class_anys(node, f"{where}.{node.name}", aliases)
    return found


def public_anys(path: Path) -> list[str]:
    """Each place ``Any`` stands in the public signatures of the module at ``path``."""
    tree = ast.parse(path.read_text())
    exported = set(_declared_all(tree) or ())
    aliases: dict[str, ast.expr] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, (ast.Subscript, ast.BinOp, ast.Attribute, ast.Name))
        ):
            aliases[node.targets[0].id] = node.value  # a type alias (or a constant: it says no Any)
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.value is not None
            and isinstance(node.annotation, ast.Name)
            and node.annotation.id == "TypeAlias"
        ):
            aliases[node.target.id] = node.value
    found: list[str] = []
    for node in tree.body:
        name = getattr(node, "name", None) or getattr(getattr(node, "target", None), "id", None)
        if name not in exported:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += _function_anys(node, name, aliases)
        elif isinstance(node, ast.ClassDef):
            found += _class_anys(node, name, aliases)
        elif isinstance(node, ast.AnnAssign) and _says_any(node.annotation, aliases):
            found.append(name)
    for name in sorted(exported & aliases.keys()):
        if _says_any(aliases[name], aliases, frozenset({name})):
            found.append(f"{name} (an alias)")
    return found


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_a_module_names_its_public_api(path):
    """A module that defines public names lists in ``__all__`` those others may use."""
    tree = ast.parse(path.read_text())
    declared = _declared_all(tree)
    if declared is None:
        assert not _defined_public(tree) - {"logger"}, f"{_rel(path)} defines public names but no __all__"
        return
    missing = [name for name in declared if name not in _defined_public(tree) and not _imported(tree, name)]
    assert not missing, f"{_rel(path)}: __all__ names what the module does not have: {missing}"


def _imported(tree: ast.Module, name: str) -> bool:
    return any(
        (alias.asname or alias.name).split(".")[0] == name
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    )


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_any_in_a_public_signature(path):
    """``Any`` says nothing mypy can check: ``object`` is the type of "whatever it is"."""
    assert public_anys(path) == []


def test_the_check_sees_any_where_it_stands(tmp_path):
    """The walker finds ``Any`` in each place a public signature can hold it, and only there."""
    module = tmp_path / "m.py"
    module.write_text(
        "from __future__ import annotations\n"
        "from typing import Any\n"
        "import typing\n"
        "__all__ = ['f', 'C', 'Row', 'LIMIT', 'g']\n"
        "Row = dict[str, Any]\n"
        "_Private = list[Any]\n"
        "LIMIT: Any = 3\n"
        "def f(a: int, *rest: 'Any', **kw: Row) -> typing.Any: ...\n"
        "def g(a: _Private) -> None: ...\n"
        "def hidden(a: Any) -> Any: ...\n"
        "class C:\n"
        "    size: Any\n"
        "    def __init__(self, x: int) -> None:\n"
        "        self.public: Any = x\n"
        "        self._own: Any = x\n"
        "    def _helper(self, y: Any) -> Any: ...\n"
        "    def method(self, y: list['Any']) -> None: ...\n"
    )
    assert public_anys(module) == [
        "LIMIT",
        "f(rest)",
        "f(kw)",
        "f -> return",
        "g(a)",
        "C.size",
        "C.public",
        "C.method(y)",
        "Row (an alias)",
    ]
