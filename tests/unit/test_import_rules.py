"""DESIGN.md's import rules, checked on the source: nothing imports ``workers/``; the core imports nothing
from ``workflows/`` or ``activities/``; workflows — and the contract they share with activities — import
no I/O library, so they run in Temporal's sandbox and replay the same way every time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = {
    "__future__", "asyncio", "collections", "dataclasses", "datetime", "enum", "functools", "hashlib", "json",
    "typing",
}  # fmt: skip
CONTRACT = "switchyard.sagas"
ALLOWED = {
    "workflows": PURE | {"temporalio", "workflows", CONTRACT},
    CONTRACT: PURE | {CONTRACT, "temporalio.exceptions"},  # how a saga's failure reads (no I/O in it)
}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


def imports(path: Path) -> set[str]:
    """Every module the file imports, anywhere in it (functions too), as written."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def within(name: str, packages: set[str]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in packages)


def offenders(packages: list[str], rule: object) -> list[str]:
    assert callable(rule)
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for package in packages
        for path in modules(package)
        for name in sorted(imports(path))
        if rule(package, name)
    ]


def test_nothing_imports_the_processes() -> None:
    found = offenders(
        ["switchyard", "workflows", "activities"], lambda _package, name: within(name, {"workers"})
    )
    assert found == []


def test_the_core_imports_no_saga_code() -> None:
    found = offenders(["switchyard"], lambda _package, name: within(name, {"workflows", "activities"}))
    assert found == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_workflows_and_their_contract_import_no_io(package: str) -> None:
    assert modules(package), f"no modules in {package}"
    found = offenders([package], lambda p, name: not within(name, ALLOWED[p]))
    assert found == []


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """Imports are read as written, inside functions too; the core's modules other than the contract
    are not allowed to workflows."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from switchyard.sagas import steps\nfrom switchyard import kafka\n\n"
        "def later():\n    import confluent_kafka\n"
    )
    found = imports(planted)
    assert found == {"switchyard.sagas", "switchyard", "confluent_kafka"}
    assert [n for n in sorted(found) if not within(n, ALLOWED["workflows"])] == [
        "confluent_kafka",
        "switchyard",
    ]
