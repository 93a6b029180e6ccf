"""prefetch_to_device, DeviceLoader and pin_memory: order, errors, shutdown, workers, memory.

Every wait has a deadline: a broken prefetcher fails these tests, it never hangs them.
Multi-device cases (shardings, devices other than the first, the caller's default
device) are in ``tests/multidevice/test_data_four_devices.py``.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import torch2jax_device as tj
from tests.support.datasets import Squares, WorkerProbe
from torch2jax_device import DeviceLoader, ForkAfterJaxWarning, pin_memory, prefetch_to_device
from torch2jax_device._src import feeding as data
from torch2jax_device._src import placement as _placement
from torch2jax_device._src import run_ahead as _prefetch

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 10.0  # seconds; generous for a loaded 2-core machine, never reached when correct


def finishes(fn: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    """``fn()``, run in a helper thread so that a hang fails the test instead of stalling it."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as error:
            outcome["error"] = error

    helper = threading.Thread(target=target, daemon=True)
    helper.start()
    helper.join(timeout)
    assert not helper.is_alive(), f"did not finish within {timeout} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def eventually(condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        time.sleep(0.005)


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == _prefetch.THREAD_NAME and t.is_alive()]


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """Every test must leave no prefetch thread behind (checked after collecting garbage)."""
    yield
    if prefetch_threads():
        gc.collect()  # finalizes a stream the test left in a reference cycle
    eventually(lambda: not prefetch_threads())


class Source:
    """An endless iterator of batches that counts what was pulled and records close()."""

    def __init__(self) -> None:
        self.pulled = 0
        self.closed = False
        self.threads: set[str] = set()

    def __iter__(self) -> Source:
        return self

    def __next__(self) -> dict[str, Any]:
        self.threads.add(threading.current_thread().name)
        index = self.pulled
        self.pulled += 1
        return {"x": np.full(3, index, np.float32)}

    def close(self) -> None:
        self.closed = True


