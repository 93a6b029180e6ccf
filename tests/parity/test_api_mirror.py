"""tj's torch look-alikes take torch's spellings: the oracle of ``tests/support/api_mirror.py``.

One case per mirrored callable, found by walking tj's namespaces: its signature against
torch's (every torch keyword taken by name, torch's positional order, torch's defaults),
the calls torch's signature generates run side by side with torch on the CPU (or tj alone
where torch's side needs a GPU or a job), and no torch parameter taken and never read.
A difference is fixed in the library, or refused by name with the fix and documented on
a known-differences page (the tables of ``api_mirror`` name the heading).
"""

from __future__ import annotations

import inspect

import pytest
import torch

import torch2jax_device as tj
from tests.support import api_mirror, api_mirror_cases
from tests.unit.test_placement_known_differences import every_anchor

PAIRS = api_mirror.pairs()
COMPARED = [pair for pair in PAIRS if pair.tj_name not in api_mirror.UNCOMPARED]
#: The methods of the paired classes: compared by signature, and called on an instance of
#: each framework's class where api_mirror_cases.MEMBER_CASES makes one.
MEMBERS = api_mirror.member_pairs()


def _ids(pair: api_mirror.Pair) -> str:
    return pair.tj_name


def _expect_open(pair: api_mirror.Pair, request: pytest.FixtureRequest) -> None:
    reason = api_mirror.OPEN.get(pair.tj_name)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"requested: {reason}"))


def test_every_public_callable_is_paired_or_placed() -> None:
    assert api_mirror.unplaced() == [], (
        "new public callables: a torch twin under another name goes in api_mirror.RENAMED, "
        "none in api_mirror.NO_TWIN (with why)"
    )
    assert api_mirror.unlisted_namespaces() == [], "add them to api_mirror.NAMESPACES"


def test_no_twin_rows_are_public_and_have_no_same_named_torch_callable() -> None:
    public = api_mirror.public_callables()
    paired = {pair.tj_name for pair in PAIRS}
    assert set(api_mirror.NO_TWIN) - set(public) == set(), "no longer public: drop the rows"
    assert set(api_mirror.NO_TWIN) & paired == set(), "paired after all: drop from NO_TWIN"
    assert set(api_mirror.RENAMED) - paired == set(), "twin not found: fix RENAMED"


def test_a_new_public_callable_with_a_torch_twin_is_paired(monkeypatch: pytest.MonkeyPatch) -> None:
    def ipc_collect() -> None:
        """A stand-in for a function tj.cuda might add."""

    monkeypatch.setattr(tj.cuda, "ipc_collect", ipc_collect, raising=False)
    monkeypatch.setattr(tj.cuda, "__all__", [*tj.cuda.__all__, "ipc_collect"])
    found = {pair.tj_name: pair for pair in api_mirror.pairs()}
    assert found["cuda.ipc_collect"].torch_object is torch.cuda.ipc_collect
    assert (
        "cuda.ipc_collect" not in api_mirror_cases.CASES
    )  # so it is called with torch's spellings
    assert [
        call.label for call in api_mirror.calls(found["cuda.ipc_collect"], api_mirror.Case())
    ] == ["()"]


def test_every_pair_has_its_arguments() -> None:
    """Each compared pair's required torch parameters have values (else calls() says which)."""
    for pair in COMPARED:
        assert api_mirror.calls(pair, api_mirror_cases.case(pair)), pair


def test_tables_name_pairs_and_documented_headings() -> None:
    names = {pair.tj_name for pair in PAIRS}
    keyed = [
        *api_mirror.REFUSALS, *api_mirror.UNREAD_BY_DESIGN, *api_mirror.ACCEPTS_MORE,
        *api_mirror.SIGNATURE_DIFFERENCES,
    ]  # fmt: skip
    tables = [name for name, _ in keyed]
    tables += [*api_mirror.ERROR_CLASS_DIFFERENCES, *api_mirror.UNCOMPARED, *api_mirror.OPEN]
    tables += list(api_mirror_cases.CASES)
    assert set(tables) - names == set(), "rows for callables that are not pairs"
    headings = [
        *api_mirror.REFUSALS.values(), *api_mirror.UNREAD_BY_DESIGN.values(),
        *api_mirror.ERROR_CLASS_DIFFERENCES.values(),
    ]  # fmt: skip
    assert set(headings) - every_anchor() == set(), "no such heading on the known-differences pages"


