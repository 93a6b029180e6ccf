"""Device indices, default devices and current devices with 4 simulated CPU devices."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch

import torch2jax_device as tj
from torch2jax_device._src import context
from torch2jax_device._src import runtime as _runtime

CPUS = jax.local_devices(backend="cpu")


def test_four_cpu_devices_exist() -> None:
    assert len(CPUS) == 4
    assert tj.list_devices("cpu") == [tj.device("cpu", i) for i in range(4)]


@pytest.mark.parametrize("index", range(4))
def test_index_is_the_position_among_local_devices(index: int) -> None:
    assert tj.resolve(f"cpu:{index}") is CPUS[index]
    assert tj.device(f"cpu:{index}").jax_device == CPUS[index]
    assert tj.device(CPUS[index]) == tj.device("cpu", index)
    assert tj.device(f"cpu:{index}") == CPUS[index]
    assert CPUS[index] == tj.device(f"cpu:{index}")


def test_cpu3_is_the_fourth_device() -> None:
    assert tj.resolve("cpu:3") == jax.local_devices(backend="cpu")[3]


def test_index_past_the_end_names_what_exists() -> None:
    with pytest.raises(
        tj.DeviceUnavailableError, match=r"cpu:4.*4 cpu device\(s\).*cpu:0 to cpu:3"
    ):
        tj.resolve("cpu:4")
    assert tj.device("cpu:4") != CPUS[0]


def test_arrays_created_in_context_land_on_the_device() -> None:
    with tj.device("cpu:2"):
        created = [jnp.zeros(3), jnp.arange(4), jax.random.normal(jax.random.key(0), (2,))]
        jitted = jax.jit(lambda: jnp.ones(2))()
    for array in [*created, jitted]:
        assert array.device == CPUS[2]
    assert jnp.zeros(1).device == CPUS[0]


def test_contexts_nest_and_restore_on_exceptions() -> None:
    with tj.device("cpu:1"):
        with pytest.raises(ValueError, match="boom"), tj.device("cpu:3"):
            assert jnp.zeros(1).device == CPUS[3]
            raise ValueError("boom")
        assert jnp.zeros(1).device == CPUS[1]
        with tj.device("cpu:2"), tj.device("cpu:2"):
            assert tj.get_default_device() == tj.device("cpu:2")
        assert tj.get_default_device() == tj.device("cpu:1")
    assert jnp.zeros(1).device == CPUS[0]


def test_unavailable_device_fails_on_enter_and_changes_nothing() -> None:
    with tj.device("cpu:1"):
        with pytest.raises(tj.DeviceUnavailableError), tj.device("cpu:9"):
            pytest.fail("entered an unavailable device")
        with pytest.raises(tj.DeviceUnavailableError):
            tj.set_default_device("cuda")
        assert jnp.zeros(1).device == CPUS[1]


def test_decorator_form() -> None:
    @tj.device("cpu:3")
    def make() -> jax.Array:
        return jnp.zeros(2)

    assert make().device == CPUS[3]
    assert make.__name__ == "make"
    assert jnp.zeros(1).device == CPUS[0]


def test_decorator_on_a_generator_holds_for_each_step_and_not_between() -> None:
    @tj.device("cpu:3")
    def batches() -> Any:
        sent = yield jnp.zeros(1)
        try:
            yield (sent, jnp.zeros(1))
        except KeyError:
            yield jnp.zeros(1)
        return "done"

    steps = batches()
    assert next(steps).device == CPUS[3]
    assert jnp.zeros(1).device == CPUS[0]  # the caller's code between steps
    sent, second = steps.send("hello")
    assert (sent, second.device) == ("hello", CPUS[3])
    assert steps.throw(KeyError("handled")).device == CPUS[3]
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert stop.value.value == "done" and jnp.zeros(1).device == CPUS[0]
    closed = batches()
    next(closed)
    closed.close()
    assert jnp.zeros(1).device == CPUS[0]
    first, (nothing, second) = list(batches())  # plain iteration sends None
    assert (first.device, nothing, second.device) == (CPUS[3], None, CPUS[3])


def test_decorator_on_an_async_function_is_refused_with_the_fix() -> None:
    async def fetch() -> None:
        pass

    async def stream() -> Any:
        yield 1

    for function in (fetch, stream):
        with pytest.raises(tj.ArgumentTypeError, match=r"async function.*with tj.device"):
            tj.device("cpu:1")(function)


def test_setter_and_context_compose() -> None:
    tj.set_default_device("cpu:1")
    assert jnp.zeros(1).device == CPUS[1]
    with tj.device("cpu:2"):
        tj.set_default_device("cpu:3")  # applies once the block ends
        assert jnp.zeros(1).device == CPUS[2]
    assert jnp.zeros(1).device == CPUS[3]
    tj.set_default_device(None)
    assert jnp.zeros(1).device == CPUS[0]


def test_committed_arrays_stay_put_as_with_jax_default_device() -> None:
    committed = jax.device_put(jnp.zeros(2), CPUS[1])
    with tj.device("cpu:2"):
        assert (committed + 1).device == CPUS[1]
        assert jax.device_put(jnp.zeros(2)).device == CPUS[2]


def _in_new_thread(work: Callable[[], Any]) -> Any:
    seen: list[Any] = []
    thread = threading.Thread(target=lambda: seen.append(work()))
    thread.start()
    thread.join()
    return seen[0]


@pytest.mark.idiom("default-device-set")
def test_default_device_does_not_reach_new_threads_like_torch() -> None:
    torch.set_default_device("meta")
    torch_reaches = _in_new_thread(lambda: torch.zeros(1).device.type) == "meta"
    tj.set_default_device("cpu:2")
    with tj.device("cpu:3"):
        tj_reaches = _in_new_thread(lambda: jnp.zeros(1).device) != CPUS[0]
    assert tj_reaches == torch_reaches
    assert jnp.zeros(1).device == CPUS[2]


def test_threads_keep_their_own_defaults() -> None:
    barrier = threading.Barrier(2)

    def worker(index: int) -> tj.Device:
        with tj.device(f"cpu:{index}"):
            barrier.wait()
            device = tj.device(jnp.zeros(1).device)
            barrier.wait()
            return device

    results: dict[int, tj.Device] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, worker(i))) for i in (1, 2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {1: tj.device("cpu:1"), 2: tj.device("cpu:2")}


def test_current_index_drives_unindexed_devices_per_thread() -> None:
    previous = _runtime.set_current(2, "cpu", "CPU")
    try:
        assert tj.resolve("cpu") == CPUS[2]
        assert _runtime.current_index("cpu", "CPU") == 2
        assert _in_new_thread(lambda: tj.resolve("cpu")) == CPUS[0]
        with pytest.raises(tj.DeviceUnavailableError, match="Device 'cpu:7' does not exist"):
            _runtime.set_current(7, "cpu", "CPU")
        assert _runtime.set_current(-1, "cpu", "CPU") is None
        assert tj.resolve("cpu") == CPUS[2]
    finally:
        context.set_current_index("cpu", previous)
    assert previous is None and tj.resolve("cpu") == CPUS[0]


def test_device_for_on_cpu() -> None:
    assert _runtime.device_for("cpu:3", "cpu", "CPU") == CPUS[3]
    assert _runtime.device_for(CPUS[1], "cpu", "CPU") == CPUS[1]
    assert _runtime.device_for(2, "cpu", "CPU") == CPUS[2]
    with pytest.raises(tj.InvalidDeviceError, match=r"Expected a cpu device, but got: cuda:0"):
        _runtime.device_for("cuda:0", "cpu", "CPU")
    with pytest.raises(
        tj.DeviceUnavailableError, match=r"Device 'cpu:9' does not exist.*cpu:0 to cpu:3"
    ):
        _runtime.device_for(9, "cpu", "CPU")


def test_properties_of_a_cpu_device() -> None:
    props = _runtime.properties(CPUS[3])
    assert (props.type, props.index, props.name) == ("cpu", 3, CPUS[3].device_kind)
    assert props.total_memory is None and props.major is None


def test_synchronize_waits_for_live_arrays_on_the_device() -> None:
    result = jax.jit(lambda x: x @ x)(jax.device_put(jnp.ones((256, 256)), CPUS[2]))
    _runtime.synchronize(CPUS[2])
    assert result.is_ready()


def test_get_default_device_follows_context() -> None:
    with tj.device("cpu:3"):
        assert tj.get_default_device() == tj.device("cpu", 3)
        assert tj.resolve() == CPUS[3]
