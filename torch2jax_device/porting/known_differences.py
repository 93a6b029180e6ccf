"""Where ``tj.to_device`` answers differently from torch's ``Tensor.to``, as one table.

Each :class:`Difference` row says which calls it covers (a predicate over a
:class:`Call`, the plain-data description of one ``.to`` call on one source), what
differs, why, and the heading of ``docs/known-differences*.md`` that documents it. The
side-by-side fuzzer (``tests/parity/test_placement_fuzz.py``) reads this table: a
difference from torch that no row covers fails it with a one-line reproduction, and
``tests/unit/test_placement_known_differences.py`` holds the docs to the same rows, so a
documented difference and a tested one cannot drift apart.

The table is data, not behaviour: nothing in the library consults it, and it imports
neither JAX nor torch, so a tool (the docs, ``scan``) can read it anywhere.

A row explains a difference in one of two ways: ``instead`` names the torch call whose
answer tj gives instead (JAX without x64 gives what torch gives for the 32-bit dtype:
the fuzzer compares with that call, strictly), or ``differs`` names the parts of the
outcome that may differ (``"values"``, ``"alias"``, ``"identity"``, ``"error"``) and are
not compared where the row applies.

Examples:
    >>> from torch2jax_device.porting.known_differences import Call, Leaf, covering
    >>> leaf = Leaf(source="numpy", layout="dense", dtype="float32", values=(1e5,), shape=(1,))
    >>> [row.id for row in covering(Call(leaf=leaf, device=None, dtype="int8"))]
    ['float-to-int-saturates']
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Callable
from typing import Any

from .._src.errors import ArgumentTypeError

__all__ = ["DIFFERENCES", "NOT_DRAWN", "Call", "Difference", "Leaf", "covering", "instead"]

#: What each part of an outcome is called in ``Difference.differs``.
ASPECTS = frozenset({"values", "alias", "identity", "error"})
#: The 32-bit dtype JAX gives (without ``jax_enable_x64``) for each 64-bit one.
NARROWED = {"int64": "int32", "uint64": "uint32", "float64": "float32", "complex128": "complex64"}
#: Integer ranges, by dtype name.
INTEGER_RANGES = {
    "uint8": (0, 2**8 - 1),
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}
_INEXACT_PREFIXES = ("float", "bfloat", "complex")


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One source array or number of a ``.to`` call.

    Attributes:
        source: ``"torch"`` (a CPU tensor), ``"numpy"`` (an ``ndarray``), ``"jax"``,
            ``"scalar"`` (a Python number) or ``"numpy-scalar"``.
        layout: How it lies in memory: ``"dense"``, ``"fortran"``, ``"strided"``,
            ``"transposed"``, ``"offset"``, ``"negative"`` (negative strides),
            ``"odd-strides"`` (strides that are not a multiple of the item size),
            ``"big-endian"``, ``"memmap"``, ``"misaligned"`` (not 64-byte aligned);
            ``"committed"``/``"uncommitted"`` for JAX arrays; ``"python"``/``"numpy"``
            for numbers.
        dtype: Its dtype's name (torch and JAX share the names; Python's ``int`` is
            ``"int64"``, ``float`` ``"float64"``, ``complex`` ``"complex128"``).
        values: The values it holds, as Python numbers, in C order.
        shape: Its shape.
    """

    source: str
    layout: str
    dtype: str
    values: tuple[Any, ...]
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Call:
    """``tj.to_device(leaf, ...)`` as torch's ``leaf.to(...)`` reads it.

    Attributes:
        leaf: The source.
        device: The device argument as written (``'"cpu"'``, ``'"meta"'``, ``"None"``...),
            or ``None`` when the call names no device.
        dtype: The dtype asked for (an ``other`` tensor's too), or ``None``.
        copy: ``copy=True``.
        in_container: The leaf is inside a container (``Module.to``'s rules apply).
        form: The call's arguments as written, for reports.
        memory_format: The ``memory_format`` argument as written, or ``None``.
    """

    leaf: Leaf
    device: str | None
    dtype: str | None
    copy: bool = False
    in_container: bool = False
    form: str = ""
    memory_format: str | None = None

    @property
    def result_dtype(self) -> str:
        """The dtype torch's answer has (the leaf's when the call casts nothing)."""
        return self.dtype if self.dtype is not None else self.leaf.dtype


