"""The checkpoint fuzzer's state draws: a twin's state dict saved, changed, loaded into a model.

A :class:`StateDraw` is an NNX model of drawn layers and its PyTorch twin (the same
attribute names, torch's layers), the twin's ``state_dict()`` as a source model holds
it, changed as checkpoints go wrong (a key dropped or added, a shape or a dtype
changed, the state nested in a training checkpoint), written one way
(``torch.save`` in either format, ``safetensors.torch.save_file``, or passed as a
mapping of torch tensors or NumPy arrays) and loaded with ``strict=`` or without (and,
tj's own, ``copy=False`` or ``device="cpu"`` / ``"auto"``, which change no value).
``judge_state`` loads it both ways: the oracle is ``twin.load_state_dict(torch.load(p),
strict=...)`` (``safetensors.torch.load_file`` for a safetensors file), tj's is
``tj.load_state(model, p, strict=...)``; it compares the loaded values bit for bit in the
twin's layout, the error where torch raises (tj's own, naming each key torch names and
the fix, with the model left as it was), and explains what differs by design by a row
of ``STATE_DIFFERENCES``.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support import fuzz, fuzz_runs
from tests.support.fuzz_runs import Different, Explained, Row

#: Layer kinds: how each is made in NNX and in torch, from its sizes.
LAYERS = ("linear", "linear-no-bias", "layernorm", "rmsnorm", "embed", "batchnorm", "conv")
WRITERS = ("torch.save", "torch.save-legacy", "safetensors", "torch-mapping", "numpy-mapping")
#: How a saved state goes wrong: a key dropped or added, a shape or dtype changed.
CHANGES = ("drop", "extra", "shape", "dtype")
#: The dtypes a changed entry is saved in (torch's load_state_dict casts it).
SAVED_DTYPES = ("float64", "float16", "bfloat16", "int32", "int64", "bool", "float32")
CONTAINERS = ("state_dict", "OrderedDict", "nested")

STATE_DIFFERENCES = (
    Row(
        "strict-false-refused",
        "load_state(..., strict=False) raises tj.StateDictError naming the fix, where torch "
        "loads the keys both hold and returns the missing and unexpected ones",
        "is always strict",
    ),
    Row(
        "num-batches-tracked-ignored",
        "a twin's BatchNorm num_batches_tracked is accepted and ignored: the NNX model has no "
        "such variable",
        "loading a twin's `.pt` into a model converts it like any int64 tensor",
    ),
)


@dataclasses.dataclass(frozen=True)
class Layer:
    kind: str
    sizes: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class StateDraw:
    """A model, its twin's saved state, what changed in it, and how it is loaded."""

    layers: tuple[Layer, ...]
    seed: int
    writer: str = "torch.save"
    container: str = "state_dict"
    #: ``(change, key)``: ``key`` dropped, added (a new key, or ``key`` + ``"_extra"``),
    #: reshaped, or saved as ``change``'s dtype (``"dtype:float64"``).
    changes: tuple[tuple[str, str], ...] = ()
    #: ``strict=`` given to both (``None``: not passed, torch's default).
    strict: bool | None = None
    #: ``tj.load_state``'s own keywords (no torch twin: the values must be torch's all
    #: the same): ``copy=False`` shares what it can; ``device=`` places elsewhere.
    copy: bool = True
    device: str | None = None

    def expression(self) -> str:
        """The draw as one line: what to rerun."""
        return fuzz_runs.expression(self)


class StateFinding(fuzz_runs.Finding):
    @property
    def kind(self) -> tuple[str, ...]:
        return (self.aspect, self.draw.writer)


class StateTally:
    def __init__(self) -> None:
        self.examples = 0
        self.refused = 0
        self.explained: dict[str, int] = {row.id: 0 for row in STATE_DIFFERENCES}


# --- the model and its twin ------------------------------------------------------------------


def _nnx_layer(layer: Layer, rngs: nnx.Rngs) -> nnx.Module:
    a, b = (*layer.sizes, 0)[:2]
    if layer.kind in ("linear", "linear-no-bias"):
        return nnx.Linear(a, b, use_bias=layer.kind == "linear", rngs=rngs)
    if layer.kind == "layernorm":
        return nnx.LayerNorm(a, rngs=rngs)
    if layer.kind == "rmsnorm":
        return nnx.RMSNorm(a, rngs=rngs)
    if layer.kind == "embed":
        return nnx.Embed(a, b, rngs=rngs)
    if layer.kind == "batchnorm":
        return nnx.BatchNorm(a, rngs=rngs)
    return nnx.Conv(a, b, kernel_size=(layer.sizes[2],), rngs=rngs)


def _torch_layer(layer: Layer) -> torch.nn.Module:
    a, b = (*layer.sizes, 0)[:2]
    if layer.kind in ("linear", "linear-no-bias"):
        return torch.nn.Linear(a, b, bias=layer.kind == "linear")
    if layer.kind == "layernorm":
        return torch.nn.LayerNorm(a)
    if layer.kind == "rmsnorm":
        return torch.nn.RMSNorm(a)
    if layer.kind == "embed":
        return torch.nn.Embedding(a, b)
    if layer.kind == "batchnorm":
        return torch.nn.BatchNorm1d(a)
    return torch.nn.Conv1d(a, b, layer.sizes[2])


