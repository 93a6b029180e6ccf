"""Check a built documentation site: no dead internal link, no unrendered markup.

Usage: ``python scripts/check_site.py SITE_DIR`` (``scripts/test.sh`` runs it on the site
``mkdocs build --strict`` just built). It reads every HTML page and fails when:

* a link or resource (``href``/``src``) inside the site names a file that does not
  exist, or an anchor that the target page does not define;
* a link starts at the server's root (``/assets/...``): it breaks when the site is
  served under a sub-path or opened from ``file://``. Every page is checked,
  ``404.html`` included;
* text outside code shows markup the renderer did not understand: a Sphinx role
  (``:func:`...```) or a doctest prompt (``>>>``, a docstring example that is not in an
  ``Examples:`` section renders as a quote), or two powers written ``2**31`` in one
  paragraph, which Markdown reads as bold between them.

mkdocs' own strict mode checks the links written in Markdown; this also covers the
links the theme and mkdocstrings generate, and what the pages finally say.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# Elements whose text is code or not shown, where ">>>" or ":func:" is fine.
_CODE = {"pre", "code", "script", "style", "textarea"}
_UNRENDERED = re.compile(r">>>|:(?:py:)?(?:func|class|meth|mod|attr|exc|data|obj|ref|const):`")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


@dataclass
class Page:
    """What one HTML page defines and refers to."""

    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)
    unrendered: list[str] = field(default_factory=list)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._open: list[str] = []
        self._text = ""  # the text just before, outside code
        self._emphasis_after_digit = False  # <strong>/<em> opened right after a digit

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (name == "id" or tag == "a"):
                self.page.ids.add(value)
            elif name in ("href", "src"):
                self.page.links.append(value)
        self._emphasis_after_digit = tag in ("strong", "em") and self._text[-1:].isdigit()
        if tag not in _VOID:
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            while self._open.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if not _CODE & set(self._open):
            self.page.unrendered += [match.group(0) for match in _UNRENDERED.finditer(data)]
            if self._emphasis_after_digit and data[:1].isdigit():  # 2**31 ... 2**31 became bold
                self.page.unrendered.append(f"**{data[:12]} (a power written as ** in text)")
            self._text = data
        self._emphasis_after_digit = False


def read_page(path: Path) -> Page:
    reader = _Reader()
    reader.feed(path.read_text(encoding="utf-8"))
    reader.close()
    return reader.page


def _target(site: Path, page: Path, link: str) -> tuple[Path, str] | None:
    """The file and anchor an internal link names; ``None`` for an external one."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc:
        return None
    if parts.path:
        path = page.parent / unquote(parts.path)
    else:
        path = page
    if path.is_dir() or parts.path.endswith("/"):
        path = path / "index.html"
    return path.resolve(), unquote(parts.fragment)


def problems(site: Path) -> Iterator[str]:
    """Every dead internal link and every piece of unrendered markup, one line each."""
    site = site.resolve()
    pages = {path.resolve(): read_page(path) for path in sorted(site.rglob("*.html"))}
    for path, page in pages.items():
        where = path.relative_to(site).as_posix()
        for link in page.links:
            if link.startswith("/") and not link.startswith("//"):
                yield f"{where}: {link} starts at the server's root (write it relative)"
                continue
            target = _target(site, path, link)
            if target is None:
                continue
            file, anchor = target
            if site not in file.parents:
                yield f"{where}: {link} points outside the site"
            elif not file.is_file():
                yield f"{where}: {link} -> {file.relative_to(site)} does not exist"
            elif anchor and file.suffix == ".html" and anchor not in pages[file].ids:
                yield f"{where}: {link} -> no anchor #{anchor} in {file.relative_to(site)}"
        for found in sorted(set(page.unrendered)):
            yield f"{where}: unrendered {found!r} outside code"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    site = Path(argv[0])
    if not (site / "index.html").is_file():
        print(f"{site} is not a built site (no index.html)", file=sys.stderr)
        return 2
    found = list(problems(site))
    for line in found:
        print(line, file=sys.stderr)
    pages = sum(1 for _ in site.rglob("*.html"))
    print(f"{pages} pages checked, {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
