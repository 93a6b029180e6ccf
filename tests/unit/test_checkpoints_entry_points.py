"""The checkpoint and optimizer-state entry points: torch's and safetensors' spellings, and
junk refused by the library, naming the value and the fix.

Each test is one of the requests the junk-input oracle (``test_public_api_junk.py``) and the
mirrored-API oracle (``tests/parity/test_api_mirror.py``) left for these modules; those
oracles sweep every value, these pin the contract each fix keeps (the builtin class torch
raises, safetensors' ``filename=``, ``Module.state_dict``'s keywords) side by side with torch
where torch has an answer.
"""

from __future__ import annotations

import errno
import io
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch
from flax import nnx

import torch2jax_device as tj
from torch2jax_device import optim

W = {"w": np.arange(4, dtype=np.float32)}


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "w.safetensors"
    tj.save_file(W, path)
    return path


# ---- safetensors' filename= ----------------------------------------------------------------


def test_safetensors_verbs_take_safetensors_keyword_filename(tmp_path: Path) -> None:
    theirs, ours = tmp_path / "theirs.safetensors", tmp_path / "ours.safetensors"
    safetensors.torch.save_file({"w": torch.arange(4.0)}, filename=theirs)
    tj.save_file(W, filename=ours)
    assert tj.load_file(filename=theirs)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert safetensors.torch.load_file(filename=ours)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    with (
        tj.safe_open(filename=ours, framework="pt") as mine,
        safetensors.safe_open(filename=ours, framework="pt") as reference,
    ):
        assert mine.keys() == list(reference.keys())


@pytest.mark.parametrize(
    "junk", [object(), 1.5, [], {}, torch.ones(2)], ids=lambda junk: type(junk).__name__
)
def test_a_path_that_is_no_path_is_refused_naming_it(junk: Any, saved: Path) -> None:
    for call in (
        lambda: tj.load_file(junk),
        lambda: tj.safe_open(junk),
        lambda: tj.save_file(W, junk),
    ):
        with pytest.raises(tj.ArgumentTypeError, match=f"not {type(junk).__name__} .*Fix: pass"):
            call()


def test_a_nul_byte_in_a_path_is_the_librarys_error(tmp_path: Path) -> None:
    for call in (
        lambda p: tj.load_file(p),
        lambda p: tj.safe_open(p),
        lambda p: tj.save_file(W, p),
    ):
        with pytest.raises(tj.CheckpointError, match=r"NUL byte.*Fix"):
            call(b"a\0b")
    assert list(tmp_path.iterdir()) == []


# ---- a missing file, a directory: torch's classes, the library's errors --------------------


def test_a_missing_file_is_torchs_file_not_found_error_and_the_librarys(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pt"
    with pytest.raises(FileNotFoundError) as theirs:
        torch.load(missing)
    for call in (
        lambda: tj.load(missing),
        lambda: tj.load_file(missing),
        lambda: tj.safe_open(missing),
        lambda: tj.DeviceMap.plan(missing),
        lambda: tj.load_state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), missing),
    ):
        with pytest.raises(tj.CheckpointFileNotFoundError) as ours:
            call()
        assert isinstance(ours.value, tj.CheckpointError)
        assert (ours.value.errno, ours.value.filename) == (theirs.value.errno, str(missing))
        assert str(missing) in str(ours.value) and "Fix: check the path" in str(ours.value)


def test_a_directory_is_torchs_is_a_directory_error_and_the_librarys(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as theirs:
        torch.load(tmp_path)
    for call in (
        lambda: tj.load(tmp_path),
        lambda: tj.load_file(tmp_path),
        lambda: tj.DeviceMap.plan(tmp_path),
        lambda: tj.load_state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), tmp_path),
        lambda: tj.save_file(W, tmp_path),
    ):
        with pytest.raises(tj.CheckpointIsADirectoryError, match="Fix: name a file") as ours:
            call()
        assert ours.value.errno == theirs.value.errno == errno.EISDIR


def test_a_file_on_the_way_is_torchs_not_a_directory_error(saved: Path) -> None:
    inside = saved / "w.pt"
    with pytest.raises(NotADirectoryError):
        torch.load(inside)
    with pytest.raises(tj.CheckpointNotADirectoryError, match="Fix:"):
        tj.load(inside)


# ---- flags and string options --------------------------------------------------------------


@pytest.mark.parametrize("flag", ["weights_only", "mmap", "progress"])
def test_a_flag_with_no_truth_value_is_refused_naming_it(flag: str, saved: Path) -> None:
    with pytest.raises(tj.ArgumentTypeError, match=f"{flag}=.*Fix: pass {flag}=True"):
        tj.load(saved, **{flag: np.array([True, False])})


def test_string_options_given_arrays_are_refused_as_unknown_values(saved: Path) -> None:
    choices = np.array(["mmap", "pread"])
    with pytest.raises(tj.InvalidDeviceError, match=r"backend=.*not one of"):
        tj.load_file(saved, backend=choices)
    with pytest.raises(tj.InvalidDeviceError, match=r"backend=.*not one of"):
        tj.safe_open(saved, backend=choices)
    for framework in ([], {}, choices):
        with pytest.raises(tj.InvalidDeviceError, match="framework"):
            tj.safe_open(saved, framework)
    with pytest.raises(tj.ConversionError, match="layout must be 'jax' or 'torch'"):
        tj.state_dict(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), layout=np.array(["jax", "torch"]))


def test_a_closed_file_says_what_to_pass(saved: Path) -> None:
    file = open(saved, "rb")
    file.close()
    with pytest.raises(tj.CheckpointError, match=r"is closed\. Fix: pass an open file"):
        tj.load(file)


# ---- DeviceMap -----------------------------------------------------------------------------


