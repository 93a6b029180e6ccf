"""What the junk-input oracle found (``tests/support/junk_inputs.py``), each kept as a call.

Each case failed before its fix: a raw NumPy, torch, JAX or Python error escaped, or the
library's own error named neither the value nor the fix. Now each raises the library's
error, naming the value (or the argument as ``name=``) and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from torch2jax_device import distributed as dist
from torch2jax_device import optim
from torch2jax_device.optim import lr_scheduler

AMBIGUOUS = np.ones(2)  # an array of several elements: no single truth value


def _optimizer() -> Any:
    return nnx.Optimizer(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), optim.SGD(lr=0.1), wrt=nnx.Param)


def _mesh() -> Any:
    return jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))


def _set_fp32_precision(value: Any) -> None:
    tj.backends.cuda.matmul.fp32_precision = value


# (the call, the library's error class, a fragment naming the value, the fix's words)
FINDINGS: dict[str, tuple[Callable[[], Any], type[Exception], str, str]] = {
    # Flags read with `if flag:` raised NumPy's ValueError or torch's RuntimeError.
    "to_jax-strict": (
        lambda: tj.to_jax(np.ones(2), strict=AMBIGUOUS),
        tj.ArgumentTypeError,
        "strict=",
        "Fix: pass strict=True or strict=False",
    ),
    "to_torch-copy": (
        lambda: tj.to_torch(np.ones(2), copy=torch.ones(2)),
        tj.ArgumentTypeError,
        "copy=",
        "Fix: pass copy=True",
    ),
    "strict_placement-transfer_guard": (
        lambda: tj.strict_placement(transfer_guard=AMBIGUOUS),
        tj.ArgumentTypeError,
        "transfer_guard=",
        "Fix",
    ),
    "set_strict_placement-enabled": (
        lambda: tj.set_strict_placement(AMBIGUOUS),
        tj.ArgumentTypeError,
        "enabled=",
        "Fix",
    ),
    "SGD-nesterov": (
        lambda: optim.SGD(lr=0.1, nesterov=AMBIGUOUS),
        tj.ArgumentTypeError,
        "nesterov=",
        "Fix",
    ),
    "Adam-amsgrad": (
        lambda: optim.Adam(amsgrad=torch.ones(2)),
        tj.ArgumentTypeError,
        "amsgrad=",
        "Fix",
    ),
    "RMSprop-centered": (
        lambda: optim.RMSprop(centered=AMBIGUOUS),
        tj.ArgumentTypeError,
        "centered=",
        "Fix",
    ),
    "OneCycleLR-three_phase": (
        lambda: lr_scheduler.OneCycleLR(_optimizer(), 0.1, total_steps=10, three_phase=AMBIGUOUS),
        tj.ArgumentTypeError,
        "three_phase=",
        "Fix",
    ),
    # Raw errors from values never checked.
    "OneCycleLR-div_factor-zero": (
        lambda: lr_scheduler.OneCycleLR(_optimizer(), 0.1, total_steps=10, div_factor=0),
        tj.ConfigError,
        "div_factor=0",
        "Fix",
    ),
    "OneCycleLR-pct_start-str": (
        lambda: lr_scheduler.OneCycleLR(_optimizer(), 0.1, total_steps=10, pct_start="nonsense"),
        tj.ConfigError,
        "'nonsense'",
        "between 0 and 1",
    ),
    "OneCycleLR-anneal_strategy-array": (
        lambda: lr_scheduler.OneCycleLR(
            _optimizer(), 0.1, total_steps=10, anneal_strategy=np.array(["a", "b"])
        ),
        tj.ConfigError,
        "array(['a', 'b']",
        "must be one of",
    ),
    "MultiStepLR-milestones-object": (
        lambda: lr_scheduler.MultiStepLR(_optimizer(), milestones=object()),
        tj.ArgumentTypeError,
        "object",
        "e.g. [30, 80]",
    ),
    "MultiStepLR-milestones-str": (
        lambda: lr_scheduler.MultiStepLR(_optimizer(), milestones="nonsense"),
        tj.ArgumentTypeError,
        "'nonsense'",
        "e.g. [30, 80]",
    ),
    "LambdaLR-returns-None": (
        lambda: lr_scheduler.LambdaLR(_optimizer(), lambda epoch: None),
        tj.ConfigError,
        "returned NoneType None",
        "must return",
    ),
    "ReduceLROnPlateau-mode-array": (
        lambda: lr_scheduler.ReduceLROnPlateau(_optimizer(), mode=np.array(["a", "b"])),
        tj.ConfigError,
        "array(['a', 'b']",
        "Fix: pass mode='min'",
    ),
    "ReduceLROnPlateau-step-str": (
        lambda: lr_scheduler.ReduceLROnPlateau(_optimizer()).step("nonsense"),
        tj.ArgumentTypeError,
        "'nonsense'",
        "Fix: pass the epoch's loss",
    ),
    "cuda.manual_seed-inf": (
        lambda: tj.cuda.manual_seed(math.inf),
        tj.SeedError,
        "inf",
        "pass an int",
    ),
    "backends.fp32_precision-list": (
        lambda: _set_fp32_precision([]),
        tj.ConfigError,
        "got []",
        "must be 'ieee'",
    ),
    "make_global_batch-mesh": (
        lambda: dist.make_global_batch(np.ones(1), object()),
        tj.DistributedError,
        "not object",
        "Fix: pass the mesh init_device_mesh returned",
    ),
    "make_global_batch-axis": (
        lambda: dist.make_global_batch(np.ones(1), _mesh(), axis=1.5),
        tj.DistributedError,
        "axis 1.5",
        "Fix: pass one of them",
    ),
    "init_device_mesh-mesh_dim_names": (
        lambda: dist.init_device_mesh("cpu", (1,), mesh_dim_names=object()),
        tj.DistributedError,
        "<object object",
        "must be 1 distinct strings",
    ),
    "init_device_mesh-axis_types": (
        lambda: dist.init_device_mesh("cpu", (1,), axis_types=-1),
        tj.DistributedError,
        "axis_types -1",
        "must be one jax.sharding.AxisType",
    ),
    "Parameter.view-str": (
        lambda: tj.Parameter(jnp.ones((2, 3))).view("nonsense"),
        tj.ArgumentTypeError,
        "view('nonsense')",
        "Fix",
    ),
    "Parameter-index-str": (
        lambda: tj.Parameter(jnp.ones((2, 3)))["nonsense"],
        tj.InvalidIndexError,
        "['nonsense']",
        "Fix: index with ints",
    ),
    "make_global_batch-text": (
        lambda: dist.make_global_batch(np.array(["a", "b"]), _mesh()),
        tj.DistributedError,
        "dtype <U1",
        "Fix: keep it out of the batch",
    ),
    "make_global_batch-int-past-64-bits": (
        lambda: dist.make_global_batch(2**70, _mesh()),
        tj.DistributedError,
        str(2**70)[:20],
        "Fix",
    ),
    "ReduceLROnPlateau-load_state_dict-object": (
        lambda: lr_scheduler.ReduceLROnPlateau(_optimizer()).load_state_dict(object()),
        tj.StateDictError,
        "object",
        "Fix: pass the dict",
    ),
    # The library's errors that named neither the value nor the fix.
    "device-negative-index": (
        lambda: tj.device("cpu", -1),
        tj.InvalidDeviceError,
        "got -1",
        "Fix: give an index",
    ),
    "device-bytes-not-utf8": (
        lambda: tj.device(b"\xff"),
        tj.InvalidDeviceError,
        r"b'\xff'",
        "Fix: write a device",
    ),
    "device_of-nothing": (
        lambda: tj.device_of(object()),
        tj.EmptyTreeError,
        "object",
        "Fix: pass the model",
    ),
    "to_device-dtype-list": (
        lambda: tj.to_device(np.ones(2), "cpu", dtype=[]),
        tj.DTypeError,
        "asked for []",
        "Fix",
    ),
    "to_torch-dtype-list": (
        lambda: tj.to_torch(np.ones(2), dtype=[]),
        tj.DTypeError,
        "asked for []",
        "Fix: pass a torch dtype",
    ),
    "to_torch-object": (
        lambda: tj.to_torch(object()),
        tj.ConversionError,
        "object",
        "Fix: pass one of them",
    ),
    "configure-platforms-empty": (
        lambda: tj.configure(platforms=[]),
        tj.ConfigError,
        "platforms=[]",
        "Fix: name one",
    ),
    "cuda.manual_seed-huge": (
        lambda: tj.cuda.manual_seed(2**70),
        tj.SeedError,
        str(2**70),
        "pass a seed",
    ),
    "set_per_process_memory_fraction-device": (
        lambda: tj.cuda.set_per_process_memory_fraction(0.5, device=1),
        tj.ConfigError,
        "cuda:1",
        "Fix: call it without a device",
    ),
    "make_global_batch-nothing": (
        lambda: dist.make_global_batch(None, _mesh()),
        tj.EmptyTreeError,
        "NoneType None",
        "Fix: pass this process's rows",
    ),
    "MultiStepLR-milestones-tensor": (
        lambda: lr_scheduler.MultiStepLR(_optimizer(), milestones=torch.ones(2)),
        tj.ArgumentTypeError,
        "milestones=tensor([1., 1.])",
        "e.g. [30, 80]",
    ),
    "LinearLR-start_factor": (
        lambda: lr_scheduler.LinearLR(_optimizer(), start_factor=-1),
        tj.ConfigError,
        "start_factor=-1",
        "expected to be",
    ),
    "scheduler-load_state_dict-object": (
        lambda: lr_scheduler.StepLR(_optimizer(), 1).load_state_dict(object()),
        tj.StateDictError,
        "object",
        "Fix: pass the dict",
    ),
}


@pytest.mark.parametrize("name", list(FINDINGS))
def test_junk_the_oracle_found_is_refused_naming_the_value_and_the_fix(name: str) -> None:
    call, error, value, fix = FINDINGS[name]
    before = jax.config.jax_default_matmul_precision
    try:
        with pytest.raises(error) as raised:
            call()
    finally:
        jax.config.update("jax_default_matmul_precision", before)
    message = str(raised.value)
    assert value in message, message
    assert fix in message, message
