"""Regenerate the idioms of docs/migration-guide.md from the catalog.

The blocks between the ``<!-- idioms:start -->`` and ``<!-- idioms:end -->`` markers
come from ``torch2jax_device.porting.guide.to_markdown()``, each idiom linked to the
tests that prove it (the documentation site serves those files as pages, see
``scripts/docs_hooks.py``); tests/unit/test_catalog.py fails when they are stale. Run:
``.venv/bin/python scripts/update_guide.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.idiom_marks import proofs  # noqa: E402
from torch2jax_device.porting.guide import to_markdown  # noqa: E402

GUIDE = ROOT / "docs" / "migration-guide.md"
START, END = "<!-- idioms:start -->", "<!-- idioms:end -->"


def main() -> None:
    text = GUIDE.read_text()
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    idioms = to_markdown(proofs()).strip()
    GUIDE.write_text(f"{before}{START}\n{idioms}\n{END}{after}")


if __name__ == "__main__":
    main()