class Epochs:
    """A re-iterable loader that counts its epochs (each ``iter()`` is one)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.epochs = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.epochs += 1
        return _take(self.count)

    def __len__(self) -> int:
        return self.count


def _take(count: int) -> Iterator[dict[str, Any]]:
    for index in range(count):
        yield {"x": np.full(3, index, np.float32)}


# --- order and placement ------------------------------------------------------------


def test_batches_arrive_in_order_committed_to_the_device() -> None:
    source = [
        {
            "x": np.full((2, 3), i, np.float32),
            "t": torch.full((2,), float(i)),
            "pair": (jnp.int32(i), "label"),
        }
        for i in range(40)
    ]
    batches = finishes(lambda: list(prefetch_to_device(source, "cpu")))
    assert len(batches) == 40
    cpu = tj.resolve("cpu")
    for index, batch in enumerate(batches):
        for leaf in (batch["x"], batch["t"], batch["pair"][0]):
            assert isinstance(leaf, jax.Array) and leaf.committed and leaf.devices() == {cpu}
        assert batch["x"].dtype == jnp.float32 and batch["t"].dtype == jnp.float32
        assert np.all(np.asarray(batch["x"]) == index) and np.all(np.asarray(batch["t"]) == index)
        assert int(batch["pair"][0]) == index and batch["pair"][1] == "label"


def test_default_device_is_used_when_none_is_given() -> None:
    with tj.device("cpu"):
        stream = prefetch_to_device(_take(2))
    assert all(b["x"].devices() == {tj.resolve("cpu")} for b in finishes(lambda: list(stream)))


@pytest.mark.parametrize("size", [1, 3])
def test_at_most_size_batches_are_transferred_ahead(size: int) -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=size)

    def pulled(count: int) -> Callable[[], bool]:
        return lambda: source.pulled == count

    for consumed in range(1, 4):
        finishes(lambda: next(stream))
        eventually(pulled(consumed + size))
        time.sleep(0.05)  # the producer would go further now if it were unbounded
        assert source.pulled == consumed + size
    stream.close()


def test_size_zero_transfers_on_demand_in_the_calling_thread() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=0)
    assert int(next(stream)["x"][0]) == 0 and int(next(stream)["x"][0]) == 1
    assert source.pulled == 2 and source.threads == {threading.current_thread().name}
    assert prefetch_threads() == []
    stream.close()
    assert source.closed


def test_nothing_runs_before_the_first_batch_is_asked_for() -> None:
    loader = Epochs(3)
    stream = prefetch_to_device(loader, "cpu")
    time.sleep(0.05)
    assert loader.epochs == 0 and prefetch_threads() == []  # not even iter(loader)
    stream.close()
    assert loader.epochs == 0
    batches = finishes(lambda: list(prefetch_to_device(loader)))
    assert [int(b["x"][0]) for b in batches] == [0, 1, 2]


# --- errors ---------------------------------------------------------------------------


def failing_source() -> Iterator[dict[str, Any]]:
    yield from _take(3)
    raise ValueError("corrupt record 3")


def test_a_source_error_surfaces_after_the_batches_before_it_with_its_traceback() -> None:
    stream = prefetch_to_device(failing_source(), "cpu", size=2)
    got = [int(finishes(lambda: next(stream))["x"][0]) for _ in range(3)]
    assert got == [0, 1, 2]
    with pytest.raises(ValueError, match="corrupt record 3") as caught:
        finishes(lambda: next(stream))
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "failing_source" in frames  # the line in the source that raised is shown
    with pytest.raises(StopIteration):
        next(stream)


def test_a_transfer_error_surfaces_at_its_position() -> None:
    class NotAnArray:
        def __array__(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("cannot be read")

    source = [{"x": np.zeros(2, np.float32)}, {"x": NotAnArray()}, {"x": np.ones(2, np.float32)}]
    stream = prefetch_to_device(source, "cpu")
    assert np.all(np.asarray(finishes(lambda: next(stream))["x"]) == 0)
    with pytest.raises(tj.ConversionError, match=r"leaf \['x'\].*looks like an array"):
        finishes(lambda: next(stream))


class Abort(BaseException):
    """Not an Exception: shows that even BaseExceptions reach the consumer."""


def test_base_exceptions_reach_the_consumer() -> None:
    def source() -> Iterator[Any]:
        yield {"x": np.zeros(1, np.float32)}
        raise Abort("stop now")

    with pytest.raises(Abort, match="stop now"):
        finishes(lambda: list(prefetch_to_device(source(), "cpu")))


# --- shutdown ---------------------------------------------------------------------------


def test_close_stops_the_thread_and_closes_the_source() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=2)
    finishes(lambda: next(stream))
    assert len(prefetch_threads()) == 1
    finishes(stream.close)
    assert source.closed and prefetch_threads() == []
    pulled = source.pulled
    time.sleep(0.05)
    assert source.pulled == pulled


def test_break_closes_a_generator_source() -> None:
    released = threading.Event()

    def source() -> Iterator[dict[str, Any]]:
        try:
            yield from _take(100)
        finally:
            released.set()

    def first_two() -> list[int]:
        seen = []
        for batch in prefetch_to_device(source(), "cpu"):
            seen.append(int(batch["x"][0]))
            if len(seen) == 2:
                break
        return seen

    assert finishes(first_two) == [0, 1]
    assert released.wait(DEADLINE)
    assert prefetch_threads() == []


def test_an_abandoned_stream_is_collected_and_releases_its_source() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu")
    finishes(stream.__next__)
    collected = weakref.ref(stream)
    del stream
    gc.collect()
    assert collected() is None  # the background thread holds no reference to it
    assert source.closed and prefetch_threads() == []


def test_close_wakes_a_producer_waiting_for_room() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=1)
    finishes(lambda: next(stream))
    eventually(lambda: source.pulled == 2)  # the producer now waits for room
    finishes(stream.close)
    assert source.closed and prefetch_threads() == []


def test_close_waits_for_a_next_already_running_in_the_source() -> None:
    entered, release = threading.Event(), threading.Event()
    finished_next = threading.Event()

    class Blocking(Source):
        def __next__(self) -> dict[str, Any]:
            if self.pulled == 1:
                entered.set()
                release.wait(DEADLINE)
                finished_next.set()
            return super().__next__()

    source = Blocking()
    stream = prefetch_to_device(source, "cpu", size=2)
    finishes(lambda: next(stream))
    assert entered.wait(DEADLINE)
    closer = threading.Thread(target=stream.close, daemon=True)
    closer.start()
    closer.join(0.1)
    assert closer.is_alive() and not source.closed  # close() waits for that next()
    release.set()
    closer.join(DEADLINE)
    assert not closer.is_alive() and finished_next.is_set() and source.closed


def test_a_source_that_fails_to_close_makes_close_raise() -> None:
    class Unclosable(Source):
        def close(self) -> None:
            raise OSError("file handle already gone")

    stream = prefetch_to_device(Unclosable(), "cpu")
    finishes(lambda: next(stream))
    with pytest.raises(OSError, match="file handle already gone"):
        finishes(stream.close)


# --- arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "error", "message"),
    [
        (-1, ValueError, "size must be >= 0 .*got -1"),
        (1.5, TypeError, "size must be an int .*not float 1.5"),
        (True, TypeError, "size must be an int .*not bool True"),
    ],
)
def test_a_bad_size_is_rejected_at_the_call(size: Any, error: type, message: str) -> None:
    source = Source()
    with pytest.raises(error, match=message):
        prefetch_to_device(source, "cpu", size=size)
    assert source.pulled == 0


def test_a_missing_device_is_rejected_at_the_call() -> None:
    source = Source()
    with pytest.raises(tj.DeviceUnavailableError, match="cuda"):
        prefetch_to_device(source, "cuda:7")
    assert source.pulled == 0


def test_a_non_iterable_is_rejected_at_the_call() -> None:
    with pytest.raises(TypeError, match="'int' object is not iterable"):
        prefetch_to_device(3, "cpu")  # type: ignore[arg-type]


# --- DeviceLoader -----------------------------------------------------------------------


def test_each_epoch_is_a_new_prefetch_over_a_new_iterator() -> None:
    loader = Epochs(5)
    device_loader = DeviceLoader(loader, "cpu", prefetch=2)
    assert loader.epochs == 0
    for epoch in range(1, 4):
        batches = finishes(lambda: [int(b["x"][0]) for b in device_loader])
        assert batches == [0, 1, 2, 3, 4] and loader.epochs == epoch


def test_len_is_the_wrapped_loaders() -> None:
    assert len(DeviceLoader(Epochs(7))) == 7
    loader = DataLoader(Squares(10), batch_size=4)
    assert len(DeviceLoader(loader)) == len(loader) == 3


def test_len_of_a_loader_without_len_is_a_type_error_like_pythons() -> None:
    device_loader = DeviceLoader(batch for batch in _take(3))
    with pytest.raises(TypeError, match=r"object of type 'generator' has no len\(\)"):
        len(device_loader)
    assert len(finishes(lambda: list(device_loader))) == 3  # list() still works


def test_device_loader_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match=r"iterable of batches .*not a int object"):
        DeviceLoader(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefetch must be >= 0"):
        DeviceLoader([], prefetch=-2)
    with pytest.raises(tj.InvalidDeviceError, match="Invalid device string: 'cuda:01'"):
        DeviceLoader([], device="cuda:01")


def test_repr_names_the_loader_and_the_settings() -> None:
    assert repr(DeviceLoader([1], "cpu", prefetch=3, pin_memory=True)) == (
        "DeviceLoader([1], device='cpu', prefetch=3, pin_memory=True)"
    )


def test_a_torch_dataloader_feeds_a_jitted_step() -> None:
    loader = DeviceLoader(DataLoader(Squares(10), batch_size=4), "cpu")
    step = jax.jit(lambda batch: (batch["x"][:, 1] - batch["x"][:, 0] ** 2).sum())
    batches = finishes(lambda: list(loader))
    assert [b["index"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all(b["index"].dtype == jnp.int32 and b["x"].committed for b in batches)
    assert [float(step(b)) for b in batches] == [0.0, 0.0, 0.0]


# --- DataLoader worker processes ------------------------------------------------------


def test_dataloader_workers_build_batches_without_jax_and_main_places_them() -> None:
    workers = DataLoader(
        WorkerProbe(8),
        batch_size=2,
        num_workers=2,
        multiprocessing_context="spawn",
        timeout=60,  # a stuck worker raises instead of hanging the test
    )
    batches = finishes(lambda: list(DeviceLoader(workers, "cpu")), timeout=120)
    assert [b["index"].tolist() for b in batches] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    pids = {pid for b in batches for pid in b["pid"].tolist()}
    assert len(pids) == 2 and os.getpid() not in pids
    assert not any(flag for b in batches for flag in b["jax_loaded"].tolist())
    assert all(b["index"].devices() == {tj.resolve("cpu")} for b in batches)


@pytest.fixture
def fork_warning_not_yet_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "_fork_warned", False)
    tj.resolve("cpu")  # JAX has started


def test_forking_workers_after_jax_started_warns_once_with_the_fix(
    fork_warning_not_yet_given: None,
) -> None:
    # Never iterated: constructing the DeviceLoader is enough, and nothing is forked.
    forking = DataLoader(Squares(4), num_workers=1, multiprocessing_context="fork")
    with pytest.warns(ForkAfterJaxWarning, match="multiprocessing_context='spawn'") as caught:
        DeviceLoader(forking)
    assert "1 worker process(es) with the 'fork' start method" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DeviceLoader(forking)  # once per process


@pytest.mark.parametrize(
    "loader_arguments",
    [
        {"num_workers": 1, "multiprocessing_context": "spawn"},
        {"num_workers": 1, "multiprocessing_context": "forkserver"},
        {"num_workers": 0},
    ],
)
def test_spawned_or_no_workers_do_not_warn(
    fork_warning_not_yet_given: None, loader_arguments: dict[str, Any]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DeviceLoader(DataLoader(Squares(4), **loader_arguments))


def test_without_a_context_the_default_start_method_decides(
    fork_warning_not_yet_given: None,
) -> None:
    chosen = multiprocessing.get_start_method(allow_none=True)
    default = chosen or multiprocessing.get_all_start_methods()[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DeviceLoader(DataLoader(Squares(4), num_workers=1))
    warned = any(issubclass(w.category, ForkAfterJaxWarning) for w in caught)
    assert warned == (default == "fork")
    assert multiprocessing.get_start_method(allow_none=True) == chosen  # left unfixed


_BEFORE_AND_AFTER_JAX = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("error")
    from torch.utils.data import DataLoader
    from tests.support.datasets import Squares
    from torch2jax_device._src import platforms as _platforms
    from torch2jax_device import DeviceLoader, ForkAfterJaxWarning

    loader = DeviceLoader(DataLoader(Squares(4), num_workers=1, multiprocessing_context="fork"))
    print("started by construction:", _platforms.backends_initialized())
    import torch2jax_device as tj
    tj.resolve("cpu")
    try:
        iter(loader)  # the warning, an error here, comes before anything is forked
    except ForkAfterJaxWarning as warning:
        print("warned when the epoch started:", "spawn" in str(warning))
    """
)


