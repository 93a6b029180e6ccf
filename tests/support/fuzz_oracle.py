"""The differential fuzzer's judge: one drawn call, run through torch and through ``tj.to_device``.

Torch is the oracle: each array leaf's ``.to(...)`` runs in torch on the same data (a
comprehension over the container, as torch code moves a batch), the whole call runs
through ``tj.to_device``, and the two answers are compared part by part: the error (or
none), device, dtype, shape, values bit for bit (any NaN matches any NaN; ``-0.0`` is not
``0.0``), whether the result shares the source's memory or is the source itself, the
container's type, keys and their order, and the source left unchanged. A part that
differs is a
:class:`Finding`, unless a row of the known-differences table covers it
(``torch2jax_device.porting.known_differences``). :func:`shrink` makes a finding's draw
smaller while the same kind of difference remains, and :meth:`Finding.reproduction` is
the one line to paste.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import re
import warnings
from typing import Any

import jax
import numpy as np
import torch

import torch2jax_device as tj
from torch2jax_device.porting import known_differences
from torch2jax_device.porting.known_differences import Call, Leaf

from . import fuzz, fuzz_runs
from .fuzz import Token

# --- a whole draw ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Draw:
    """One example: its sources, the container around them (``None``: the first source
    alone), and the call's positional and keyword tokens."""

    leaves: tuple[Leaf, ...]
    tree: Any
    args: tuple[Token, ...]
    kwargs: tuple[tuple[str, Token], ...]

    def call(self, index: int) -> Call:
        return fuzz.meaning(self.args, self.kwargs, self.leaves[index], self.tree is not None)

    def expression(self) -> str:
        """``tj.to_device(...)`` as one line of Python."""
        tree = _tree_expression(self.tree, self.leaves) if self.tree is not None else None
        root = tree if tree is not None else fuzz.describe_source(self.leaves[0])
        form = self.call(0).form
        return f"tj.to_device({root}{', ' if form else ''}{form})"


def draw(rng: random.Random) -> Draw:
    args, kwargs = fuzz.draw_call(rng)
    if rng.random() < 0.55:
        return Draw((fuzz.draw_leaf(rng, in_container=False),), None, args, kwargs)
    if rng.random() < 0.1:  # Module.to
        count = rng.randint(1, 3)
        module = [fuzz.draw_leaf(rng, in_container=True, source="jax") for _ in range(count)]
        return Draw(
            tuple(module), (fuzz.MODULE, tuple(("leaf", i) for i in range(count))), args, kwargs
        )
    leaves: list[Leaf] = []
    tree = _draw_tree(rng, leaves, depth=0)
    if not leaves:
        leaves.append(fuzz.draw_leaf(rng, in_container=True))
        tree = ("list", (tree, ("leaf", 0)))
    return Draw(tuple(leaves), tree, args, kwargs)


CONFIG_VALUES = ("text", None, 3, 0.5)


def _draw_tree(rng: random.Random, leaves: list[Leaf], depth: int) -> Any:
    kind = rng.choice([*MAPPINGS, *SEQUENCES])
    size = 2 if kind in fuzz.TWO_ITEMS else rng.randint(1, 3)
    children: list[Any] = []
    for _ in range(size):
        roll = rng.random()
        if roll < 0.15 and depth < 2:
            children.append(_draw_tree(rng, leaves, depth + 1))
        elif roll < 0.25:
            children.append(("value", rng.choice(CONFIG_VALUES)))
        elif roll < 0.32 and leaves:
            children.append(("leaf", rng.randrange(len(leaves))))  # the same object again
        elif roll < 0.36 and children and children[-1][0] not in ("leaf", "value"):
            children.append(children[-1])  # the same container object again
        else:
            leaves.append(fuzz.draw_leaf(rng, in_container=True))
            children.append(("leaf", len(leaves) - 1))
    if kind in MAPPINGS:
        keys = rng.sample(fuzz.KEYS, len(children))
        return (kind, tuple(zip(keys, children, strict=True)))
    return (kind, tuple(children))


MAPPINGS, SEQUENCES = fuzz.MAPPINGS, fuzz.SEQUENCES


def build_tree(spec: Any, sources: list[Any], built: dict[int, Any] | None = None) -> Any:
    """The container ``spec`` describes; a sub-spec met twice is the same object twice."""
    built = {} if built is None else built
    tag, body = spec
    if tag == "leaf":
        return sources[body]
    if tag == "value":
        return body
    if id(spec) not in built:
        if tag in MAPPINGS:
            items = [(key, build_tree(child, sources, built)) for key, child in body]
            built[id(spec)] = MAPPINGS[tag](items)
        else:
            built[id(spec)] = SEQUENCES[tag]([build_tree(child, sources, built) for child in body])
    return built[id(spec)]


