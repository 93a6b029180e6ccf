"""The differential fuzzer's draws: a ``Tensor.to`` call, as plain data, and the objects it builds.

A :class:`Draw` is everything one example of ``tests/parity/test_placement_fuzz.py``
needs, written down as plain values (dtype names, layouts, Python numbers, the call's
argument tokens), so the same draw builds the torch side and the tj side afresh, prints
as one line of Python, and shrinks by rewriting a field. ``draw(rng)`` makes one from a
seeded ``random.Random``; nothing here knows what torch answers (``fuzz_oracle`` asks it).

The space: a source (torch tensor of any layout, NumPy array of any layout, committed or
uncommitted JAX array, Python number, NumPy scalar inside a container), its dtype and
the dtype asked for from the full table (bool, every integer, every float torch and
ml_dtypes share, complex), edge values of both, every positional/keyword form of
``Tensor.to`` (and forms torch refuses), and a container holding one to three sources.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import mmap
import random
import typing
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch

import torch2jax_device as tj
from torch2jax_device.porting.known_differences import Call, Leaf

# --- the dtype table ----------------------------------------------------------------------

#: Every dtype torch and JAX (ml_dtypes) both name, by that name.
DTYPES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
)
SIXTY_FOUR_BIT = frozenset({"int64", "uint64", "float64", "complex128"})


def numpy_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def torch_dtype(name: str) -> torch.dtype:
    return typing.cast(torch.dtype, getattr(torch, name))


def kind(name: str) -> str:
    """``"b"``, ``"i"`` (signed or unsigned), ``"f"`` or ``"c"``."""
    dtype = numpy_dtype(name)
    if name == "bool":
        return "b"
    if dtype.kind in "iu":
        return "i"
    return "c" if dtype.kind == "c" else "f"


def _edge_floats() -> list[float]:
    return [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        1e5,
        448.0,
        480.0,
        57344.0,
        2.0**-127,
        float("inf"),
        float("-inf"),
        float("nan"),
        2.0**31 - 1,
        2.0**31 + 1,
        2.0**40,
        2.0**53 + 1,
        2.0**63,
        3e9,
        1e300,
        -1e300,
    ]


def edge_values(name: str) -> list[Any]:
    """The values worth drawing for a source of dtype ``name``: its limits and the table's."""
    if name == "bool":
        return [False, True]
    dtype = numpy_dtype(name)
    if kind(name) == "i":
        info = np.iinfo(dtype)
        wanted = [0, 1, -1, 7, -128, 127, 255, 2**31 - 1, 2**31, 2**31 + 1, 2**40, 3_000_000_000]
        wanted += [2**53 + 1, 2**63, -(2**63), int(info.max), int(info.min), int(info.max) - 1]
        return sorted({value for value in wanted if info.min <= value <= info.max})
    info = ml_dtypes.finfo(dtype) if dtype.itemsize <= 2 else np.finfo(dtype)
    limits = [float(info.max), -float(info.max), float(info.smallest_subnormal)]
    limits += [-float(info.smallest_subnormal), float(info.tiny)]
    return _edge_floats() + limits


# --- one source -----------------------------------------------------------------------------

#: How each kind of source may be laid out in memory.
LAYOUTS = {
    "torch": ("dense", "dense", "strided", "transposed", "offset"),
    "numpy": (
        "odd-strides",
        "dense",
        "dense",
        "fortran",
        "strided",
        "negative",
        "big-endian",
        "memmap",
        "misaligned",
    ),
    "jax": ("committed", "uncommitted"),
    "scalar": ("python",),
    "numpy-scalar": ("numpy",),
}


def draw_leaf(rng: random.Random, *, in_container: bool, source: str = "") -> Leaf:
    sources = ["torch", "torch", "numpy", "numpy", "jax", "scalar"]
    if in_container:
        sources.append("numpy-scalar")
    source = source or rng.choice(sources)
    layout = rng.choice(LAYOUTS[source])
    name = rng.choice(DTYPES)
    if source == "jax":  # JAX holds no 64-bit data without x64: such a source cannot exist
        name = rng.choice([dtype for dtype in DTYPES if dtype not in SIXTY_FOUR_BIT])
    if source == "scalar":
        name = rng.choice(["bool", "int64", "float64", "complex128"])  # Python's four numbers
    if layout in ("big-endian", "odd-strides"):
        name = rng.choice(["int16", "int32", "int64", "uint16", "float16", "float32", "float64"])
    count = 1 if source in ("scalar", "numpy-scalar") else rng.choice([1, 2, 3, 4])
    pool = edge_values(name)
    values: list[Any] = [rng.choice(pool) for _ in range(count)]
    if kind(name) == "c":
        values = [complex(value, rng.choice(pool)) for value in values]
    shape: tuple[int, ...] = (count,)
    if source == "scalar" or source == "numpy-scalar" or (layout == "dense" and rng.random() < 0.1):
        shape = () if count == 1 else shape
    if layout in ("fortran", "transposed"):
        values = values + values[::-1]
        shape = (2, count)
    leaf = Leaf(source=source, layout=layout, dtype=name, values=tuple(values), shape=shape)
    return dataclasses.replace(leaf, values=stored_values(leaf))  # as the dtype rounds them


