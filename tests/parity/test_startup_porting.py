"""Start-up order and start-up variables, JAX's side each in a fresh process (JAX starts once).

torch does not mind when a process joins its job; JAX must join before it starts
(``startup-order``). Variables read at start-up are read by both only then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import free_port

_TJ_ORDER = textwrap.dedent(
    """
    import json, sys
    import torch2jax_device as tj
    # No launcher: the job is named by init_method alone, so there is no job to join early.
    job = dict(init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0, world_size=1)
    try:
        if sys.argv[1] == "query-first":
            tj.cuda.is_available()
            tj.distributed.init_process_group("gloo", timeout=20, **job)
        else:
            tj.distributed.init_process_group("gloo", timeout=20, **job)
            tj.cuda.is_available()
        joined = tj.distributed.is_initialized()
        tj.distributed.destroy_process_group()
    except tj.DistributedError as error:
        joined = str(error)
    print("RESULT " + json.dumps({"tj": joined}))
    """
)


def _python(code: str, *args: str, cpu_only: bool = True) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    if cpu_only:
        environment["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=environment,
        timeout=deadline(180),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    found: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return found


def _join(order: str) -> dict[str, Any]:
    """A one-process job named by ``init_method`` only (a launcher's job is joined early:
    see ``dist-startup-order``): torch's side in this process (torch does not mind what
    ran before), the port's in a fresh one (JAX starts once). Both join with or without
    a device query first."""
    import torch
    import torch.distributed as dist

    if order == "query-first":
        torch.cuda.is_available()
    job = f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group("gloo", init_method=job, rank=0, world_size=1)
    try:
        torch_joined = dist.is_initialized()
    finally:
        dist.destroy_process_group()
    return {"torch": torch_joined, **_python(_TJ_ORDER, order, str(free_port()))}


@pytest.mark.idiom("startup-order")
def test_joining_after_a_query_fails_in_jax_only() -> None:
    found = _join("query-first")
    assert found["torch"] is True
    assert "init_process_group" in found["tj"] and "before" in found["tj"], found["tj"]


@pytest.mark.idiom("startup-order")
def test_joining_first_works_in_both() -> None:
    assert _join("init-first") == {"torch": True, "tj": True}


_STARTUP_VARIABLES = textwrap.dedent(
    """
    import json, os
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import jax.numpy as jnp, torch, torch2jax_device as tj
    tj.configure(preallocate=False)
    counts = [torch.cuda.device_count(), tj.cuda.device_count()]  # JAX starts here
    if counts[0]:
        torch.zeros(1, device="cuda")  # torch's CUDA starts here
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # too late for both to lose the GPU
    later = [torch.cuda.device_count(), tj.cuda.device_count()]
    still = [
        bool(counts[0]) and float(torch.ones(2, device="cuda").sum()) == 2.0,
        bool(counts[1]) and float(tj.to_device(jnp.ones(2), "cuda").sum()) == 2.0,
    ]
    torch_ok = float(torch.ones(2).sum()) == 2.0
    tj_ok = float(tj.to_device([1.0, 1.0], "cpu")[0] + 1) == 2.0
    print("RESULT " + json.dumps({
        "counts": counts, "later": later, "still": still, "ok": [torch_ok, tj_ok],
        "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
    }))
    """
)


@pytest.fixture(scope="module")
def startup_variables() -> dict[str, Any]:
    # Every platform JAX has, as torch sees every GPU: on a GPU machine both count one.
    return _python(_STARTUP_VARIABLES, cpu_only=False)


@pytest.mark.idiom("cuda-visible-devices")
def test_visible_devices_are_read_once_by_both(startup_variables: dict[str, Any]) -> None:
    # JAX reads the variable when it starts (tj.cuda.device_count() starts it), torch when
    # CUDA starts; once started, both keep computing on the GPU they had. Only torch's
    # count differs: torch.cuda.device_count() asks NVML, which re-reads the variable
    # (torch 2.11 on an H200 counted 0 after the change, while computing on cuda:0).
    torch_count, tj_count = startup_variables["counts"]
    assert torch_count == tj_count <= 1
    assert startup_variables["still"] == [bool(torch_count), bool(tj_count)]
    torch_later, tj_later = startup_variables["later"]
    assert tj_later == tj_count
    assert torch_later in (0, torch_count)


@pytest.mark.idiom("cuda-alloc-conf")
def test_allocator_settings_before_start(startup_variables: dict[str, Any]) -> None:
    assert startup_variables["ok"] == [True, True]
    assert startup_variables["preallocate"] == "false"