def _tree_expression(spec: Any, leaves: tuple[Leaf, ...]) -> str:
    tag, body = spec
    if tag == fuzz.MODULE:
        return f"nnx_module([{', '.join(_tree_expression(child, leaves) for child in body)}])"
    if tag == "leaf":
        return fuzz.describe_source(leaves[body])
    if tag == "value":
        return repr(body)
    if tag in MAPPINGS:
        items = ", ".join(f"{key!r}: {_tree_expression(child, leaves)}" for key, child in body)
        if tag == "dict":
            return "{" + items + "}"
        return f"{tag.split('(')[0]}({'list, ' if tag == 'defaultdict' else ''}{{{items}}})"
    items = ", ".join(_tree_expression(child, leaves) for child in body)
    if tag == "list":
        return f"[{items}]"
    if tag == "tuple":
        return f"({items},)"
    name = tag.split("(")[0]
    star = tag in fuzz.TWO_ITEMS
    return f"{name}({items})" if star else f"{name}([{items}])"


# --- running both sides ---------------------------------------------------------------------


@dataclasses.dataclass
class Answer:
    """What one side gave: a value or an error."""

    value: Any = None
    error: BaseException | None = None
    #: The error came from making torch's source (``from_numpy`` refusing), not from ``.to``.
    refused_source: bool = False

    def describe(self) -> str:
        if self.error is not None:
            return f"raised {type(self.error).__name__}: {str(self.error).splitlines()[0][:160]}"
        return f"returned {_summary(self.value)}"


