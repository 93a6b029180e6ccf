"""Regenerate the idiom tables of docs/migration-guide.md from the catalog.

The tables between the ``<!-- idioms:start -->`` and ``<!-- idioms:end -->`` markers
come from ``torch2jax_device.idioms.to_markdown()``; tests/test_idioms.py fails when
they are stale. Run: ``.venv/bin/python scripts/update_guide.py``.
"""

from __future__ import annotations

from pathlib import Path

from torch2jax_device import idioms

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "migration-guide.md"
START, END = "<!-- idioms:start -->", "<!-- idioms:end -->"


def main() -> None:
    text = GUIDE.read_text()
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    GUIDE.write_text(f"{before}{START}\n{idioms.to_markdown().strip()}\n{END}{after}")


if __name__ == "__main__":
    main()
