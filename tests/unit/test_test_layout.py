"""The suite's own layout rules: a test module imports helpers from ``tests/support`` and never
from another test module (so running, moving or deleting one test file cannot break another),
and the unit tier has no benchmark-sized sweep in it (those live in ``tests/slow``)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TIERS = ("unit", "integration", "system", "interop", "spark", "slow")


def imports_of_test_modules(path: Path) -> list[str]:
    """The ``tests.<tier>...`` modules ``path`` imports (at any depth of the file)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        found += [n for n in names if n.split(".")[:2] in [["tests", t] for t in TIERS]]
    return found


def test_no_test_module_imports_another():
    offenders = {str(p.relative_to(TESTS)): imports_of_test_modules(p)
                 for p in sorted(TESTS.rglob("*.py"))}
    assert {p: m for p, m in offenders.items() if m} == {}


def test_the_checker_sees_an_import_of_a_test_module(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text("def f():\n    from tests.integration.test_cli import sluice\n"
                      "import tests.unit.test_metrics\nfrom tests.support.cluster import x\n")
    assert sorted(imports_of_test_modules(module)) == ["tests.integration.test_cli",
                                                       "tests.unit.test_metrics"]


def marks_slow(path: Path) -> bool:
    """Whether ``path`` uses ``pytest.mark.slow`` (on a test or as the module's mark)."""
    return any(isinstance(n, ast.Attribute) and n.attr == "slow"
               and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
               for n in ast.walk(ast.parse(path.read_text(), str(path))))


def test_slow_tests_are_not_in_the_unit_tier():
    assert marks_slow(TESTS / "slow" / "test_raft_sweeps.py")
    marked = [str(p.relative_to(TESTS)) for p in sorted((TESTS / "unit").rglob("test_*.py"))
              if marks_slow(p)]
    assert marked == []
