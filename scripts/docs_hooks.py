"""mkdocs hooks: publish the repository files the documentation links to.

A page may link to a file of the repository outside ``docs/``, as the migration guide
links each idiom to the tests that prove it (``../tests/parity/test_devices.py#device-select``).
Such a link works in a repository browser; on the site, this hook makes each linked file
a page under ``source/`` (its code, with line numbers and an anchor named after each
idiom at the test that proves it) and points the link there, so that ``mkdocs build
--strict`` checks these links and anchors like every other one.

The guide's pages stack each idiom's PyTorch, plain JAX and torch2jax_device code
blocks (``title="PyTorch"`` ...); ``on_page_markdown`` turns each such run into content
tabs (``pymdownx.tabbed``), so a reader sees one at a time and the page scrolls a third
as far. The Markdown in the repository stays plain blocks, readable without the site.

mkdocs writes the links of ``404.html`` from the site's root path (``/assets/...``, or
``/path/assets/...`` under a ``site_url``), which breaks under another sub-path and
from ``file://``. ``on_post_build`` makes them relative to the site's root, where
``404.html`` lies: right for a missing page at the top level of the site, wherever the
site is served.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.idiom_marks import marks_by_statement, proofs  # noqa: E402

SOURCE_DIR = "source"
# An inline Markdown link whose target has no scheme: [text](target#fragment).
_LINK = re.compile(r"(\[[^\]\n]*\]\()([^)\s#:]+)(#[^)\s]*)?(\))")
# A code block titled with one of the guide's three columns, and a run of two or more.
_TABS = ("PyTorch", "plain JAX", "torch2jax_device")
_TITLES = "|".join(map(re.escape, _TABS))
_TITLED = rf'(`{{3,}})python title="(?:{_TITLES})"\n.*?\n\1\n'
_TAB_RUN = re.compile(rf"^{_TITLED}(?:\n{_TITLED})+", re.MULTILINE | re.DOTALL)
_TAB_BLOCK = re.compile(r'^(`{3,})python title="([^"]+)"\n(.*?)\n\1\n', re.MULTILINE | re.DOTALL)
_LANGUAGES = {".py": "python", ".sh": "bash", ".toml": "toml", ".yml": "yaml", ".txt": "text"}

_linked: dict[str, str] = {}  # repository path -> generated page, per build
_linked_from: dict[str, list[str]] = {}  # repository path -> pages linking to it


def _repository_file(page_src: str, target: str, docs_dir: Path) -> str | None:
    """The repository path a page's link target names, if it is a file outside docs/."""
    path = (docs_dir / posixpath.dirname(page_src) / target).resolve()
    if docs_dir in path.parents or ROOT not in path.parents or not path.is_file():
        return None
    return path.relative_to(ROOT).as_posix()


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return fence


def source_page(
    repository_path: str,
    anchors: dict[str, list[str]] | None = None,
    linked_from: Sequence[str] = (),
) -> str:
    """Markdown for the page showing ``repository_path``, with an ``<a id>`` per idiom.

    Ids in ``anchors`` (idiom id -> files proving it) go before the first statement that
    marks them, or at the top when the file proves them without a mark (the catalog test runs
    every runnable row). ``linked_from`` names the documentation pages that link here.
    """
    text = (ROOT / repository_path).read_text()
    lines = text.splitlines()
    language = _LANGUAGES.get(Path(repository_path).suffix, "text")
    fence = _fence(text)
    proven_here = [i for i, files in (anchors or {}).items() if repository_path in files]
    marked = marks_by_statement(text) if language == "python" else []
    starts = {line: ids for line, ids in marked if set(ids) & set(proven_here)}
    at_top = [i for i in proven_here if not any(i in ids for ids in starts.values())]
    parts = [
        "---\nhide: [navigation, toc]\nsearch:\n  exclude: true\n---\n",
        f"# `{repository_path}`\n",
        "This file as it is in the repository the site was built from.\n",
    ]
    if linked_from:
        here = posixpath.dirname(f"{SOURCE_DIR}/{repository_path}")
        pages = (f"[{page}]({posixpath.relpath(page, here)})" for page in linked_from)
        parts.append(f"Linked from {', '.join(pages)}.\n")
    if at_top:
        parts.append("".join(f'<a id="{i}"></a>' for i in at_top) + "\n")
    bounds = [*sorted({1, *starts}), len(lines) + 1]
    anchored: set[str] = set()  # an HTML id appears once: at the first test marking it
    for start, end in itertools.pairwise(bounds):
        ids = [i for i in starts.get(start, []) if i in proven_here and i not in anchored]
        anchored.update(ids)
        if ids:
            parts.append("".join(f'<a id="{i}"></a>' for i in ids) + "\n")
        chunk = "\n".join(lines[start - 1 : end - 1])
        parts.append(f'{fence}{language} linenums="{start}"\n{chunk}\n{fence}\n')
    return "\n".join(parts)