def test_the_fork_check_runs_again_when_an_epoch_starts() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _BEFORE_AND_AFTER_JAX],
        capture_output=True, text=True, timeout=120, check=True, cwd=ROOT,
    )  # fmt: skip
    assert result.stdout.splitlines() == [
        "started by construction: False",
        "warned when the epoch started: True",
    ]


# --- pinned host memory -----------------------------------------------------------------


def test_cpu_devices_have_pinned_host_memory() -> None:
    """The JAX facts the CPU behaviour below rests on."""
    cpu = tj.resolve("cpu")
    assert {m.kind for m in cpu.addressable_memories()} == {
        "device",
        "pinned_host",
        "unpinned_host",
    }
    assert cpu.default_memory().kind == "device"
    assert data._has_pinned_host(cpu)


def test_pin_memory_copies_every_array_into_pinned_host_memory() -> None:
    host = np.arange(4, dtype=np.float32)
    tree = {"np": host, "torch": torch.arange(3, dtype=torch.int32), "note": "n", "k": 2}
    pinned = pin_memory(tree)
    space_host = jax.device_put(host, jax.memory.Space.Host)
    for leaf, values in ((pinned["np"], host), (pinned["torch"], [0, 1, 2])):
        assert leaf.sharding.memory_kind == "pinned_host" and leaf.committed
        assert leaf.sharding == space_host.sharding  # what jax.memory.Space.Host gives
        np.testing.assert_array_equal(np.asarray(leaf), values)
    assert pinned["torch"].dtype == jnp.int32
    assert pinned["note"] == "n" and pinned["k"] == 2
    host[:] = -1  # a copy was made: the source buffer may be reused, as after torch's
    assert np.asarray(pinned["np"]).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_pinned_arrays_are_returned_as_they_are() -> None:
    pinned = pin_memory(np.arange(3.0, dtype=np.float32))
    assert pin_memory(pinned) is pinned