@pytest.mark.parametrize("pair", COMPARED + MEMBERS, ids=_ids)
def test_signature_takes_torchs_spellings(
    pair: api_mirror.Pair, request: pytest.FixtureRequest
) -> None:
    _expect_open(pair, request)
    differences = [
        str(difference)
        for difference in api_mirror.signature_differences(pair)
        if (pair.tj_name, difference.parameter) not in api_mirror.SIGNATURE_DIFFERENCES
    ]
    assert differences == [], f"{pair} against {pair.torch_name}{inspect.signature(pair.tj_object)}"


@pytest.mark.parametrize("pair", COMPARED, ids=_ids)
def test_calls_in_torchs_spellings_behave_as_torchs(
    pair: api_mirror.Pair, request: pytest.FixtureRequest
) -> None:
    _expect_open(pair, request)
    found = [str(finding) for finding in api_mirror.findings(pair, api_mirror_cases.case(pair))]
    assert found == [], "\n".join(found)


CALLED_MEMBERS = [pair for pair in MEMBERS if pair.tj_name in api_mirror_cases.MEMBER_CASES]


def test_member_cases_name_member_pairs() -> None:
    assert set(api_mirror_cases.MEMBER_CASES) <= {pair.tj_name for pair in MEMBERS}


@pytest.mark.parametrize("pair", CALLED_MEMBERS, ids=_ids)
def test_methods_called_in_torchs_spellings_behave_as_torchs(pair: api_mirror.Pair) -> None:
    case = api_mirror_cases.MEMBER_CASES[pair.tj_name]
    found = [str(finding) for finding in api_mirror.findings(pair, case)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("pair", PAIRS + MEMBERS, ids=_ids)
def test_no_torch_parameter_is_taken_and_ignored(pair: api_mirror.Pair) -> None:
    unread = [
        name
        for name in api_mirror.unread_parameters(pair.tj_object)
        if (pair.tj_name, name) not in api_mirror.UNREAD_BY_DESIGN
    ]
    assert unread == [], f"{pair} never reads {unread}: honour them or refuse them by name"


def test_reduce_op_has_torchs_members() -> None:
    """Each member of torch's ReduceOp is tj's, and all_reduce takes torch's own members."""
    from torch2jax_device import distributed as dist
    from torch2jax_device._src.distributed.process_group import _op_name

    # PREMUL_SUM scales by a factor made with torch's _make_nccl_premul_sum: no JAX twin.
    names = set(torch.distributed.ReduceOp.RedOpType.__members__) - {"UNUSED", "PREMUL_SUM"}
    assert names == {name for name in vars(dist.ReduceOp) if name.isupper()}
    for name in names:
        assert _op_name(getattr(torch.distributed.ReduceOp, name)) == getattr(dist.ReduceOp, name)


def _twin(x: int, scale: int = 1) -> int:
    """torch's stand-in: its answer depends on scale."""
    return x * scale


def _oracle_findings(tj_function: object) -> list[str]:
    pair = api_mirror.Pair("twin", "twin", tj_function, _twin)
    case = api_mirror.Case(
        required={"x": api_mirror.same("3", 3)}, values={"scale": [api_mirror.same("2", 2)]}
    )
    return [finding.what for finding in api_mirror.findings(pair, case)]


def test_the_oracle_finds_a_keyword_taken_and_ignored() -> None:
    def ignores(x: int, scale: int = 1) -> int:
        del scale
        return x

    assert set(_oracle_findings(ignores)) == {"torch returned 6, tj 3"}  # by keyword and position
    assert _oracle_findings(_twin) == []


def test_the_oracle_finds_pythons_type_error_and_an_unread_parameter() -> None:
    def no_scale(x: int) -> int:
        return x

    def unread(x: int, scale: int = 1) -> int:
        return x

    assert any("unexpected keyword argument 'scale'" in what for what in _oracle_findings(no_scale))
    assert api_mirror.unread_parameters(unread) == ["scale"]
    assert api_mirror.unread_parameters(_twin) == []


@pytest.mark.parametrize("path", list(api_mirror.NAMESPACES), ids=lambda path: path or "tj")
def test_every_torch_name_is_mapped_or_refused_with_the_librarys_error(path: str) -> None:
    """The other direction: each public name of torch's namespace is tj's, or reading it
    raises tj.NoSuchAttributeError (naming the torch name and the fix), never Python's."""
    namespace = api_mirror.tj_namespace(path)
    torchs = api_mirror.resolve(api_mirror.NAMESPACES[path])
    names = [name for name in dir(torchs) if not name.startswith("_")]
    raw = [name for name in names if _pythons_attribute_error(namespace, name)]
    assert raw == [], f"tj.{path} raises Python's AttributeError for these torch names"


def _pythons_attribute_error(namespace: object, name: str) -> bool:
    try:
        getattr(namespace, name)
    except tj.NoSuchAttributeError:
        return False
    except AttributeError:
        return True
    return False