def _stored(leaf: Leaf) -> np.ndarray[Any, Any]:
    """The leaf's values in its dtype, C-ordered, in native byte order."""
    dtype = numpy_dtype(leaf.dtype)
    with np.errstate(all="ignore"):  # an edge value a dtype cannot hold becomes inf or nan
        if kind(leaf.dtype) == "i":
            array = np.array(leaf.values, dtype=dtype)
        elif kind(leaf.dtype) == "c":
            array = np.array(leaf.values, dtype=np.complex128).astype(dtype)
        else:
            array = np.array(leaf.values, dtype=np.float64).astype(dtype)
    return aligned(array.reshape(leaf.shape))


def aligned(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A C-ordered copy of ``array`` whose buffer starts 64-byte aligned (as torch's are)."""
    raw = np.empty(array.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    out = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def stored_values(leaf: Leaf) -> tuple[Any, ...]:
    """What the source holds, as Python numbers (a dtype rounds what was drawn)."""
    array = _stored(leaf)
    if kind(leaf.dtype) == "f":
        array = array.astype(np.float64)
    return tuple(array.reshape(-1).tolist())


def torch_twin(array: np.ndarray[Any, Any]) -> torch.Tensor:
    """The same bits as a torch tensor (through an unsigned view for ml_dtypes' kinds)."""
    if array.dtype.type in (np.bool_, *(np.sctypeDict[name] for name in ("int8", "uint8"))):
        return torch.from_numpy(array)
    name = array.dtype.name
    if hasattr(ml_dtypes, name) or name.startswith("uint"):
        bits = array.view(
            np.dtype(f"u{array.dtype.itemsize}")
            if name.startswith("uint")
            else np.dtype(f"i{array.dtype.itemsize}")
        )
        return torch.from_numpy(bits).view(torch_dtype(name))
    return torch.from_numpy(array)


def build_source(leaf: Leaf) -> Any:
    """A fresh source object for ``leaf`` (tj's input; ``torch_source`` gives torch's)."""
    array = _stored(leaf)
    if leaf.source == "scalar":
        value = leaf.values[0]
        return {"b": bool, "i": int, "f": float, "c": complex}[kind(leaf.dtype)](value)
    if leaf.source == "numpy-scalar":
        return array.reshape(()).copy()[()]
    if leaf.source == "jax":
        jax_array = jnp.asarray(array)
        return tj.to_device(jax_array, "cpu") if leaf.layout == "committed" else jax_array
    if leaf.source == "torch":
        tensor = torch_twin(array)
        if leaf.layout == "strided":
            tensor = torch_twin(np.repeat(array, 2, axis=-1))[..., ::2]
        elif leaf.layout == "transposed":
            tensor = torch_twin(np.ascontiguousarray(array.T)).T
        elif leaf.layout == "offset":
            tensor = torch_twin(np.concatenate([array.reshape(-1)[:1], array.reshape(-1)]))[1:]
            tensor = tensor.reshape(leaf.shape)
        return tensor
    return numpy_layout(array, leaf.layout)


def numpy_layout(array: np.ndarray[Any, Any], layout: str) -> np.ndarray[Any, Any]:
    if layout == "fortran":
        return np.asfortranarray(array)
    if layout == "strided":
        return np.repeat(array, 2, axis=-1)[..., ::2]
    if layout == "negative":
        return np.ascontiguousarray(array[..., ::-1])[..., ::-1]
    if layout == "big-endian":
        return array.astype(array.dtype.newbyteorder(">"))
    if layout == "memmap":
        return memmapped(array)
    if layout == "misaligned":
        return misaligned(array)
    if layout == "odd-strides":
        return odd_strides(array)
    return array


def odd_strides(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A 1-d copy of ``array``'s values whose stride is not a multiple of the item size."""
    flat = array.reshape(-1)
    stride = array.dtype.itemsize + 1
    raw = np.zeros(max(flat.size * stride, 1), np.uint8)
    view = np.ndarray(flat.shape, array.dtype, buffer=raw, strides=(stride,))
    view[...] = flat
    return view


def memmapped(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A copy of ``array`` in memory-mapped pages (anonymous: no file to clean up)."""
    mapped = np.ndarray(array.shape, array.dtype, buffer=mmap.mmap(-1, max(array.nbytes, 1)))
    mapped[...] = array
    return mapped


def misaligned(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A C-ordered copy of ``array`` whose buffer does not start 64-byte aligned."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + max(array.dtype.itemsize, 8)
    out = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def torch_source(leaf: Leaf, source: Any) -> Any:
    """What the torch code holds where tj's code holds ``source``.

    A tensor is itself; a NumPy array is ``torch.from_numpy``'s view of it (raising as
    ``from_numpy`` raises for negative strides and byte-swapped data); a JAX array is a
    tensor of its values; a number is ``torch.tensor(number)`` at the top level (a
    container's numbers stay numbers).
    """
    if isinstance(source, torch.Tensor):
        return source
    if leaf.source == "numpy":
        itemsize = source.dtype.itemsize
        if (
            source.dtype.byteorder == ">"
            or any(stride < 0 for stride in source.strides)
            or any(stride % itemsize for stride in source.strides)
        ):
            bits = (
                source.view(f"u{source.dtype.itemsize}")
                if hasattr(ml_dtypes, source.dtype.name)
                else source
            )
            return torch.from_numpy(bits)  # raises torch's ValueError
        return torch_twin(source)
    if leaf.source == "jax":
        return torch_twin(np.array(source))  # a writable copy, as torch wants
    return torch.tensor(source)


def describe_source(leaf: Leaf) -> str:
    """A Python expression that rebuilds the source (names from this module in brackets)."""
    values = _literal(np.asarray(stored_values(leaf), dtype=object).reshape(leaf.shape).tolist())
    dtype = leaf.dtype
    if leaf.source == "scalar":
        return values
    numpy = f"np.array({values}, dtype={_numpy_dtype_expression(dtype)})"
    if leaf.source == "numpy-scalar":
        return f"{numpy}[()]"
    if leaf.source == "jax":
        uncommitted = f"jnp.asarray({numpy})"
        return (
            uncommitted if leaf.layout == "uncommitted" else f'tj.to_device({uncommitted}, "cpu")'
        )
    if leaf.source == "torch":
        tensor = f"torch.tensor({values}, dtype=torch.{dtype})"
        return {
            "dense": tensor,
            "strided": f"{tensor}.repeat_interleave(2, -1)[..., ::2]",
            "transposed": f"{tensor}.T.contiguous().T",
            "offset": f"torch.tensor({_literal([stored_values(leaf)[0], *stored_values(leaf)])}, "
            f"dtype=torch.{dtype})[1:].reshape({leaf.shape})",
        }[leaf.layout]
    return {
        "dense": numpy,
        "fortran": f"np.asfortranarray({numpy})",
        "strided": f"np.repeat({numpy}, 2, -1)[..., ::2]",
        "negative": f"np.ascontiguousarray({numpy}[..., ::-1])[..., ::-1]",
        "big-endian": f"{numpy}.astype({_numpy_dtype_expression(dtype)}.newbyteorder('>'))",
        "memmap": f"memmapped({numpy})",
        "misaligned": f"misaligned({numpy})",
        "odd-strides": f"odd_strides({numpy})",
    }[leaf.layout]


def _numpy_dtype_expression(name: str) -> str:
    return f"ml_dtypes.{name}" if hasattr(ml_dtypes, name) else f"np.{name}"


def _literal(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, complex):
        return f"complex({_literal(value.real)}, {_literal(value.imag)})"
    return repr(value)


# --- the call --------------------------------------------------------------------------------

#: Device spellings, as a reproduction writes them: (torch's argument, tj's argument).
DEVICES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    '"cpu"': (lambda: "cpu", lambda: "cpu"),
    '"cpu:0"': (lambda: "cpu:0", lambda: "cpu:0"),
    '"cpu:1"': (lambda: "cpu:1", lambda: "cpu:1"),
    'torch.device("cpu")': (lambda: torch.device("cpu"), lambda: torch.device("cpu")),
    'tj.device("cpu")': (lambda: torch.device("cpu"), lambda: tj.device("cpu")),
    'jax.devices("cpu")[0]': (lambda: torch.device("cpu"), lambda: jax.devices("cpu")[0]),
    "None": (lambda: None, lambda: None),
    '"meta"': (lambda: "meta", lambda: "meta"),
    '"cuda"': (lambda: "cuda", lambda: "cuda"),
    '"mps"': (lambda: "mps", lambda: "mps"),
    '"bogus"': (lambda: "bogus", lambda: "bogus"),
    '"float16"': (lambda: "float16", lambda: "float16"),
}
#: Devices drawn most of the time: those torch's CPU build and tj both resolve to the CPU.
CPU_DEVICES = (
    '"cpu"',
    '"cpu:0"',
    '"cpu:1"',
    'torch.device("cpu")',
    'tj.device("cpu")',
    'jax.devices("cpu")[0]',
    "None",
)
#: tj's spellings of a dtype (torch's is always ``torch.<name>``).
DTYPE_SPELLINGS: dict[str, Callable[[str], Any]] = {
    "torch.{}": torch_dtype,
    "jnp.{}": lambda name: getattr(jnp, name),
    "np.dtype({!r})": numpy_dtype,
}
#: Flag values torch's ``to`` takes (booleans), and ones it refuses.
FLAGS = (True, False, True, False, None, "yes", 1)
MEMORY_FORMATS = (
    "preserve_format",
    "contiguous_format",
    "channels_last",
    "None",
    '"channels_last"',
)


@dataclasses.dataclass(frozen=True)
class Token:
    """One argument of a drawn call: ``what`` is device, dtype, other, flag or format."""

    what: str
    value: Any
    spelling: str = ""  # tj's spelling of a dtype (a key of DTYPE_SPELLINGS)


def draw_call(rng: random.Random) -> tuple[tuple[Token, ...], tuple[tuple[str, Token], ...]]:
    """A ``Tensor.to`` form: positional tokens and keyword tokens."""
    dtype = Token("dtype", rng.choice(DTYPES), rng.choice(list(DTYPE_SPELLINGS)))
    unusual = rng.random() < 0.15
    device_name = rng.choice(list(DEVICES) if unusual else CPU_DEVICES)
    device = Token("device", device_name)
    other = Token("other", rng.choice([d for d in DTYPES if d not in SIXTY_FOUR_BIT]))
    head = rng.choice(
        [
            "dtype",
            "device",
            "device dtype",
            "device=",
            "dtype=",
            "device= dtype=",
            "device dtype=",
            "other",
            "none",
        ]
        + (["other dtype", "other=", "dtype device"] if unusual else [])
    )
    args: list[Token] = []
    kwargs: list[tuple[str, Token]] = []
    for part in head.split() if head != "none" else ():
        token = {"dtype": dtype, "device": device, "other": other}[part.rstrip("=")]
        if part.endswith("="):
            kwargs.append((part.rstrip("="), token))
        else:
            args.append(token)
    flags = FLAGS if unusual else FLAGS[:4]
    takes_positional_flags = head in ("dtype", "device dtype", "other") or unusual
    for name in ("non_blocking", "copy"):
        choice = rng.random()
        if choice < 0.3 and takes_positional_flags and not kwargs:
            args.append(Token("flag", rng.choice(flags)))
        elif choice < 0.6:
            kwargs.append((name, Token("flag", rng.choice(flags))))
            takes_positional_flags = False
        else:
            takes_positional_flags = False
    if rng.random() < 0.2:
        formats = MEMORY_FORMATS if unusual else MEMORY_FORMATS[:4]
        kwargs.append(("memory_format", Token("format", rng.choice(formats))))
    return tuple(args), tuple(kwargs)


def instantiate(token: Token, side: str) -> Any:
    """The argument object a token stands for, on ``side`` ("torch" or "tj")."""
    if token.what == "device":
        torch_device, tj_device = DEVICES[token.value]
        return torch_device() if side == "torch" else tj_device()
    if token.what == "dtype":
        if side == "torch":
            return torch_dtype(token.value)
        return DTYPE_SPELLINGS[token.spelling](token.value)
    if token.what == "other":
        other = np.zeros(1, numpy_dtype(token.value))
        return torch_twin(other) if side == "torch" else tj.to_device(jnp.asarray(other), "cpu")
    if token.what == "format":
        if token.value == '"channels_last"':
            return "channels_last"
        return None if token.value == "None" else getattr(torch, token.value)
    return token.value


def spell(token: Token) -> str:
    """The token as it reads in the tj call of a reproduction."""
    if token.what == "device":
        return token.value
    if token.what == "dtype":
        return token.spelling.format(token.value)
    if token.what == "other":
        return f'tj.to_device(jnp.zeros(1, jnp.{token.value}), "cpu")'
    if token.what == "format":
        return token.value if token.value in ("None", '"channels_last"') else f"torch.{token.value}"
    return repr(token.value)


def meaning(
    args: tuple[Token, ...], kwargs: tuple[tuple[str, Token], ...], leaf: Leaf, in_container: bool
) -> Call:
    """What the call asks for, as the table's predicates read it (where torch accepts it)."""
    device = dtype = None
    flags: list[Any] = []
    for token in args:
        if token.what == "device":
            device = token.value
        elif token.what == "dtype":
            dtype = token.value
        elif token.what == "other":
            device, dtype = '"cpu"', token.value
        else:
            flags.append(token.value)
    named = dict(kwargs)
    device = named["device"].value if "device" in named else device
    dtype = named["dtype"].value if "dtype" in named else dtype
    if "other" in named:
        device, dtype = '"cpu"', named["other"].value
    copy = named["copy"].value if "copy" in named else (flags[1] if len(flags) > 1 else False)
    form = ", ".join(
        [spell(token) for token in args] + [f"{key}={spell(token)}" for key, token in kwargs]
    )
    return Call(
        leaf=leaf,
        device=device,
        dtype=dtype,
        copy=copy is True,
        in_container=in_container,
        form=form,
        memory_format=named["memory_format"].value if "memory_format" in named else None,
    )


# --- containers ----------------------------------------------------------------------------


class Pair(typing.NamedTuple):
    first: Any
    second: Any


@dataclasses.dataclass
class Holder:
    first: Any
    second: Any = None


class Items(tuple):  # type: ignore[type-arg]
    """A tuple subclass built from an iterable, as ``tuple`` is."""

    __slots__ = ()


class TwoItems(tuple):  # type: ignore[type-arg]
    """A tuple subclass whose constructor takes its items as separate arguments."""

    __slots__ = ()

    def __new__(cls, first: Any, second: Any) -> TwoItems:
        return super().__new__(cls, (first, second))


class Batch(list):  # type: ignore[type-arg]
    """A list subclass."""


class Record(dict):  # type: ignore[type-arg]
    """A dict subclass."""


#: Container kinds, each built from its items: mappings from (key, value) pairs.
MAPPINGS: dict[str, Callable[[list[tuple[Any, Any]]], Any]] = {
    "dict": dict,
    "OrderedDict": collections.OrderedDict,
    "defaultdict": lambda items: collections.defaultdict(list, items),
    "Record(dict)": Record,
}
SEQUENCES: dict[str, Callable[[list[Any]], Any]] = {
    "list": list,
    "tuple": tuple,
    "Batch(list)": Batch,
    "Items(tuple)": Items,
    "TwoItems(tuple)": lambda items: TwoItems(*items),
    "Pair(NamedTuple)": lambda items: Pair(*items),
    "Holder(dataclass)": lambda items: Holder(*items),
}
#: A Flax NNX module holding JAX arrays: ``Module.to``'s side (torch: buffers of an ``nn.Module``).
MODULE = "Variables(nnx.Module)"


def nnx_module(arrays: list[Any]) -> Any:
    """A Flax NNX module whose state is ``arrays``, as ``v0``, ``v1``, ... (``Variables(...)``)."""
    from flax import nnx

    class Variables(nnx.Module):
        def __init__(self, arrays: list[Any]) -> None:
            for index, array in enumerate(arrays):
                setattr(self, f"v{index}", nnx.Variable(array))

    return Variables(arrays)


def torch_module(tensors: list[torch.Tensor]) -> torch.nn.Module:
    """The torch twin of :func:`nnx_module`: the same tensors as buffers ``v0``, ``v1``, ..."""
    module = torch.nn.Module()
    for index, tensor in enumerate(tensors):
        module.register_buffer(f"v{index}", tensor)
    return module


#: The kinds whose constructor takes exactly two items.
TWO_ITEMS = ("TwoItems(tuple)", "Pair(NamedTuple)", "Holder(dataclass)")
KEYS = ("x", "label", "b", "a", 3, 1, (0, "k"), None, 2.5)