@dataclasses.dataclass(frozen=True)
class Difference:
    """One known difference between ``tj.to_device`` and torch's ``Tensor.to``.

    Attributes:
        id: A stable name.
        applies: Whether the difference can show in a call.
        what: What differs: torch's answer, then tj's.
        why: Why tj cannot (or chooses not to) give torch's answer.
        docs: The page and heading anchor that documents it
            (``"known-differences-placement.md#int64-becomes-int32"``).
        differs: The parts of the outcome not compared where the row applies.
        instead: The torch call whose answer tj gives where the row applies: the fuzzer
            compares with it, strictly.
        copies_as_asked: tj copies a NumPy array's or tensor's memory (rather than sharing
            it) wherever torch copies for the call as it was before ``instead`` rewrote it:
            ``.to(torch.float64)`` of float32 data is a copy in both, though JAX makes it
            float32 (an immutable JAX array may come back as itself).
    """

    id: str
    applies: Callable[[Call], bool]
    what: str
    why: str
    docs: str
    differs: frozenset[str] = frozenset()
    instead: Callable[[Call], Call] | None = None
    copies_as_asked: bool = False

    def __post_init__(self) -> None:
        if not self.differs <= ASPECTS:
            raise ValueError(f"{self.id}: differs must be among {sorted(ASPECTS)}")
        if not self.differs and self.instead is None:
            raise ValueError(f"{self.id}: says neither what differs nor what tj gives instead")


def is_inexact(dtype: str) -> bool:
    return dtype.startswith(_INEXACT_PREFIXES)


def _number(value: Any, *, single: bool = False) -> float:
    """The real part as a float; ``single``: rounded to float32, as a Python number becomes."""
    number = float(value.real) if isinstance(value, complex) else float(value)
    if not single or not math.isfinite(number):
        return number
    try:
        return float(struct.unpack("f", struct.pack("f", number))[0])
    except OverflowError:
        return math.copysign(math.inf, number)


def _kept_by_a_container(call: Call) -> bool:
    return call.in_container and call.dtype is not None and not is_inexact(call.leaf.dtype)


def _tj_dtype(call: Call) -> str:
    """The dtype tj's answer would have with x64 on."""
    return call.leaf.dtype if _kept_by_a_container(call) else call.result_dtype


def _out_of_integer_range(call: Call) -> bool:
    """A float that the integer dtype tj makes (int32 for int64) cannot hold: nan, inf,
    too big."""
    target = NARROWED.get(_tj_dtype(call), _tj_dtype(call))
    if target not in INTEGER_RANGES or not is_inexact(call.leaf.dtype):
        return False
    low, high = INTEGER_RANGES[target]
    single = call.leaf.source == "scalar"  # torch.tensor(0.1) and JAX make a Python float32
    numbers = [_number(value, single=single) for value in call.leaf.values]
    return any(not math.isfinite(x) or not low - 1 < x < high + 1 for x in numbers)


def _narrowed(call: Call) -> Call:
    return dataclasses.replace(call, dtype=NARROWED[_tj_dtype(call)])


def _dtype_kept(call: Call) -> Call:
    return dataclasses.replace(call, dtype=None)


def _read_as_a_native_dense_copy(call: Call) -> Call:
    return dataclasses.replace(call, leaf=dataclasses.replace(call.leaf, layout="dense"))


def _shares_only_dense_aligned_buffers(call: Call) -> bool:
    return call.leaf.source in ("numpy", "torch") and call.leaf.layout not in ("dense",)


def _bare_number_first(call: Call) -> bool:
    """``x.to(True)``, ``x.to(False, ...)`` or ``x.to(1, True)``: a number where torch's
    parser looks for a dtype."""
    parts = call.form.split(", ")
    if parts[0] in ("True", "False"):
        return True
    return parts[0].lstrip("-").isdigit() and len(parts) > 1 and parts[1] in ("True", "False")


def _big_python_int(call: Call) -> bool:
    low, high = INTEGER_RANGES["int32"]
    leaf = call.leaf
    return (
        leaf.source == "scalar"
        and leaf.dtype == "int64"
        and call.dtype is None
        and not low <= leaf.values[0] <= high
    )


def _wraps_in_32_bits(call: Call) -> bool:
    """Data tj would hold as int64 or uint64 (torch's dtype) with values the 32-bit dtype
    cannot hold: tj refuses to wrap them."""
    wide = _tj_dtype(call)
    if wide not in ("int64", "uint64") or call.leaf.source == "jax":  # JAX's are 32-bit
        return False
    low, high = INTEGER_RANGES[NARROWED[wide]]
    return any(not low <= _as_64_bits(value, wide) <= high for value in call.leaf.values)


