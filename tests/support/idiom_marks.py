"""Which tests prove which idiom-catalog rows (shared by tests, scripts/update_guide.py and
the documentation site's source pages).

A row is proven by ``tests/parity/test_catalog.py`` when it runs as written
(``Idiom.runs``), and by every test marked ``@pytest.mark.idiom("row-id")``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from torch2jax_device.porting import catalog

ROOT = Path(__file__).resolve().parents[2]
CATALOG_TEST = "tests/parity/test_catalog.py"


def _idiom_ids(node: ast.AST) -> list[str]:
    """The ids of every ``<...>.idiom("row-id")`` call under ``node``, in source order."""
    return [
        str(call.args[0].value)
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "idiom"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    ]


def marks_by_statement(source: str) -> list[tuple[int, list[str]]]:
    """For each top-level statement carrying ``idiom`` marks: its first line (decorators
    included, 1-based) and the ids it marks.

    Examples:
        >>> marks_by_statement("x = 1\\n@pytest.mark.idiom('a')\\ndef test_a(): pass\\n")
        [(2, ['a'])]
    """
    found = []
    for statement in ast.parse(source).body:
        ids = list(dict.fromkeys(_idiom_ids(statement)))
        if ids:
            decorators = getattr(statement, "decorator_list", [])
            found.append((min([statement.lineno] + [d.lineno for d in decorators]), ids))
    return found


def marked_tests(root: Path = ROOT) -> dict[str, list[str]]:
    """Idiom id -> test files (relative to ``root``) that carry its ``idiom`` mark."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        relative = path.relative_to(root).as_posix()
        for idiom_id in _idiom_ids(ast.parse(path.read_text())):
            files = found.setdefault(idiom_id, [])
            if relative not in files:
                files.append(relative)
    return found


def proofs(root: Path = ROOT) -> dict[str, list[str]]:
    """Idiom id -> every test file that proves it, the generic catalog test first."""
    marked = marked_tests(root)
    return {
        idiom.id: ([CATALOG_TEST] if idiom.runs else []) + marked.get(idiom.id, [])
        for idiom in catalog.CATALOG
    }
