"""The documentation site's checks: the link checker, and the pages of linked sources.

``scripts/test.sh`` builds the site with ``mkdocs build --strict`` and runs
``scripts/check_site.py`` on it; these tests show that the checker catches each kind of
problem and that the guide's proof links have pages and anchors to land on.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.support.idiom_marks import CATALOG_TEST, marks_by_statement, proofs
from tests.support.scripts import load_script
from torch2jax_device.porting import catalog

ROOT = Path(__file__).resolve().parents[2]


check_site = load_script("check_site")
docs_hooks = load_script("docs_hooks")
plot_benchmarks = load_script("plot_benchmarks")

_PAGE = """<html><body>
<a id="top"></a>
<a href="other/">fine</a> <a href="other/#there">fine</a> <a href="#top">fine</a>
<a href="https://example.org/missing">external: not checked</a>
<img src="assets/logo.png">
<pre><code>&gt;&gt;&gt; import torch2jax_device as tj  # code: fine</code></pre>
{extra}
</body></html>"""


def _site(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "other").mkdir()
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "logo.png").write_bytes(b"")
    (tmp_path / "index.html").write_text(_PAGE.format(extra=extra))
    (tmp_path / "other" / "index.html").write_text('<h2 id="there">x</h2><a href="../">up</a>')
    return tmp_path


def test_a_sound_site_passes(tmp_path: Path) -> None:
    assert list(check_site.problems(_site(tmp_path))) == []
    assert check_site.main([str(tmp_path)]) == 0


def test_the_checker_finds_every_kind_of_problem(tmp_path: Path) -> None:
    extra = """
    <a href="../tests/parity/test_devices.py">a file outside the site</a>
    <a href="missing/">a page that does not exist</a>
    <a href="other/#nowhere">an anchor that does not exist</a>
    <img src="assets/missing.png">
    <blockquote><p>&gt;&gt;&gt; tj.device("cpu")</p></blockquote>
    <p>See :func:`~torch2jax_device.resolve`.</p>
    <link href="/assets/style.css">
    <p>from 2<strong>31 s, and 2</strong>31 ms</p>
    <p>a <strong>bold</strong> word, and 10 <em>times</em>: fine</p>
    """
    found = list(check_site.problems(_site(tmp_path, extra)))
    expected = [
        r"\.\./tests/parity/test_devices\.py points outside the site",
        r"missing/ -> missing/index\.html does not exist",
        r"other/#nowhere -> no anchor #nowhere in other/index\.html",
        r"assets/missing\.png -> assets/missing\.png does not exist",
        r"unrendered '>>>' outside code",
        r"unrendered ':func:`' outside code",
        r"/assets/style\.css starts at the server's root",
        r"unrendered '\*\*31 s, and 2 \(a power written as \*\* in text\)' outside code",
    ]
    for pattern in expected:
        assert any(re.search(pattern, line) for line in found), (pattern, found)
    assert len(found) == len(expected)
    assert check_site.main([str(tmp_path)]) == 1


def test_a_source_page_anchors_each_idiom_at_its_test() -> None:
    path = "tests/parity/test_devices.py"
    text = (ROOT / path).read_text()
    page = docs_hooks.source_page(path, proofs(), ["migration-guide.md"])
    anchored: set[str] = set()
    for line, ids in marks_by_statement(text):
        for idiom_id in ids:
            if idiom_id in anchored:  # an id is an HTML anchor once: at its first test
                continue
            anchored.add(idiom_id)
            anchor = f'<a id="{idiom_id}"></a>\n'
            assert page.count(anchor) == 1
            after = page.split(anchor, 1)[1]
            assert after.startswith(f'\n```python linenums="{line}"\n')
    assert "Linked from [migration-guide.md](../../../migration-guide.md)." in page
    body = "\n".join(
        line for block in page.split('linenums="')[1:] for line in block.split("\n")[1:-3]
    )
    assert body.split("\n")[0] == text.split("\n")[0]


def test_the_catalog_test_page_anchors_every_runnable_row() -> None:
    page = docs_hooks.source_page(CATALOG_TEST, proofs())
    for idiom in catalog.CATALOG:
        assert (f'<a id="{idiom.id}"></a>' in page) == idiom.runs, idiom.id


def test_every_proof_link_of_the_guide_names_an_anchor_its_page_has() -> None:
    guide = "".join(path.read_text() for path in (ROOT / "docs" / "reference").glob("*.md"))
    links = re.findall(r"\]\(\.\./\.\./(tests/[^)#]+)#([^)]+)\)", guide)
    assert links, "the guide links no test"
    anchors = proofs()
    pages = {path: docs_hooks.source_page(path, anchors) for path in {path for path, _ in links}}
    missing = [(path, i) for path, i in links if f'<a id="{i}"></a>' not in pages[path]]
    assert missing == []


def test_the_home_page_example_runs() -> None:
    """The ten lines of ``docs/index.md`` run as printed (on this machine, on the CPU)."""
    page = (ROOT / "docs" / "index.md").read_text()
    code = page.split("## Ten lines", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/index.md", "exec"), namespace)
    assert namespace["device"] == namespace["weights"].device


def test_the_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's first code block runs as printed (it writes its file in the cwd)."""
    readme = (ROOT / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    tj, inputs = namespace["tj"], namespace["inputs"]
    assert tj.device_of(inputs) == namespace["device"]  # type: ignore[attr-defined]
    assert tj.device_of(namespace["tokens"]) == tj.device("cpu")  # type: ignore[attr-defined]


def test_the_404_page_links_from_the_site_root() -> None:
    html = '<link href="/assets/x.css"><a href="/">home</a><a href="/tutorial.html#a">t</a>'
    assert docs_hooks.relative_404(html) == (
        '<link href="assets/x.css"><a href="./">home</a><a href="tutorial.html#a">t</a>'
    )
    # Under a site_url with a path (SITE_URL=https://host/docs/), mkdocs writes /docs/...
    under = html.replace('"/', '"/docs/')
    for root in ("/docs/", "/docs"):
        assert docs_hooks.relative_404(under, root) == docs_hooks.relative_404(html)
    assert docs_hooks.relative_404('<script src="//cdn.example/x.js">') == (
        '<script src="//cdn.example/x.js">'
    )


def test_the_site_nav_lists_every_reference_page() -> None:
    """A new catalog section gets a generated page; the nav must show it."""
    from torch2jax_device.porting.guide import section_page

    nav = (
        (ROOT / "mkdocs.yml")
        .read_text()
        .split("\nnav:\n", 1)[1]
        .split("\nmarkdown_extensions:", 1)[0]
    )
    missing = [s for s in catalog.SECTIONS if f": {section_page(s)}\n" not in nav]
    assert missing == []
    assert (
        nav.index("tutorial.md")
        < nav.index("how-to/")
        < nav.index("concepts.md")
        < nav.index("migration-guide.md")
    )


def test_no_page_is_too_long_to_read() -> None:
    """A page over ~5,000 words is a reference nobody reads through: split it."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    too_long = {
        p.relative_to(ROOT).as_posix(): n for p in pages if (n := len(p.read_text().split())) > 5000
    }
    assert too_long == {}


def _nav() -> str:
    return (
        (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1].split("\nmarkdown_extensions:")[0]
    )


def test_every_page_is_in_the_nav_once_under_a_label_of_its_own() -> None:
    """A page left out of the menu is found by nobody; two entries called "Memory" (a
    concept page and a reference page) left readers guessing which was which, in the
    menu and in the previous/next links."""
    entries = re.findall(r"^\s*- (?:(.+?): )?([\w/.-]+\.md)$", _nav(), re.MULTILINE)
    pages = [page for _, page in entries]
    labels = [label.strip('"') for label, _ in entries if label]
    on_disk = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(set(pages)) == on_disk
    assert len(pages) == len(set(pages))
    assert sorted(label for label in labels if labels.count(label) > 1) == []


def test_the_guide_code_blocks_become_tabs_and_nothing_else_changes() -> None:
    """Each idiom's PyTorch / plain JAX / torch2jax_device blocks become one tab set, with
    the code unchanged; the rest of the page stays as generated."""
    from torch2jax_device.porting.guide import to_markdown

    for section in catalog.SECTIONS:
        page = to_markdown(section)
        tabbed = docs_hooks.as_tabs(page)
        titled = re.findall(r'^```python title="([^"]+)"$', page, re.MULTILINE)
        assert re.findall(r'^=== "([^"]+)"$', tabbed, re.MULTILINE) == titled, section
        assert 'python title="' not in tabbed, section
        code = re.findall(r'```python title="[^"]+"\n(.*?)\n```', page, re.DOTALL)
        for block in code:
            indented = "\n".join(f"    {line}" if line else "" for line in block.split("\n"))
            assert indented in tabbed, (section, block)
        outside = re.sub(r"```.*?```", "", page, flags=re.DOTALL).split()
        assert [w for w in outside if w not in tabbed] == [], section


def test_every_benchmark_result_names_its_machine_date_and_command() -> None:
    results = sorted(plot_benchmarks.RESULTS.glob("*.json"))
    assert results
    drawn = {name for name, *_ in plot_benchmarks.FIGURES.values()}
    for path in results:
        run = json.loads(path.read_text())
        assert run["machine"] and run["software"] and run["command"], path.name
        assert datetime.date.fromisoformat(run["date"]).isoformat() in path.name, path.name
        assert path.name in drawn, f"{path.name} is drawn in no figure"


def test_the_benchmark_figures_are_drawn_from_the_current_results() -> None:
    """Each committed SVG records the SHA-256 of the results file it was drawn from."""
    assert plot_benchmarks.stale() == [], "run scripts/plot_benchmarks.py (pip install matplotlib)"
    pages = (ROOT / "docs" / "benchmarks.md").read_text() + (
        ROOT / "docs" / "benchmarks-gpu.md"
    ).read_text()
    for name in plot_benchmarks.FIGURES:
        assert f"](assets/benchmarks/{name}.svg)" in pages, name


def test_a_changed_result_makes_the_figures_drawn_from_it_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results, figures = tmp_path / "results", tmp_path / "figures"
    shutil.copytree(plot_benchmarks.RESULTS, results)
    shutil.copytree(plot_benchmarks.FIGURES_DIR, figures)
    monkeypatch.setattr(plot_benchmarks, "RESULTS", results)
    monkeypatch.setattr(plot_benchmarks, "FIGURES_DIR", figures)
    assert plot_benchmarks.stale() == []
    changed = "gpu-h200-2026-11-26.json"
    (results / changed).write_text((results / changed).read_text().replace("15.9", "16.9"))
    expected = [n for n, (r, *_) in plot_benchmarks.FIGURES.items() if r == changed]
    assert plot_benchmarks.stale() == expected
    assert plot_benchmarks.main(["--check"]) == 1
    (figures / "cpu-load.svg").unlink()
    assert plot_benchmarks.stale() == [*expected, "cpu-load"]


def test_the_tutorial_exercise_starts_from_the_diff_and_its_answer_is_the_port(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The reader's one line: the two lines it replaces are what `scan --diff` leaves in
    the halfway file, and the hidden answer is the line of the port CI runs."""
    from torch2jax_device.cli import main

    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    exercise = tutorial.split("### Your turn", 1)[1].split("The result is", 1)[0]
    before, answer = re.findall(r"```python\n(.*?)\n\s*```", exercise, re.DOTALL)
    main(["scan", "--diff", str(ROOT / "examples" / "tutorial_halfway.py")])
    after_diff = [line[1:] for line in capsys.readouterr().out.splitlines() if line[:1] in " +"]
    for line in before.splitlines():
        assert line in after_diff, line
    port = (ROOT / "examples" / "tutorial_port.py").read_text()
    assert answer.strip() in port


def test_the_faq_quotes_the_messages_the_library_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FAQ answers a message by quoting it: each quote is what the library says now."""
    import jax
    import torch

    import torch2jax_device as tj
    from torch2jax_device._src import dtypes

    faq = (ROOT / "docs" / "faq.md").read_text()
    quoted = dict(re.findall(r"```text\ntj\.(\w+): (.*?)\n```", faq, re.DOTALL))
    assert sorted(quoted) == ["AlreadyInitializedError", "DtypeNarrowingWarning"]
    monkeypatch.setattr(dtypes, "_warned", set())  # the warning comes once per dtype
    with pytest.warns(tj.DtypeNarrowingWarning) as warned:
        tj.to_jax(torch.arange(3))
    assert str(warned[0].message) == quoted["DtypeNarrowingWarning"]
    jax.devices()  # JAX has started, as in the notebook
    with pytest.raises(tj.AlreadyInitializedError) as error:
        tj.configure(preallocate=False)
    started = re.search(r"\(started: [^)]*\)", str(error.value))
    assert started is not None
    assert str(error.value) == quoted["AlreadyInitializedError"].replace(
        "(started: cpu)", started.group(0)
    )