def test_device_map_names_tensors_by_str(saved: Path) -> None:
    plan = tj.DeviceMap.plan(saved)
    for name in ([], {}, np.array(["w"])):
        with pytest.raises(tj.ArgumentTypeError, match="by its str name"):
            plan.destination(name)
        with pytest.raises(tj.ArgumentTypeError, match="by its str name"):
            plan(name, (4,), np.float32)
    closed = io.StringIO("w")
    closed.close()
    for names in (object(), 1, None, "w", np.array(["w"]), closed, Path("w")):
        with pytest.raises(tj.ArgumentTypeError, match=r"iterable of tensor names.*Fix"):
            plan.grouped(names)
    assert list(plan.grouped(["w"]).values()) == [["w"]]


# ---- tj.state_dict and tj.load_state in torch's spellings ----------------------------------


def _twins() -> tuple[nnx.Linear, torch.nn.Linear]:
    return nnx.Linear(3, 4, rngs=nnx.Rngs(0)), torch.nn.Linear(3, 4)


def test_state_dict_honours_prefix_and_destination_as_torch() -> None:
    model, twin = _twins()
    for prefix in ("", "encoder."):
        theirs: OrderedDict[str, Any] = OrderedDict(old=1)
        ours: OrderedDict[str, Any] = OrderedDict(old=1)
        assert twin.state_dict(destination=theirs, prefix=prefix) is theirs
        assert tj.state_dict(model, destination=ours, prefix=prefix, layout="torch") is ours
        assert list(ours) == list(theirs)
        assert list(tj.state_dict(model, prefix=prefix, layout="torch")) == list(
            twin.state_dict(prefix=prefix)
        )
    assert list(tj.state_dict(model, prefix="m.")) == ["m.kernel", "m.bias"]


def test_state_dict_takes_keep_vars_both_ways() -> None:
    model, _ = _twins()
    plain = tj.state_dict(model)
    kept = tj.state_dict(model, keep_vars=True)
    assert list(kept) == list(plain) and all(kept[n] is plain[n] for n in plain)
    with pytest.raises(tj.ArgumentTypeError, match=r"keep_vars=.*Fix"):
        tj.state_dict(model, keep_vars=np.ones(2))
    with pytest.raises(tj.ArgumentTypeError, match=r"prefix must be a str.*Fix"):
        tj.state_dict(model, prefix=1)
    with pytest.raises(tj.ArgumentTypeError, match=r"destination must be None or a dict.*Fix"):
        tj.state_dict(model, destination=[])


def test_load_state_takes_torchs_keyword_and_positional_order() -> None:
    model, twin = _twins()
    state = tj.state_dict(nnx.Linear(3, 4, rngs=nnx.Rngs(1)))
    twin.load_state_dict(state_dict=twin.state_dict())
    twin.load_state_dict(twin.state_dict(), True, False)
    tj.load_state(model, state_dict=state)
    tj.load_state(model, state, True, False)
    assert model.kernel[...].tolist() == state["kernel"].tolist()
    with pytest.raises(tj.StateDictError, match="strict=False"):
        tj.load_state(model, state, False)  # torch's positional strict, refused by name
    with pytest.raises(tj.ArgumentTypeError, match=r"strict.*Fix: pass a device by keyword"):
        tj.load_state(model, state, "cpu")  # the device, third before torch's order


def test_a_state_that_shares_no_name_says_what_a_state_is() -> None:
    model, _ = _twins()
    for state in ({}, {"nonsense": np.ones(2)}):
        with pytest.raises(tj.StateDictError, match=r"Missing key.*a dict of .*Fix: pass the"):
            tj.load_state(model, state)


# ---- optimizer state -----------------------------------------------------------------------


@pytest.fixture
def group() -> optim.ParamGroup:
    optimizer = nnx.Optimizer(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), optim.Adam(lr=0.1), wrt=nnx.Param)
    return optim.param_groups(optimizer)[0]


def test_a_missing_group_key_is_a_key_error_naming_the_keys(group: optim.ParamGroup) -> None:
    with pytest.raises(tj.MissingKeyError, match=r"no key 'nonsense': it holds 'lr'.*Fix"):
        group["nonsense"]
    with pytest.raises(KeyError, match="a group's keys are str"):
        group[[]]  # type: ignore[index]
    assert group.get("nonsense", "default") == "default" and "nonsense" not in group
    assert {"lr": 1}.get("nonsense") is None  # the protocol .get() relies on: a KeyError


@pytest.mark.parametrize(
    "value", [object(), "nonsense", [], None, torch.ones(2)], ids=lambda value: type(value).__name__
)
def test_a_group_value_that_is_no_number_is_refused_naming_it(
    group: optim.ParamGroup, value: Any
) -> None:
    for key in ("lr", "betas", "initial_lr"):
        with pytest.raises(tj.ArgumentTypeError, match=rf"\['{key}'\] = \.\.\."):
            group[key] = value
    with pytest.raises(tj.ArgumentTypeError, match=r"a group's keys are str.*Fix"):
        group[[]] = 1  # type: ignore[index]
    assert group["lr"] == 0.1


@pytest.mark.parametrize(
    "leaf", [object(), "nonsense", [], lambda: 0], ids=lambda leaf: type(leaf).__name__
)
def test_hyperparameter_of_no_leaf_is_refused_naming_it(leaf: Any) -> None:
    with pytest.raises(tj.ArgumentTypeError, match=r"no hyperparameter leaf.*Fix: pass"):
        optim.hyperparameter(leaf)


def test_the_optimizers_say_what_their_first_argument_is() -> None:
    with pytest.raises(tj.ArgumentTypeError, match=r"SGD's first argument \(torch's params\)"):
        optim.SGD(0.1)
