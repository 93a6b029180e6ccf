"""Every public name is on the API page, with examples that render as code and run.

The API page (``docs/api.md``) renders docstrings with mkdocstrings' Google style:
``>>>`` lines render as a code block only inside an ``Examples:`` section (anywhere else
they become Markdown quotes), and Sphinx roles such as ``:func:`` are printed as they
are. ``pytest --doctest-modules`` runs the examples. A torch look-alike opens with one
fixed line naming what it stands for, ``Equivalent to `torch.cuda.mem_get_info`.``,
and gives the JAX differences under ``Note:``; which names are look-alikes comes from
the idiom catalog and from torch itself (``tj.cuda.X`` stands for ``torch.cuda.X``
when torch has one).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe
import pytest

import torch2jax_device as tj
from torch2jax_device.porting import catalog

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "api.md"
PACKAGE = "torch2jax_device"
SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|exc|data|obj|ref|const):`")
OPENING = re.compile(r"Equivalent to `([\w.]+)`")
#: Roots of the torch-side names a catalog row can map onto a tj name.
TORCH_ROOTS = ("torch", "Tensor", "Module", "safetensors")


def directives(page: Path = API_PAGE) -> list[str]:
    """The objects the API page renders: every ``::: dotted.path`` line."""
    return re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), flags=re.MULTILINE)


def _lookup(path: str) -> Any:
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            value = getattr(value, name)
        return value
    raise LookupError(path)


def _documentable(value: Any) -> bool:
    return inspect.isclass(value) or inspect.isroutine(value)


def _members(path: str, value: Any) -> Iterator[tuple[str, Any]]:
    """A rendered object and, for a module, its public names; an instance standing in
    for a torch module (``tj.backends.cuda``) contributes its public methods."""
    if not isinstance(value, types.ModuleType):
        yield path, value
        return
    for name in getattr(value, "__all__", ()):
        member = getattr(value, name)
        member_path = f"{path}.{name}"
        if _documentable(member):
            yield member_path, member
        elif type(member).__module__.startswith(PACKAGE) and not isinstance(
            member, types.ModuleType
        ):
            for method, function in inspect.getmembers(member, inspect.isroutine):
                if not method.startswith("_"):
                    yield f"{member_path}.{method}", function


def rendered() -> dict[str, Any]:
    """Path -> object for every callable or class the API page documents."""
    found: dict[str, Any] = {}
    for path in directives():
        for member_path, member in _members(path, _lookup(path)):
            if _documentable(member):
                found.setdefault(member_path, member)
    return found


def _public_paths(value: Any) -> set[str]:
    """Every public path of ``value``: ``tj.device`` and ``tj.Device`` are one class."""
    paths = set()
    for module in (tj, tj.cuda, tj.accelerator, tj.distributed):
        paths |= {f"{module.__name__}.{n}" for n in module.__all__ if getattr(module, n) is value}
    for name in tj.backends.__all__:
        backend = getattr(tj.backends, name)
        paths |= {
            f"{PACKAGE}.backends.{name}.{method}"
            for method, function in inspect.getmembers(backend, inspect.isroutine)
            if function is value
        }
    return paths


def _catalog_torch_names() -> dict[str, set[str]]:
    """tj path -> the torch names a catalog row maps onto it."""
    names: dict[str, set[str]] = {}
    for row in catalog.CATALOG:
        if row.rewrite == "rename":
            pairs = list(zip(row.torch_api, row.tj_api, strict=True))
        elif row.rewrite == "custom" and len(row.tj_api) == 1:
            pairs = [(torch_name, row.tj_api[0]) for torch_name in row.torch_api]
        else:
            continue
        for torch_name, tj_name in pairs:
            if torch_name.split(".")[0] in TORCH_ROOTS:
                path = PACKAGE + tj_name.removeprefix("tj")
                names.setdefault(path, set()).add(torch_name)
    return names


def torch_names(value: Any) -> set[str]:
    """What ``value`` is a look-alike of: catalog rows, and torch's name at the same path."""
    pytest.importorskip("torch")
    by_catalog = _catalog_torch_names()
    names: set[str] = set()
    for path in _public_paths(value):
        names |= by_catalog.get(path, set())
        torch_path = "torch" + path.removeprefix(PACKAGE)
        try:
            _lookup(torch_path)
        except (AttributeError, LookupError):
            continue
        names.add(torch_path)
    return names