class Net(nnx.Module):
    """Layers ``l0``, ``l1``, ... as drawn."""

    def __init__(self, layers: tuple[Layer, ...], rngs: nnx.Rngs) -> None:
        for i, layer in enumerate(layers):
            setattr(self, f"l{i}", _nnx_layer(layer, rngs))


def twin(layers: tuple[Layer, ...]) -> torch.nn.Module:
    module = torch.nn.Module()
    for i, layer in enumerate(layers):
        setattr(module, f"l{i}", _torch_layer(layer))
    return module


def source_state(draw_: StateDraw) -> dict[str, torch.Tensor]:
    """The twin's state as a trained model holds it (every entry drawn), then changed."""
    torch.manual_seed(draw_.seed)
    state = dict(twin(draw_.layers).state_dict())
    for name, value in state.items():
        if value.is_floating_point():
            state[name] = torch.randn(value.shape).abs() + 0.5
        else:
            state[name] = torch.randint(0, 100, value.shape)
    for change, key in draw_.changes:
        if change == "drop":
            state.pop(key, None)
        elif change == "extra":
            state[f"{key}_extra" if key in state else key] = torch.ones(2)
        elif change == "shape" and key in state:
            shape = state[key].shape
            state[key] = torch.ones((shape[0] + 1, *shape[1:]) if shape else (1,))
        elif change.startswith("dtype:") and key in state:
            value = state[key] * (10 if change.endswith(("int32", "int64")) else 1)
            state[key] = value.to(fuzz.torch_dtype(change.removeprefix("dtype:")))
    return state


# --- drawing ---------------------------------------------------------------------------------


def _layer(rng: random.Random) -> Layer:
    kind = rng.choice(LAYERS)
    sizes = tuple(rng.randint(1, 4) for _ in range(3 if kind == "conv" else 2))
    if kind == "conv":
        sizes = (sizes[0], sizes[1], min(sizes[2], 2))
    return Layer(kind, sizes)


def draw_layers(rng: random.Random) -> tuple[Layer, ...]:
    """One to three layers of drawn kinds and sizes."""
    return tuple(_layer(rng) for _ in range(rng.randint(1, 3)))


def draw_state(rng: random.Random) -> StateDraw:
    layers = draw_layers(rng)
    draw_ = StateDraw(layers=layers, seed=rng.randrange(2**16))
    keys = list(twin(layers).state_dict())
    changes: list[tuple[str, str]] = []
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        change = rng.choice(CHANGES)
        if change == "dtype":
            change = f"dtype:{rng.choice(SAVED_DTYPES)}"
        key = rng.choice([*keys, "head.weight"]) if change == "extra" else rng.choice(keys)
        changes.append((change, key))
    writer = rng.choice(WRITERS)
    return dataclasses.replace(
        draw_,
        writer=writer,
        container=rng.choice(CONTAINERS) if writer.startswith("torch.save") else "state_dict",
        changes=tuple(changes),
        strict=rng.choice([None, None, True, False]),
        copy=rng.random() < 0.8,
        device=rng.choice([None, None, None, "cpu", "auto"]),
    )


def smaller_state(draw_: StateDraw) -> list[StateDraw]:
    replace = dataclasses.replace
    candidates = [
        replace(draw_, changes=draw_.changes[:i] + draw_.changes[i + 1 :])
        for i in range(len(draw_.changes))
    ]
    if len(draw_.layers) > 1:
        candidates.append(replace(draw_, layers=draw_.layers[-1:], changes=()))
    for name, default in (
        ("container", "state_dict"), ("strict", None), ("seed", 0), ("copy", True),
        ("device", None),
    ):  # fmt: skip
        if getattr(draw_, name) != default:
            candidates.append(replace(draw_, **{name: default}))
    return candidates


# --- judging ---------------------------------------------------------------------------------