def on_files(files: Files, config: Any) -> Files:
    """Add a source page for every repository file a documentation page links to."""
    docs_dir = Path(config["docs_dir"]).resolve()
    _linked.clear()
    _linked_from.clear()
    for file in list(files.documentation_pages()):
        for match in _LINK.finditer(file.content_string):
            found = _repository_file(file.src_uri, match.group(2), docs_dir)
            if found is not None:
                _linked[found] = f"{SOURCE_DIR}/{found}.md"
                pages = _linked_from.setdefault(found, [])
                if file.src_uri not in pages:
                    pages.append(file.src_uri)
    anchors = proofs()
    for found, page in sorted(_linked.items()):
        content = source_page(found, anchors, _linked_from[found])
        files.append(File.generated(config, page, content=content))
    return files


def as_tabs(markdown: str) -> str:
    """``markdown`` with each run of PyTorch / plain JAX / torch2jax_device blocks as tabs.

    Examples:
        >>> print(as_tabs('```python title="PyTorch"\\nx.cuda()\\n```\\n\\n'
        ...               '```python title="torch2jax_device"\\ntj.to_device(x)\\n```\\n'))
        === "PyTorch"
        <BLANKLINE>
            ```python
            x.cuda()
            ```
        <BLANKLINE>
        === "torch2jax_device"
        <BLANKLINE>
            ```python
            tj.to_device(x)
            ```
        <BLANKLINE>
    """

    def tabs(run: re.Match[str]) -> str:
        parts = []
        for fence, title, code in _TAB_BLOCK.findall(run.group(0)):
            block = f"{fence}python\n{code}\n{fence}"
            body = "\n".join(f"    {line}" if line else "" for line in block.split("\n"))
            parts.append(f'=== "{title}"\n\n{body}\n')
        return "\n".join(parts)

    return _TAB_RUN.sub(tabs, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point links to repository files at their source pages; the guide's blocks as tabs."""
    docs_dir = Path(config["docs_dir"]).resolve()
    here = posixpath.dirname(page.file.src_uri)

    def relink(match: re.Match[str]) -> str:
        found = _repository_file(page.file.src_uri, match.group(2), docs_dir)
        if found is None or found not in _linked:
            return match.group(0)
        target = posixpath.relpath(_linked[found], here or ".")
        return f"{match.group(1)}{target}{match.group(3) or ''}{match.group(4)}"

    return as_tabs(_LINK.sub(relink, markdown))


def relative_404(html: str, root: str = "/") -> str:
    """``404.html`` with its links from the site's root path ``root`` made relative.

    Examples:
        >>> relative_404('<a href="/tutorial.html">x</a><a href="//cdn.example/x.js">')
        '<a href="tutorial.html">x</a><a href="//cdn.example/x.js">'
        >>> relative_404('<a href="/">home</a>')
        '<a href="./">home</a>'
        >>> relative_404('<a href="/docs/">home</a><link href="/docs/assets/x.css">', "/docs/")
        '<a href="./">home</a><link href="assets/x.css">'
    """
    root = "/" + root.strip("/") + "/" if root.strip("/") else "/"
    html = html.replace(f'href="{root}"', 'href="./"')
    # The root path, then anything but a second "/" (that would name a host).
    return re.sub(rf'((?:href|src)="){re.escape(root)}(?!/)', r"\1", html)


def on_post_build(config: Any) -> None:
    """Make the 404 page's links work under any sub-path and from ``file://``."""
    page = Path(config["site_dir"]) / "404.html"
    root = urlsplit(config.get("site_url") or "").path or "/"
    if page.is_file():
        html = page.read_text(encoding="utf-8")
        page.write_text(relative_404(html, root), encoding="utf-8")