def problems(doc: str | None, expected_torch: set[str]) -> list[str]:
    """What keeps a docstring from meeting the rules (empty when it does)."""
    if not doc:
        return ["no docstring"]
    found = []
    sections = griffe.Docstring(inspect.cleandoc(doc), parser="google").parse()
    examples = [s for s in sections if s.kind is griffe.DocstringSectionKind.examples]
    if not examples:
        found.append("no Examples: section")
    outside = [s for s in sections if s.kind is not griffe.DocstringSectionKind.examples]
    if any(">>>" in str(getattr(s.value, "contents", s.value)) for s in outside):
        found.append(">>> outside the Examples: section (renders as a quote)")
    runnable = [
        example
        for example in doctest.DocTestParser().get_examples(doc)
        if not example.options.get(doctest.SKIP)
    ]
    if not runnable:
        found.append("no doctest that runs")
    if SPHINX_ROLE.search(doc):
        found.append("Sphinx role (write [`name`][path] instead)")
    if expected_torch:
        opening = OPENING.match(inspect.cleandoc(doc))
        if opening is None or opening.group(1) not in expected_torch:
            choices = " or ".join(f"`{name}`" for name in sorted(expected_torch))
            found.append(f"does not open with 'Equivalent to {choices}.'")
    return found


def _params() -> list[Any]:
    return [
        pytest.param(path, value, id=path.removeprefix(PACKAGE + "."))
        for path, value in sorted(rendered().items())
    ]


@pytest.mark.parametrize(("path", "value"), _params())
def test_docstring_follows_the_rules(path: str, value: Any) -> None:
    assert problems(value.__doc__, torch_names(value)) == [], path


def test_every_public_name_is_on_the_api_page() -> None:
    shown = rendered().values()
    pages = directives()
    missing = []
    for name in tj.__all__:
        value = getattr(tj, name)
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            covered = any(p == value.__name__ or p.startswith(value.__name__ + ".") for p in pages)
        elif _documentable(value):
            covered = any(value is other for other in shown)
        else:
            covered = f"{PACKAGE}.{name}" in pages
        if not covered:
            missing.append(name)
    assert missing == [], "add a ::: line to docs/api.md"


@pytest.mark.parametrize(
    ("doc", "expected", "problem"),
    [
        (None, set(), "no docstring"),
        ("Summary.\n\n>>> 1\n1\n", set(), ">>> outside the Examples: section"),
        ("Summary.\n\nExamples:\n    >>> f()  # doctest: +SKIP\n", set(), "no doctest that runs"),
        ("See :func:`f`.\n\nExamples:\n    >>> 1\n    1\n", set(), "Sphinx role"),
        ("Summary.\n\nExamples:\n    >>> 1\n    1\n", {"torch.f"}, "Equivalent to `torch.f`"),
        ("Equivalent to `torch.g`.\n\nExamples:\n    >>> 1\n    1\n", {"torch.f"}, "open"),
    ],
)
def test_the_rules_can_fail(doc: str | None, expected: set[str], problem: str) -> None:
    assert any(problem in found for found in problems(doc, expected))
    assert problems("Equivalent to `torch.f`.\n\nExamples:\n    >>> 1\n    1\n", {"torch.f"}) == []


def test_look_alikes_come_from_the_catalog_and_torch() -> None:
    assert torch_names(tj.cuda.mem_get_info) == {"torch.cuda.mem_get_info"}
    assert torch_names(tj.device) == {"torch.device"}
    assert "Tensor.to" in torch_names(tj.to_device)
    assert torch_names(tj.backends.cuda.is_built) == {"torch.backends.cuda.is_built"}
    assert torch_names(tj.distributed.get_local_rank) == set()  # os.environ is not torch
    assert torch_names(tj.live_arrays) == set()