def _as_64_bits(value: Any, dtype: str) -> float:
    """``value`` as torch's cast to ``dtype`` (int64 or uint64) holds it: integers wrap
    modulo 2**64, floats truncate toward zero (nan, inf and magnitudes past 64 bits are
    left out of range, as torch's CPU kernels leave them)."""
    number = value.real if isinstance(value, complex) else value
    if isinstance(number, float):
        if not math.isfinite(number) or abs(number) >= 2**64:
            return math.inf
        number = math.trunc(number)
    low = INTEGER_RANGES[dtype][0]
    return (int(number) - low) % 2**64 + low


def _overflows_float32(call: Call) -> bool:
    """Data tj would hold as float64 or complex128 (torch's dtype) with finite values past
    float32's largest, which the narrowing would make infinite: tj refuses."""
    wide = _tj_dtype(call)
    if wide not in ("float64", "complex128") or call.leaf.source == "jax":
        return False
    return any(
        isinstance(part, float) and math.isfinite(part) and not _fits_float32(part)
        for value in call.leaf.values
        for part in ((value.real, value.imag) if isinstance(value, complex) else (value,))
    )


def _fits_float32(number: float) -> bool:
    """Whether ``number`` rounds to a finite float32 (struct refuses one that does not)."""
    try:
        struct.pack("<f", number)
    except OverflowError:
        return False
    return True


DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        id="container-casts-floats-only",
        applies=_kept_by_a_container,
        what="a comprehension `{k: v.to(dtype) ...}` casts every tensor; in a container tj "
        "casts floating-point and complex leaves only",
        why="Module.to's rule: a batch's integer ids and masks keep their dtype when a "
        "model's floats are cast (tj treats a tree as torch treats a module)",
        docs="known-differences-placement.md#dtype-in-containers",
        instead=_dtype_kept,
    ),
    Difference(
        id="x64-narrowing",
        applies=lambda call: _tj_dtype(call) in NARROWED,
        what="torch keeps int64, uint64, float64 and complex128; tj gives the 32-bit dtype, "
        "with the values torch's .to(32-bit dtype) gives",
        why="JAX has no 64-bit dtypes unless jax_enable_x64 is on (its default is off)",
        docs="known-differences-placement.md#int64-becomes-int32",
        instead=_narrowed,
        copies_as_asked=True,
    ),
    Difference(
        id="int64-values-past-32-bits-refused",
        applies=_wraps_in_32_bits,
        what="torch keeps int64 values past the 32-bit range; tj raises tj.ConversionError "
        "naming the value, where it would otherwise wrap them",
        why="without x64 JAX holds int32, and a wrapped id or offset would silently name "
        "another row; the error names the fix (jax_enable_x64, or values in range)",
        docs="known-differences-placement.md#int64-becomes-int32",
        differs=frozenset({"error"}),
    ),
    Difference(
        id="float64-values-past-float32-refused",
        applies=_overflows_float32,
        what="torch keeps float64 and complex128 values past float32's largest (1e300); "
        "tj raises tj.ConversionError naming the value, where narrowing would make them inf",
        why="without x64 JAX holds float32, and an inf that was a finite value poisons every "
        "sum it enters; the error names the fix (jax_enable_x64, values in range, or the "
        "narrow dtype asked for by name, which casts as torch does)",
        docs="known-differences-placement.md#float64-values-past-float32s-largest-are-refused",
        differs=frozenset({"error"}),
    ),
    Difference(
        id="python-int-needs-64-bits",
        applies=_big_python_int,
        what="torch.tensor(2**40) is an int64 tensor; tj.to_device(2**40, ...) raises "
        "tj.ConversionError when no dtype is given",
        why="without x64 the int would wrap silently into int32; the error names the fix "
        "(pass the dtype it should have)",
        docs="known-differences-placement.md#int64-becomes-int32",
        differs=frozenset({"error"}),
    ),
    Difference(
        id="float-to-int-saturates",
        applies=_out_of_integer_range,
        what="a float the integer dtype cannot hold (nan, inf, out of range): torch's CPU "
        "kernels wrap, tj saturates to the dtype's range and makes nan 0",
        why="the cast is undefined in C; XLA defines it by clamping, and JAX has no "
        "wrapping cast to offer",
        docs="known-differences-placement.md#out-of-range-float-to-integer-casts-saturate",
        differs=frozenset({"values"}),
    ),
    Difference(
        id="numpy-big-endian-converted",
        applies=lambda call: call.leaf.source == "numpy" and call.leaf.layout == "big-endian",
        what="torch.from_numpy raises ValueError for byte-swapped data; tj reads a "
        "native-order copy",
        why="the values are well defined and a JAX array must be native; refusing helps no one",
        docs="known-differences-placement.md#big-endian-numpy-arrays-are-converted",
        instead=_read_as_a_native_dense_copy,
    ),
    Difference(
        id="numpy-negative-strides-converted",
        applies=lambda call: call.leaf.source == "numpy" and call.leaf.layout == "negative",
        what="torch.from_numpy raises ValueError for negative strides; tj reads a copy",
        why="JAX arrays have no strides, so a copy is made anyway",
        docs="known-differences-placement.md#negative-stride-numpy-views-are-converted",
        instead=_read_as_a_native_dense_copy,
    ),
    Difference(
        id="numpy-odd-strides-converted",
        applies=lambda call: call.leaf.source == "numpy" and call.leaf.layout == "odd-strides",
        what="torch.from_numpy raises ValueError for strides that are not a multiple of the "
        "item size; tj reads a copy",
        why="JAX arrays have no strides, so a copy is made anyway",
        docs="known-differences-placement.md#zero-copy-has-conditions",
        instead=_read_as_a_native_dense_copy,
    ),
    Difference(
        id="zero-copy-conditions",
        applies=_shares_only_dense_aligned_buffers,
        what="torch's .to() of an unchanged tensor (a from_numpy view too) shares its buffer, "
        "whatever its strides; tj shares only a dense, 64-byte aligned one and copies the rest",
        why="JAX arrays have no strides, and JAX's CPU client adopts only aligned buffers",
        docs="known-differences-placement.md#zero-copy-has-conditions",
        differs=frozenset({"alias"}),
    ),
    Difference(
        id="uncommitted-array-recommitted",
        applies=lambda call: call.leaf.source == "jax" and call.leaf.layout == "uncommitted",
        what="torch's .to() returns the tensor itself when nothing changes; tj returns a new "
        "committed array sharing the uncommitted one's buffer",
        why="JAX's commitment is part of the array: placing it must make a committed array",
        docs="known-differences-placement.md#no-copy-when-nothing-changes",
        differs=frozenset({"identity"}),
    ),
    Difference(
        id="indexed-cpu-not-copied",
        applies=lambda call: call.device in ('"cpu:0"', '"cpu:1"'),
        what='x.to("cpu:0") copies a CPU tensor (torch\'s CPU tensors carry no index); '
        "tj returns the array itself, or shares its buffer",
        why="JAX's CPU devices always have an index: cpu:0 is where the array already is",
        docs="known-differences-placement.md#no-copy-when-nothing-changes",
        differs=frozenset({"alias", "identity"}),
    ),
    Difference(
        id="memory-format-on-trees",
        applies=lambda call: (
            call.in_container and call.memory_format in ("channels_last", "channels_last_3d")
        ),
        what="a comprehension `v.to(memory_format=torch.channels_last)` raises for a tensor "
        "that is not 4-d; on a container tj applies it to nothing and accepts it",
        why="Module.to(memory_format=...) accepts it for a module's tensors of any rank, "
        "and tj treats a tree as torch treats a module",
        docs="known-differences-placement.md#memory_format-changes-nothing",
        differs=frozenset({"error"}),
    ),
    Difference(
        id="bare-number-is-no-dtype",
        applies=_bare_number_first,
        what="x.to(True) casts to torch.bool and x.to(1, True) to torch.int64 (torch's parser "
        "reads a Python bool or int before a flag as its type's dtype); tj reads a bool as "
        "no device (tj.DeviceTypeError) and an int as a device index, as torch reads x.to(1)",
        why="a guessed cast would be silent; a lone flag is almost always a misplaced "
        "non_blocking or copy",
        docs="known-differences-placement.md#a-bare-true-false-or-integer-is-not-a-dtype",
        differs=frozenset({"error"}),
    ),
    Difference(
        id="no-meta-device",
        applies=lambda call: call.device == '"meta"',
        what='x.to("meta") gives a meta tensor; tj raises tj.DeviceUnavailableError',
        why="JAX has no meta device: jax.eval_shape and jax.ShapeDtypeStruct play its part",
        docs="known-differences.md#tjdevice-is-never-meta-capable",
        differs=frozenset({"error"}),
    ),
)