def test_pinned_arrays_move_to_the_device_and_compute() -> None:
    pinned = pin_memory({"x": np.arange(3.0, dtype=np.float32)})
    moved = tj.to_device(pinned, "cpu", non_blocking=True)
    assert moved["x"].sharding.memory_kind == "device" and moved["x"].committed
    assert jax.jit(lambda x: x * 2)(moved["x"]).tolist() == [0.0, 2.0, 4.0]


class NoMemorySpaces:
    """Stands for a device of a backend that reports no memories (no such device here)."""

    def addressable_memories(self) -> list[Any]:
        return []


def test_devices_without_pinned_host_memory_are_recognized() -> None:
    assert not data._has_pinned_host(NoMemorySpaces())


@pytest.fixture
def transfers(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The memory kind each jax.device_put made by to_device lands in (the real one runs)."""
    kinds: list[str | None] = []
    real = jax.device_put

    def recording(x: Any, *args: Any, **kwargs: Any) -> Any:
        placed = real(x, *args, **kwargs)
        kinds.extend(leaf.sharding.memory_kind for leaf in jax.tree.leaves(placed))
        return placed

    monkeypatch.setattr(_placement.jax, "device_put", recording)
    return kinds


def test_pin_memory_loader_stages_each_batch_in_pinned_host_memory(
    transfers: list[str | None],
) -> None:
    loader = DeviceLoader(DataLoader(Squares(6), batch_size=3), "cpu", pin_memory=True)
    batches = finishes(lambda: list(loader))
    assert transfers == ["pinned_host", "pinned_host", "device", "device"] * 2
    assert [b["index"].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5]]
    assert all(b["x"].sharding.memory_kind == "device" and b["x"].committed for b in batches)


def test_a_host_memory_target_is_not_staged(transfers: list[str | None]) -> None:
    target = jax.sharding.SingleDeviceSharding(tj.resolve("cpu"), memory_kind="unpinned_host")
    loader = DeviceLoader(DataLoader(Squares(3), batch_size=3), target, pin_memory=True)
    (batch,) = finishes(lambda: list(loader))
    assert transfers == ["unpinned_host", "unpinned_host"]
    assert batch["x"].sharding == target
