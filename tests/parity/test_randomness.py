"""Seeds, generators and random state: torch's global generator against JAX's keys.

The numbers differ between the frameworks; what must agree is what a script relies
on: the same seed gives the same numbers again, another seed other numbers, a saved
state replays, results land where they should with the dtype they should.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.deadlines import deadline

from .harness import normalize


@pytest.fixture
def torch_generator_state() -> Iterator[None]:
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


@pytest.mark.idiom("manual-seed")
@pytest.mark.usefixtures("torch_generator_state")
def test_a_seed_replays_its_numbers_in_both() -> None:
    def torch_draw(seed: int) -> list[float]:
        torch.manual_seed(seed)
        return torch.rand(3).tolist()

    def jax_draw(seed: int) -> list[float]:
        key = jax.random.key(seed)
        return jax.random.uniform(key, (3,)).tolist()

    for draw in (torch_draw, jax_draw):
        assert draw(0) == draw(0)
        assert draw(0) != draw(1)
    assert torch_draw(0) != jax_draw(0)  # the guide says so: the numbers differ


@pytest.mark.idiom("generator-device")
def test_a_generator_on_a_device_and_a_key() -> None:
    generator = torch.Generator(device="cpu").manual_seed(0)
    theirs = torch.randn(3, generator=generator)
    again = torch.randn(3, generator=torch.Generator(device="cpu").manual_seed(0))
    with tj.device("cpu"):
        ours = jax.random.normal(jax.random.key(0), (3,))
    assert normalize(again) == normalize(theirs)
    assert normalize(jax.random.normal(jax.random.key(0), (3,)))[3] == normalize(ours)[3]
    assert normalize(ours)[:3] == normalize(theirs)[:3]  # placement and dtype


@pytest.mark.idiom("rng-state")
@pytest.mark.usefixtures("torch_generator_state")
def test_saved_random_state_replays_in_both() -> None:
    state = torch.get_rng_state()
    first = torch.rand(4)
    torch.set_rng_state(state)
    assert torch.equal(torch.rand(4), first)

    key = jax.random.key(7)
    saved = np.asarray(jax.random.key_data(key))  # what a checkpoint keeps
    restored = jax.random.wrap_key_data(jnp.asarray(saved))
    np.testing.assert_array_equal(jax.random.uniform(restored, (4,)), jax.random.uniform(key, (4,)))


# The JAX side needs its own process (XLA_FLAGS is read when JAX starts); the torch side
# runs here, where torch is already imported, with its determinism switch put back after.
_DETERMINISTIC = textwrap.dedent(
    """
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_gpu_deterministic_ops=true"
    import jax, jax.numpy as jnp, numpy as np
    data = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)
    total = jax.jit(lambda x: x.sum(0))
    print(json.dumps([np.asarray(total(jnp.asarray(data))).tobytes().hex() for _ in range(3)]))
    """
)


@pytest.fixture
def torch_deterministic() -> Iterator[None]:
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(was)


@pytest.mark.idiom("deterministic")
def test_the_determinism_flag_starts_jax_and_runs_repeat_bit_for_bit(
    torch_deterministic: None,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-c", _DETERMINISTIC], capture_output=True, text=True, env=env,
        timeout=deadline(180), check=True,
    )  # fmt: skip
    jax_runs = [bytes.fromhex(run) for run in json.loads(result.stdout.splitlines()[-1])]
    data = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)
    torch_runs = [torch.from_numpy(data).sum(0).numpy().tobytes() for _ in range(3)]
    assert len(set(torch_runs)) == len(set(jax_runs)) == 1
    difference = np.abs(
        np.frombuffer(torch_runs[0], np.float32) - np.frombuffer(jax_runs[0], np.float32)
    )
    assert float(difference.max()) < 1e-4