def _summary(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return (
            f"{_plain(value).tolist()} {str(value.dtype).removeprefix('torch.')} on {value.device}"
        )
    if isinstance(value, jax.Array):
        return f"{np.asarray(value).tolist()} {value.dtype} on {tj.device_of(value)}"
    return " ".join(repr(value).split())[:200]


def answer(function: Any) -> Answer:
    try:
        return Answer(value=function())
    except Exception as error:
        return Answer(error=error)


def torch_answer(call: Call, draw_: Draw, index: int) -> Answer:
    """torch's ``.to`` of leaf ``index``: the call as drawn, or ``call``'s keyword form where
    a table row says tj gives another call's answer. The value is (torch's source, result);
    a source torch cannot make (``from_numpy`` refusing) raises as the call would."""
    original = draw_.call(index)
    try:
        source = fuzz.torch_source(call.leaf, fuzz.build_source(call.leaf))
    except (ValueError, TypeError) as error:
        return Answer(error=error, refused_source=True)

    def run() -> Any:
        if dataclasses.replace(call, leaf=original.leaf) == original:  # the source alone differs
            args = [fuzz.instantiate(token, "torch") for token in draw_.args]
            kwargs = {key: fuzz.instantiate(token, "torch") for key, token in draw_.kwargs}
            return source, source.to(*args, **kwargs)
        named: dict[str, Any] = {"copy": call.copy}
        if call.device is not None:
            named["device"] = fuzz.instantiate(Token("device", call.device), "torch")
        if call.dtype is not None:
            named["dtype"] = fuzz.torch_dtype(call.dtype)
        if call.memory_format is not None:
            named["memory_format"] = fuzz.instantiate(Token("format", call.memory_format), "torch")
        return source, source.to(**named)

    return answer(run)


def form_refused(draw_: Draw) -> Answer:
    """torch's answer to the drawn arguments on a plain float32 tensor: a ``TypeError``
    when torch refuses the arguments themselves, whatever the data (then every leaf, and
    a container of numbers alone, is compared with that error)."""
    args = [fuzz.instantiate(token, "torch") for token in draw_.args]
    kwargs = {key: fuzz.instantiate(token, "torch") for key, token in draw_.kwargs}
    return answer(lambda: torch.zeros(1).to(*args, **kwargs))


# --- judging -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Finding:
    """A difference no row explains: which part, at which leaf, both answers."""

    draw: Draw
    aspect: str
    path: str
    torch: str
    ours: str

    @property
    def kind(self) -> tuple[str, ...]:
        """The class of the difference, for grouping: what differs, and on what."""
        if self.aspect.startswith("error"):
            return (self.aspect, f"torch {_outcome(self.torch)}", f"tj {_outcome(self.ours)}")
        leaf = self._leaf()
        if self.aspect in ("passed through", "type", "container type"):
            return (self.aspect, leaf.source)
        call = self.draw.call(self.draw.leaves.index(leaf))
        return (self.aspect, f"{_family(leaf.dtype)} -> {_family(call.dtype or leaf.dtype)}")

    def _leaf(self) -> Leaf:
        found = re.search(r"leaf (\d+)", self.path)
        return self.draw.leaves[int(found.group(1)) if found else 0]

    def reproduction(self) -> str:
        return (
            f"{self.draw.expression()}  # {self.aspect} differs at {self.path}: "
            f"torch {self.torch}; tj {self.ours}"
        )


def _outcome(description: str) -> str:
    """``"raised TypeError: ..."`` -> ``"TypeError"``; ``"returned ..."`` -> ``"returned"``."""
    return description.split(":")[0].removeprefix("raised ").split(" ")[0]


def _family(dtype: str) -> str:
    if dtype.startswith("float8"):
        return "float8"
    if dtype in ("float16", "bfloat16"):
        return "half"
    return dtype


@dataclasses.dataclass
class Tally:
    """Counts over a run: examples, rows that applied and differences each explained."""

    examples: int = 0
    applied: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    explained: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def judge(draw_: Draw, tally: Tally | None = None) -> list[Finding]:
    """Run ``draw_`` both ways; the differences no row explains.

    Warnings are not compared: torch warns once per process (a complex value cast to
    real), tj once per dtype (64-bit data narrowed), so neither can match the other each
    time.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _judge(draw_, tally)


def _judge(draw_: Draw, tally: Tally | None) -> list[Finding]:
    sources = [fuzz.build_source(leaf) for leaf in draw_.leaves]
    before = [_snapshot(source) for source in sources]
    if draw_.tree is not None and draw_.tree[0] == fuzz.MODULE:
        root = fuzz.nnx_module(sources)
    else:
        root = build_tree(draw_.tree, sources) if draw_.tree is not None else sources[0]
    args = [fuzz.instantiate(token, "tj") for token in draw_.args]
    kwargs = {key: fuzz.instantiate(token, "tj") for key, token in draw_.kwargs}
    ours = answer(lambda: tj.to_device(root, *args, **kwargs))
    findings: list[Finding] = []
    report = _Reporter(draw_, findings, tally)
    for index, (source, snapshot) in enumerate(zip(sources, before, strict=True)):
        if snapshot is not None and not _same_bits(snapshot, _snapshot(source)):
            report("input", f"leaf {index}", "leaves its input as it was", "changed the input")
    if draw_.tree is None:
        _judge_leaf(draw_, 0, sources[0], ours, "<root>", report)
        return findings
    if draw_.tree[0] == fuzz.MODULE:
        _judge_module(draw_, sources, root, ours, report)
        return findings
    refused_form = form_refused(draw_)
    if refused_form.error is not None and isinstance(refused_form.error, TypeError):
        _compare_errors(draw_, 0, refused_form, ours, "<root>", report)
        return findings
    leaf_answers = {index: _leaf_answer(draw_, index) for index in range(len(draw_.leaves))}
    refused = [index for index, answered in leaf_answers.items() if answered.theirs.error]
    if refused or ours.error is not None:
        if not refused:
            moved_none = all(leaf.source in ("scalar", "numpy-scalar") for leaf in draw_.leaves)
            excused = any(
                "error" in row.differs
                for answered in leaf_answers.values()
                for row in answered.rows
            )
            if excused or (moved_none and isinstance(ours.error, tj.Torch2JaxDeviceError)):
                return findings  # a comprehension that calls no .to never reads the arguments
            report("error", "<root>", "moved every leaf", ours.describe())
            return findings
        theirs, rows = leaf_answers[refused[0]].theirs, leaf_answers[refused[0]].rows
        if not any("error" in row.differs for row in rows):
            _compare_errors(draw_, refused[0], theirs, ours, f"<root> (leaf {refused[0]})", report)
        return findings
    _judge_tree(draw_, draw_.tree, root, ours.value, "<root>", leaf_answers, report)
    return findings


class _Reporter:
    def __init__(self, draw_: Draw, findings: list[Finding], tally: Tally | None) -> None:
        self.draw, self.findings, self.tally = draw_, findings, tally

    def __call__(self, aspect: str, path: str, torch_says: str, ours: str) -> None:
        self.findings.append(Finding(self.draw, aspect, path, torch_says, ours))

    def explained(self, row: known_differences.Difference) -> None:
        if self.tally is not None:
            self.tally.explained[row.id] += 1


@dataclasses.dataclass
class LeafAnswer:
    """torch's side for one leaf."""

    #: The call torch's answer is compared with (the drawn one, or a row's ``instead``).
    call: Call
    #: torch's answer to it.
    theirs: Answer
    #: The rows that apply.
    rows: list[known_differences.Difference]
    #: torch's answer to the call as drawn.
    raw: Answer
    #: Whether tj may keep the source: torch keeps it for the call whose copy-or-keep tj
    #: follows (``Difference.copies_as_asked``).
    keeps: bool = True


def _leaf_answer(draw_: Draw, index: int) -> LeafAnswer:
    raw_call = draw_.call(index)
    if draw_.leaves[index].source in ("scalar", "numpy-scalar") and draw_.tree is not None:
        return LeafAnswer(raw_call, Answer(), [], Answer())  # a container's numbers pass through
    refused = form_refused(draw_)
    if isinstance(refused.error, TypeError):  # torch refuses the arguments themselves
        return LeafAnswer(raw_call, refused, [], refused)
    raw = torch_answer(raw_call, draw_, index)
    if raw.error is not None and not raw.refused_source:  # torch's .to itself raises
        return LeafAnswer(raw_call, raw, known_differences.covering(raw_call), raw)
    call, as_asked, rows = known_differences.instead(raw_call)
    if raw.refused_source and call.leaf != raw_call.leaf:  # does torch take the form at all?
        probe = torch_answer(dataclasses.replace(raw_call, leaf=call.leaf), draw_, index)
        if probe.error is not None:
            return LeafAnswer(raw_call, probe, rows, probe)
    theirs = raw if call == raw_call else torch_answer(call, draw_, index)
    if as_asked == call:
        return LeafAnswer(call, theirs, rows, raw)
    reference = raw if as_asked == raw_call else torch_answer(as_asked, draw_, index)
    keeps = reference.error is None and _keeps(*reference.value)
    return LeafAnswer(call, theirs, rows, raw, keeps)


def _judge_leaf(
    draw_: Draw,
    index: int,
    source: Any,
    ours: Answer,
    path: str,
    report: _Reporter,
    answered: LeafAnswer | None = None,
) -> None:
    answered = answered or _leaf_answer(draw_, index)
    theirs, rows, raw = answered.theirs, answered.rows, answered.raw
    if report.tally is not None:
        report.tally.applied.update(row.id for row in rows)
    excused = frozenset().union(*(row.differs for row in rows))
    path = f"{path} (leaf {index})" if path != "<root>" else path
    before = len(report.findings)
    if theirs.error is not None or ours.error is not None:
        if "error" not in excused:
            _compare_errors(draw_, index, theirs, ours, path, report)
    else:
        torch_source, torch_result = theirs.value
        _compare_arrays(
            draw_.leaves[index],
            source,
            torch_source,
            torch_result,
            ours.value,
            excused,
            path,
            report,
            may_keep=answered.keeps,
        )
    if len(report.findings) == before:
        shown = [row for row in rows if row.instead is not None and _differs(raw, theirs)]
        shown += [row for row in rows if row.differs and row not in shown]
        for row in shown:
            report.explained(row)


def _keeps(source: torch.Tensor, result: torch.Tensor) -> bool:
    """Whether torch's ``.to`` gave back its source or a tensor sharing its memory."""
    return result is source or (result.numel() > 0 and result.data_ptr() == source.data_ptr())


def _differs(raw: Answer, adjusted: Answer) -> bool:
    if (raw.error is None) != (adjusted.error is None):
        return True
    if raw.error is not None:
        return False
    return not _same_tensor(raw.value[1], adjusted.value[1])


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if (a.dtype, a.shape, a.device) != (b.dtype, b.shape, b.device):
        return False
    return a.device.type == "meta" or _same_bits(_plain(a), _plain(b))  # meta: no values


def _compare_errors(
    draw_: Draw, index: int, theirs: Answer, ours: Answer, path: str, report: _Reporter
) -> None:
    if theirs.error is None or ours.error is None:
        report("error", path, theirs.describe(), ours.describe())
        return
    from tests.parity.harness import expected_error_class

    if not isinstance(ours.error, tj.Torch2JaxDeviceError) or not isinstance(
        ours.error, expected_error_class(theirs.error)
    ):
        report("error class", path, theirs.describe(), ours.describe())


def _compare_arrays(
    leaf: Leaf,
    source: Any,
    torch_source: torch.Tensor,
    theirs: torch.Tensor,
    ours: Any,
    excused: frozenset[str],
    path: str,
    report: _Reporter,
    *,
    may_keep: bool,
) -> None:
    if not isinstance(ours, jax.Array):
        report("type", path, "a tensor", f"{type(ours).__name__}: {_summary(ours)}")
        return
    torch_says, we_say = _summary(theirs), _summary(ours)
    placement = (theirs.device.type, theirs.device.index or 0)
    device = tj.device_of(ours)
    if placement != (device.type, device.index or 0):
        report("device", path, torch_says, we_say)
    if str(theirs.dtype).removeprefix("torch.") != str(ours.dtype):
        report("dtype", path, torch_says, we_say)
        return
    if tuple(theirs.shape) != tuple(ours.shape):
        report("shape", path, torch_says, we_say)
        return
    if "values" not in excused and not _same_bits(_plain(theirs), np.asarray(ours)):
        report("values", path, torch_says, we_say)
    # tj keeps the source where torch keeps it for the call a row names instead (an int64
    # source narrowed to int32 is a copy, though .to("cpu") keeps it) and, for
    # x64-narrowing, for the call as asked (.to(float64) of float32 data copies, though
    # JAX makes it float32): ``may_keep``.
    if leaf.source == "jax":
        torch_keeps = theirs is torch_source  # immutable: the same array cannot change
        if "identity" not in excused and (ours is source) != torch_keeps:
            report(
                "identity",
                path,
                f"is the source: {torch_keeps}",
                f"is the source: {ours is source}",
            )
    elif "alias" not in excused and leaf.source in ("torch", "numpy"):
        torch_shares = theirs.data_ptr() == torch_source.data_ptr() and theirs.numel() > 0
        torch_shares = torch_shares and may_keep
        ours_shares = theirs.numel() > 0 and ours.unsafe_buffer_pointer() == _pointer(source)
        if torch_shares != ours_shares:
            report(
                "alias",
                path,
                f"shares the source's memory: {torch_shares}",
                f"shares it: {ours_shares}",
            )


def _judge_module(
    draw_: Draw, sources: list[Any], module: Any, ours: Answer, report: _Reporter
) -> None:
    """``Module.to``: torch's on a module with the same tensors as buffers, tj's on NNX."""
    tensors = [fuzz.torch_twin(np.array(source)) for source in sources]
    torch_module = fuzz.torch_module(tensors)
    args = [fuzz.instantiate(token, "torch") for token in draw_.args]
    kwargs = {key: fuzz.instantiate(token, "torch") for key, token in draw_.kwargs}
    theirs = answer(lambda: torch_module.to(*args, **kwargs))
    if theirs.error is not None or ours.error is not None:
        rows = [
            row for i in range(len(sources)) for row in known_differences.covering(draw_.call(i))
        ]
        if not any("error" in row.differs for row in rows):
            _compare_errors(draw_, 0, theirs, ours, "<root>", report)
        return
    if (ours.value is module) != (theirs.value is torch_module):
        report("identity", "<root>", "returns the module itself", f"returned {ours.value!r}")
    for index, source in enumerate(sources):
        tensor = getattr(torch_module, f"v{index}")
        name = str(tensor.dtype).removeprefix("torch.")
        if name in known_differences.NARROWED:  # x64-narrowing: torch's .to(32-bit)
            tensor = tensor.to(fuzz.torch_dtype(known_differences.NARROWED[name]))
        path = f"<root>.v{index} (leaf {index})"
        _compare_arrays(
            draw_.leaves[index],
            source,
            tensor,
            tensor,
            getattr(module, f"v{index}")[...],
            frozenset({"alias", "identity"}),  # a module's arrays are replaced in place
            path,
            report,
            may_keep=True,
        )


def _judge_tree(
    draw_: Draw, spec: Any, source: Any, ours: Any, path: str, answers: Any, report: _Reporter
) -> None:
    tag, body = spec
    if tag == "value" or (
        tag == "leaf" and draw_.leaves[body].source in ("scalar", "numpy-scalar")
    ):
        path = f"{path} (leaf {body})" if tag == "leaf" else path
        if ours is not source:
            report("passed through", path, f"leaves {source!r} as it is", f"gave {_summary(ours)}")
        return
    if tag == "leaf":
        _judge_leaf(draw_, body, source, Answer(value=ours), path, report, answers[body])
        return
    if type(ours) is not type(source):
        report("container type", path, type(source).__name__, type(ours).__name__)
        return
    if tag in MAPPINGS:
        if list(ours) != list(source):
            report("key order", path, repr(list(source)), repr(list(ours)))
            return
        if tag == "defaultdict" and ours.default_factory is not source.default_factory:
            report(
                "default_factory", path, repr(source.default_factory), repr(ours.default_factory)
            )
        for key, child in body:
            _judge_tree(draw_, child, source[key], ours[key], f"{path}[{key!r}]", answers, report)
        return
    items = [ours.first, ours.second] if tag == "Holder(dataclass)" else list(ours)
    originals = [source.first, source.second] if tag == "Holder(dataclass)" else list(source)
    if len(items) != len(originals):
        report("length", path, str(len(originals)), str(len(items)))
        return
    for position, (child, original, item) in enumerate(zip(body, originals, items, strict=True)):
        _judge_tree(draw_, child, original, item, f"{path}[{position}]", answers, report)


# --- bits -----------------------------------------------------------------------------------------


def _plain(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A tensor's values as NumPy, ml_dtypes kinds through their bits."""
    tensor = tensor.detach().resolve_conj().resolve_neg().contiguous()
    name = str(tensor.dtype).removeprefix("torch.")
    if name in ("bool", "uint8", "int8"):
        return tensor.numpy()
    if name.startswith(("uint", "bfloat", "float8")):
        unsigned = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[
            tensor.element_size()
        ]
        return tensor.view(unsigned).numpy().view(fuzz.numpy_dtype(name))
    return tensor.numpy()


def _same_bits(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.size == 0:
        return True
    bits_a = a.reshape(-1).view(np.uint8).reshape(a.size, -1)
    bits_b = b.reshape(-1).view(np.uint8).reshape(b.size, -1)
    same = (bits_a == bits_b).all(axis=1)
    if a.dtype.kind in "fcV" or fuzz.kind(a.dtype.name) in "fc":
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        with np.errstate(invalid="ignore"):
            a_wide, b_wide = a.reshape(-1).astype(wide), b.reshape(-1).astype(wide)
        nan_a = np.isnan(a_wide.real) | np.isnan(a_wide.imag)
        nan_b = np.isnan(b_wide.real) | np.isnan(b_wide.imag)
        same |= nan_a & nan_b
    return bool(same.all())


def _snapshot(source: Any) -> np.ndarray[Any, Any] | None:
    if isinstance(source, torch.Tensor):
        return _plain(source).copy()
    if isinstance(source, np.ndarray):
        return np.array(source, copy=True)
    return None


def _pointer(source: Any) -> int:
    if isinstance(source, torch.Tensor):
        return int(source.data_ptr())
    return int(source.__array_interface__["data"][0])


# --- shrinking ---------------------------------------------------------------------------------


def shrink(finding: Finding, budget: int = 40) -> Finding:
    """A smaller draw showing a difference of the same aspect (fewer leaves, values,
    arguments; its kind may change with the leaves)."""
    return fuzz_runs.shrink(finding, judge, _smaller, budget, alike=lambda found: found.aspect)


def _smaller(draw_: Draw) -> list[Draw]:
    candidates: list[Draw] = []
    if draw_.tree is not None:
        for index, leaf in enumerate(draw_.leaves):
            candidates.append(
                dataclasses.replace(draw_, leaves=(leaf,), tree=("list", (("leaf", 0),)))
            )
            if leaf.source not in ("scalar", "numpy-scalar"):
                candidates.append(
                    dataclasses.replace(draw_, leaves=(draw_.leaves[index],), tree=None)
                )
    leaf = draw_.leaves[0]
    if len(draw_.leaves) == 1 and len(leaf.values) > 1 and len(leaf.shape) == 1:
        candidates.extend(
            dataclasses.replace(draw_, leaves=(dataclasses.replace(leaf, values=(v,), shape=(1,)),))
            for v in leaf.values
        )
    candidates.extend(
        dataclasses.replace(draw_, kwargs=draw_.kwargs[:position] + draw_.kwargs[position + 1 :])
        for position in range(len(draw_.kwargs))
    )
    if draw_.args and draw_.args[-1].what == "flag":
        candidates.append(dataclasses.replace(draw_, args=draw_.args[:-1]))
    return [candidate for candidate in candidates if candidate != draw_]
