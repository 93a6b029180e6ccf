"""Which tests prove which idiom-catalog rows (shared by tests and scripts/update_guide.py).

A row is proven by ``tests/parity/test_catalog.py`` when it runs as written
(``Idiom.runs``), and by every test marked ``@pytest.mark.idiom("row-id")``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from torch2jax_device.porting import catalog

ROOT = Path(__file__).resolve().parents[2]
CATALOG_TEST = "tests/parity/test_catalog.py"


def marked_tests(root: Path = ROOT) -> dict[str, list[str]]:
    """Idiom id -> test files (relative to ``root``) that carry its ``idiom`` mark."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        relative = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "idiom"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                files = found.setdefault(str(node.args[0].value), [])
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