#: The placement page's headings that no row above covers, and why no drawn ``.to`` call
#: shows them. ``tests/unit/test_placement_known_differences.py`` holds every heading of
#: ``docs/known-differences-placement.md`` to a row or to this list.
_PAGE = "known-differences-placement.md#"
NOT_DRAWN: dict[str, str] = {
    _PAGE + "results-are-committed": "torch tensors have no commitment to compare",
    _PAGE + "devicenone-is-the-default-device": "the default device here is the CPU, as "
    "torch's: the drawn device=None calls agree",
    _PAGE + "python-numbers": "drawn, and tj agrees with torch.tensor(number).to(...) and "
    "with a comprehension, which leaves a container's numbers as they are",
    _PAGE + "under-jaxjit": "no tracers are drawn",
    _PAGE + "sharded-arrays-have-no-single-device": "one device: no sharding is drawn",
    _PAGE + "numpy-is-host-data": "about tj.device_of, not .to",
    _PAGE + "tjcheck_same_device-is-strict-like-torch": "about tj.check_same_device, not .to",
    _PAGE + "host-data-is-read-before-tjto_device-returns": "no write after the call is drawn",
    _PAGE + "float0-leaves-stay-numpy-data": "torch has no float0 to compare with",
    _PAGE + "dict-order-the-library-keeps-it-jax-does-not": "drawn, and tj keeps torch's "
    "key order: the difference is JAX's own tree functions'",
    _PAGE + "int64-comes-back-from-jax-as-int32": "about tj.to_torch, not .to",
    _PAGE + "get_device-is-tjget_device": "about tj.get_device, not .to",
    _PAGE + "float8-tensors": "drawn, and agrees: how float8 data crosses, not a difference",
    _PAGE + "nexttjparametersmodel-is-a-tjparameter": "about tj.parameters, not .to",
    _PAGE + "a-tjparameters-methods-are-jaxs": "about tj.parameters, not .to",
    _PAGE + "multi-process-jobs-report-this-processs-device": "one process",
    _PAGE + "torch-modules-are-refused-by-tjto_device": "no torch module is drawn",
    _PAGE + "only-containers-pass-unknown-objects-through": "drawn inside containers, where "
    "tj agrees with a comprehension; a bare object is not a .to call",
    _PAGE + "numpy-arrays-of-text-objects-dates-or-records-raise": "torch has no such "
    "tensor: tests/parity/test_placement*.py pin the refusal",
    _PAGE + "lazy-conjugate-and-negative-bits-are-resolved": "about tj.to_jax; .to keeps "
    "torch's values, which the fuzzer compares",
    _PAGE + "sparse-quantized-and-nested-tensors-are-refused": "only strided tensors are drawn",
    _PAGE + "some-ml_dtypes-kinds-cannot-become-jax-arrays": "torch has no float6 or "
    "complex32 to compare with",
    _PAGE + "numpy-float64-narrows-quietly": "about warnings, which are not compared "
    "(torch warns once per process)",
    _PAGE + "tjto_torch-takes-numpy-scalars": "about tj.to_torch, not .to",
    _PAGE + "arrays-made-under-with-tjdeviced-are-uncommitted": "about arrays a default "
    "device block creates, not .to",
    _PAGE + "a-0-d-tensor-becomes-a-full-jax-scalar": "about promotion in later "
    "computations; the moved array's own dtype is torch's, which the fuzzer compares",
}


def covering(call: Call) -> list[Difference]:
    """The rows that apply to ``call``, in the table's order."""
    if not isinstance(call, Call):
        raise ArgumentTypeError(
            f"covering(call={call!r:.60}): not a known_differences.Call. Fix: pass "
            "Call(leaf=Leaf(...), device=..., dtype=...)"
        )
    return [row for row in DIFFERENCES if row.applies(call)]


def instead(call: Call) -> tuple[Call, Call, list[Difference]]:
    """The torch call whose answer tj gives for ``call``; the one whose copy-or-keep tj
    follows too (see ``Difference.copies_as_asked``); and the rows that apply.

    Which rows apply is decided on ``call`` itself; their ``instead`` then rewrite it in
    the table's order: a container keeps an int64 leaf's dtype
    (``container-casts-floats-only``), then JAX narrows that dtype (``x64-narrowing``).
    """
    rows = covering(call)
    as_asked = None
    for row in rows:
        if row.instead is not None:
            if row.copies_as_asked and as_asked is None:
                as_asked = call
            call = row.instead(call)
    return call, (call if as_asked is None else as_asked), rows
