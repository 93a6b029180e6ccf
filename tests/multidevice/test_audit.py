"""The side-by-side audit on 4 simulated CPU devices (the 1-device half is in ``parity/``).

torch's CPU build has one CPU device: where the port places data on ``cpu:N``, the torch
side reads ``torch.device("cpu", N)`` (what torch reports for ``cuda:N``), and torch's
device errors come from its ``meta`` device meeting the CPU. Run it as a script for the
tally: ``JAX_NUM_CPU_DEVICES=4 python -m tests.multidevice.test_audit``.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

import torch2jax_device as tj
from tests.parity.test_audit import aligned_numpy, copy_then_write, reads
from tests.support.audit import Case, assert_clean, audit, summary


def on(device: str, size: int = 3) -> Any:
    return tj.to_device(jnp.ones(size), device)


def model_on(device: str) -> nnx.Linear:
    return tj.to_device(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), device)


@tj.strict_placement
def step(weight: Any, batch: Any) -> Any:
    return (weight * batch).sum()


def in_strict_block(body: Any) -> Any:
    with tj.strict_placement():
        return body()


def all_cases() -> list[Case]:
    meta_meets_cpu = lambda: torch.ones(3, device="meta") + torch.ones(3)  # noqa: E731
    return [
        Case(
            "parameter-device-indexed",
            lambda: reads(torch.device("cpu", 2)),
            lambda: reads(next(tj.parameters(model_on("cpu:2"))).device),
        ),
        Case(
            "device-of-indexed",
            lambda: reads(torch.device("cpu", 3)),
            lambda: reads(tj.device_of(model_on("cpu:3"))),
        ),
        Case(
            "list-devices",
            lambda: [str(torch.device("cpu", index)) for index in range(4)],
            lambda: [str(device) for device in tj.list_devices("cpu")],
        ),
        Case(
            "default-device-unset",
            lambda: reads(torch.get_default_device()),
            lambda: reads(tj.get_default_device()),
            documented="**Unset means JAX's default**",
        ),
        Case(
            "default-device-in-context",
            lambda: _in(torch.device("cpu", 1), lambda: reads(torch.get_default_device())),
            lambda: _in(tj.device("cpu:1"), lambda: reads(tj.get_default_device())),
        ),
        Case("device-of-mixed", meta_meets_cpu, lambda: tj.device_of([on("cpu:0"), on("cpu:1")])),
        Case(
            "check-same-device-mixed",
            meta_meets_cpu,
            lambda: tj.check_same_device(model_on("cpu:1"), on("cpu:2")),
        ),
        Case(
            "parameter-device-in-a-tree",
            lambda: reads(torch.device("cpu", 1)),
            lambda: reads(next(tj.parameters({"w": on("cpu:1")})).device),
        ),
        Case(
            "copy-aligned-numpy-to-another-device",
            lambda: copy_then_write(torch.arange(4.0), lambda t: t.to("cpu", copy=True)).tolist(),
            lambda: np.asarray(
                copy_then_write(aligned_numpy(), lambda x: tj.to_device(x, "cpu:2", copy=True))
            ).tolist(),
        ),
        Case(
            "strict-host-batch",
            meta_meets_cpu,
            lambda: step(on("cpu:1"), np.ones(3, np.float32)),
        ),
        Case(
            "strict-zero-d-host-value",
            lambda: float((torch.ones(3) * torch.tensor(2.0)).sum()),
            lambda: float(step(on("cpu:1"), np.float32(2.0))),
        ),
        Case(
            "strict-devices-meet-in-a-block",
            meta_meets_cpu,
            lambda: in_strict_block(lambda: on("cpu:0") + on("cpu:3")),
        ),
    ]


def _in(device: Any, body: Any) -> Any:
    with device:
        return body()


def test_no_undocumented_differences_on_four_devices() -> None:
    assert_clean(audit(all_cases()))


if __name__ == "__main__":
    print(summary(audit(all_cases())))