def _numpy(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """``tensor``'s values as a NumPy array of its dtype (bfloat16 through ml_dtypes)."""
    if tensor.dtype == torch.bool:
        return tensor.numpy().copy()
    dtype = fuzz.numpy_dtype(str(tensor.dtype).removeprefix("torch."))
    flat = tensor.reshape(-1).contiguous().view(torch.uint8).numpy().copy()
    return flat.view(dtype).reshape(tuple(tensor.shape))


def _write(draw_: StateDraw, state: dict[str, torch.Tensor], folder: Path) -> tuple[Any, Any]:
    """What each side is given (torch's, tj's): a path, or the mapping itself."""
    if draw_.writer == "torch-mapping":
        return state, state
    if draw_.writer == "numpy-mapping":
        return state, {name: _numpy(value) for name, value in state.items()}
    if draw_.writer == "safetensors":
        path = folder / "model.safetensors"
        safetensors.torch.save_file(state, path)
        return path, path
    saved: Any = state
    if draw_.container == "OrderedDict":
        saved = collections.OrderedDict(state)
    elif draw_.container == "nested":
        saved = {"model": state, "step": 3}
    path = folder / "checkpoint.pt"
    torch.save(saved, path, _use_new_zipfile_serialization=draw_.writer == "torch.save")
    return path, path


def _read_theirs(draw_: StateDraw, given: Any) -> Any:
    if isinstance(given, dict):
        return given
    if draw_.writer == "safetensors":
        return safetensors.torch.load_file(given)
    return torch.load(given, weights_only=True)


def _model_values(model: Net) -> dict[str, bytes]:
    return {name: np.asarray(value).tobytes() for name, value in tj.state_dict(model).items()}


def _judge(draw_: StateDraw, tally: StateTally | None) -> None:
    state = source_state(draw_)
    strict = {} if draw_.strict is None else {"strict": draw_.strict}
    with tempfile.TemporaryDirectory(prefix="ckptfuzz-state-") as folder:
        given, ours_given = _write(draw_, state, Path(folder))
        theirs_twin = twin(draw_.layers)
        theirs_error: BaseException | None = None
        incompatible = None
        try:
            incompatible = theirs_twin.load_state_dict(_read_theirs(draw_, given), **strict)
        except Exception as error:
            theirs_error = error
        model = Net(draw_.layers, rngs=nnx.Rngs(draw_.seed + 1))
        before = _model_values(model)
        ours_error: BaseException | None = None
        try:
            placed = {} if draw_.device is None else {"device": draw_.device}
            returned = tj.load_state(model, ours_given, copy=draw_.copy, **placed, **strict)
        except Exception as error:
            ours_error = error
    if ours_error is not None:
        if not isinstance(ours_error, tj.Torch2JaxDeviceError):
            raise Different("error: not the library's", "load_state", theirs_error, ours_error)
        if _model_values(model) != before:
            raise Different("a failed load changed the model", "load_state", "", ours_error)
        if "Fix" not in str(ours_error):
            raise Different("error: names no fix", "load_state", theirs_error, ours_error)
    if draw_.strict is False and ours_error is not None:
        if isinstance(ours_error, tj.StateDictError) and "strict=False" in str(ours_error):
            raise Explained("strict-false-refused")
    if theirs_error is not None:
        if ours_error is None:
            raise Different("error: tj takes what torch refuses", "load_state", theirs_error, "")
        if draw_.container == "nested":  # tj names the entry to pass instead of each key
            if "['model']" not in str(ours_error):
                raise Different(
                    "error: names not the entry", "load_state", theirs_error, ours_error
                )
        else:
            _names_the_keys(theirs_error, ours_error)
        if tally is not None:
            tally.refused += 1
        return
    if ours_error is not None:
        raise Different("error: tj refuses", "load_state", incompatible, ours_error)
    if returned is not model:
        raise Different("returned", "load_state", "the model", type(returned).__name__)
    _compare_values(theirs_twin, model, tally)


def _names_the_keys(theirs: BaseException, ours: BaseException) -> None:
    """Each key torch's error names (quoted) is named by tj's too."""
    text = str(theirs)
    quoted = [part for i, part in enumerate(text.split('"')) if i % 2 == 1]
    missing = [key for key in quoted if key and key not in str(ours)]
    if missing:
        raise Different("error: does not name the key", ", ".join(missing), theirs, ours)


def _compare_values(theirs_twin: torch.nn.Module, model: Net, tally: StateTally | None) -> None:
    theirs = theirs_twin.state_dict()
    ours = tj.state_dict(model, layout="torch")
    skipped = [name for name in theirs if name.endswith("num_batches_tracked")]
    if list(ours) != [name for name in theirs if name not in skipped]:
        raise Different("keys", "state_dict", list(theirs), list(ours))
    for name, value in ours.items():
        expected = theirs[name]
        if value.dtype != expected.dtype or value.shape != expected.shape:
            raise Different("dtype or shape", name, expected.dtype, value.dtype)
        if value.numpy().tobytes() != expected.numpy().tobytes():
            raise Different("values", name, expected.tolist(), value.tolist())
    if tally is not None and skipped:
        tally.explained["num-batches-tracked-ignored"] += 1


def judge_state(draw_: StateDraw, tally: StateTally | None = None) -> list[StateFinding]:
    """The differences between torch's ``load_state_dict`` and ``tj.load_state`` on
    ``draw_`` that no row of ``STATE_DIFFERENCES`` explains."""
    return fuzz_runs.outcome(draw_, _judge, tally, StateFinding)


def shrink_state(finding: StateFinding, budget: int = 40) -> StateFinding:
    return fuzz_runs.shrink(finding, judge_state, smaller_state, budget)


__all__ = ["STATE_DIFFERENCES", "StateDraw", "draw_state", "judge_state", "shrink_state"]
