"""prefetch_to_device, DeviceLoader and pin_memory: order, errors, shutdown, workers, memory.

Every wait has a deadline: a broken prefetcher fails these tests, it never hangs them.
Where the source runs (``background``) changes nothing a loop can see: the order,
errors and shutdown tests run in each mode; the automatic choice is tested through its
rule and with a threshold set to "always" and "never". Multi-device cases (shardings,
devices other than the first, the caller's default device) are in
``tests/multidevice/test_feeding.py``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import multiprocessing
import os
import pickle
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
from tests.support.checkpoints import misaligned_empty
from tests.support.datasets import Squares, WorkerProbe
from tests.support.deadlines import MARK, DeadlineHit, deadline
from torch2jax_device import DeviceLoader, ForkAfterJaxWarning, pin_memory, prefetch_to_device
from torch2jax_device._src import feeding as data
from torch2jax_device._src import host_staging
from torch2jax_device._src import placement as _placement
from torch2jax_device._src import run_ahead as _prefetch

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = deadline(10.0)  # seconds, grown with the load; never reached when correct


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
    until = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > until:
            raise DeadlineHit(f"{MARK}: condition not met within {timeout:.0f} s")
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


#: Every value of ``background``: the calling thread, a background thread, automatic.
MODES = [False, True, None]


@pytest.fixture
def transfers(monkeypatch: pytest.MonkeyPatch) -> list[list[str | None]]:
    """Per jax.device_put made by to_device, the memory kind of each array it placed."""
    calls: list[list[str | None]] = []
    real = jax.device_put

    def recording(x: Any, *args: Any, **kwargs: Any) -> Any:
        placed = real(x, *args, **kwargs)
        calls.append([leaf.sharding.memory_kind for leaf in jax.tree.leaves(placed)])
        return placed

    monkeypatch.setattr(_placement.jax, "device_put", recording)
    return calls


@pytest.fixture
def overlap_always_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The automatic mode moves the source to a thread as soon as its window is full."""
    monkeypatch.setattr(_prefetch, "OVERLAP_PAYS_S", 0.0)


@pytest.fixture
def overlap_never_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The automatic mode keeps the source in the calling thread, however slow the machine."""
    monkeypatch.setattr(_prefetch, "OVERLAP_PAYS_S", float("inf"))


class Source:
    """An endless iterator of batches that counts what was pulled and records close()."""

    def __init__(self) -> None:
        self.pulled = 0
        self.closed = False
        self.threads: set[str] = set()
        self.pulled_in: list[str] = []  # the thread of each pull, in order

    def __iter__(self) -> Source:
        return self

    def __next__(self) -> dict[str, Any]:
        self.threads.add(threading.current_thread().name)
        self.pulled_in.append(threading.current_thread().name)
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


@pytest.mark.parametrize("background", MODES)
def test_batches_arrive_in_order_committed_to_the_device(background: bool | None) -> None:
    source = [
        {
            "x": np.full((2, 3), i, np.float32),
            "t": torch.full((2,), float(i)),
            "pair": (jnp.int32(i), "label"),
        }
        for i in range(40)
    ]
    batches = finishes(lambda: list(prefetch_to_device(source, "cpu", background=background)))
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


@pytest.mark.parametrize("background", MODES)
@pytest.mark.parametrize("size", [1, 2, 3])
def test_at_most_size_batches_are_transferred_ahead(
    size: int, background: bool | None, overlap_never_pays: None
) -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=size, background=background)
    ahead = []
    for consumed in range(1, 8):
        finishes(lambda: next(stream))
        if background:
            eventually(lambda c=consumed: source.pulled == c + size)
        # wall-clock: a pause in which an unbounded producer would run ahead: load can
        # only hide a failure here, never make one
        time.sleep(0.02)
        ahead.append(source.pulled - consumed)
    # In a thread, the producer refills every slot; in the calling thread, a group is
    # pulled when half the lookahead is used up. Never more than size, never none.
    assert max(ahead) == size and min(ahead) == (size if background else (size + 1) // 2)
    stream.close()


@pytest.mark.parametrize("background", [False, None])
def test_in_the_calling_thread_batches_are_placed_in_groups(
    transfers: list[list[str | None]], background: bool | None, overlap_never_pays: None
) -> None:
    stream = prefetch_to_device(_take(7), "cpu", size=2, background=background)
    assert [int(b["x"][0]) for b in stream] == list(range(7))
    assert transfers == [["device"] * 3, ["device"] * 2, ["device"] * 2]  # 3 + 2 + 2 batches


def test_a_group_with_a_bad_batch_fails_at_that_batch_and_names_its_leaf() -> None:
    batches = [{"x": np.zeros(1, np.float32)}, {"x": np.ones(1, np.float32)}, {"x": object()}]
    batches[2]["x"] = type("Unreadable", (), {"__array__": _unreadable})()
    stream = prefetch_to_device(batches, "cpu", size=2, background=False)
    assert [float(next(stream)["x"][0]) for _ in range(2)] == [0.0, 1.0]
    with pytest.raises(tj.ConversionError, match=r"leaf \['x'\] "):  # not [2]['x']
        next(stream)


def _unreadable(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("cannot be read")


def test_batches_that_are_not_plain_trees_are_placed_one_by_one(
    transfers: list[list[str | None]],
) -> None:
    stream = prefetch_to_device([1, 2.5, {"x": np.zeros(1, np.float32)}], "cpu", background=False)
    one, two, three = stream
    assert one.shape == () and float(two) == 2.5 and three["x"].shape == (1,)
    assert transfers == [["device"], ["device"], ["device"]]  # a bare number: a 0-d array


def test_size_zero_transfers_on_demand_in_the_calling_thread() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=0)
    assert int(next(stream)["x"][0]) == 0 and int(next(stream)["x"][0]) == 1
    assert source.pulled == 2 and source.threads == {threading.current_thread().name}
    assert prefetch_threads() == []
    stream.close()
    assert source.closed


@pytest.mark.parametrize("background", MODES)
def test_nothing_runs_before_the_first_batch_is_asked_for(background: bool | None) -> None:
    loader = Epochs(3)
    stream = prefetch_to_device(loader, "cpu", background=background)
    time.sleep(0.05)  # wall-clock: a pause for a wrong early start; load can only hide it
    assert loader.epochs == 0 and prefetch_threads() == []  # not even iter(loader)
    stream.close()
    assert loader.epochs == 0
    batches = finishes(lambda: list(prefetch_to_device(loader, background=background)))
    assert [int(b["x"][0]) for b in batches] == [0, 1, 2]


# --- where the source runs --------------------------------------------------------------


def test_background_false_pulls_and_transfers_ahead_in_the_calling_thread() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=2, background=False)
    first = next(stream)
    assert int(first["x"][0]) == 0 and source.pulled == 3  # 1 and 2 are under way
    assert source.threads == {threading.current_thread().name} and prefetch_threads() == []
    stream.close()
    assert source.closed


def test_background_true_pulls_in_the_producer_thread_from_the_first_batch() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=2, background=True)
    finishes(lambda: next(stream))
    eventually(lambda: source.pulled == 3)
    assert source.threads == {_prefetch.THREAD_NAME} and len(prefetch_threads()) == 1
    stream.close()


@pytest.mark.parametrize(
    ("producer", "consumer", "pays"),
    [
        ([5e-3, 5e-3, 5e-3], [5e-3, 5e-3, 5e-3], True),  # a slow source and a slow step
        ([3e-4, 3e-4, 3e-4], [2e-2, 2e-2, 2e-2], True),  # from a quarter millisecond each
        ([6e-5, 6e-5, 6e-5], [2e-2, 2e-2, 2e-2], False),  # a small batch: nothing to hide
        ([2e-2, 2e-2, 2e-2], [1e-5, 1e-5, 1e-5], False),  # an instant loop: nothing to hide in
        ([6e-5, 5.0, 6e-5], [5.0, 1e-5, 5.0], False),  # one outlier (producer) decides nothing
        ([5e-3, 5e-3, 6e-5], [5e-3, 1e-5, 5e-3], True),  # two of three are a median
        ([5e-3, 5e-3], [5e-3, 5e-3], False),  # the window is not full yet
    ],
)
def test_the_automatic_rule(producer: list[float], consumer: list[float], pays: bool) -> None:
    pacer = _prefetch._Pacer()
    pacer.producer(60.0, 3)  # the first group: left out, whatever it took
    pacer.consumer(60.0)  # the first step: left out (compilation)
    for seconds in producer:
        pacer.producer(seconds, 1)
    for seconds in consumer:
        pacer.consumer(seconds)
    assert pacer.overlap_pays() is pays


def test_the_automatic_rule_forgets_old_samples() -> None:
    pacer = _prefetch._Pacer()
    pacer.producer(0.0, 1)
    pacer.consumer(0.0)
    pacer.producer(5e-3, 3)  # a group of three slow pulls
    for seconds in [1e-5, 1e-5, 1e-5, 5e-3, 5e-3]:  # a fast start, then slow steps
        pacer.consumer(seconds)
    assert pacer.overlap_pays()
    pacer.producer(1e-5, 2)  # two fast pulls outvote the older slow one
    assert not pacer.overlap_pays()


def test_a_slow_source_and_a_slow_step_move_the_source_to_a_background_thread() -> None:
    def slow_batches() -> Iterator[dict[str, Any]]:
        for batch in _take(16):
            time.sleep(0.005)  # wall-clock: slow work, 20 times the threshold; load only adds
            yield batch

    pulled_in: list[str] = []

    def slow_loop() -> list[int]:
        seen = []
        for batch in prefetch_to_device(_recording(slow_batches(), pulled_in), "cpu"):
            time.sleep(0.005)  # wall-clock: a slow training step, as above
            seen.append(int(batch["x"][0]))
        return seen

    assert finishes(slow_loop, timeout=deadline(30)) == list(range(16))
    assert pulled_in[0] != _prefetch.THREAD_NAME and pulled_in[-1] == _prefetch.THREAD_NAME


def _recording(batches: Iterator[Any], pulled_in: list[str]) -> Iterator[Any]:
    for batch in batches:
        pulled_in.append(threading.current_thread().name)
        yield batch


def test_the_move_keeps_order_and_bounded_lookahead(overlap_always_pays: None) -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=2)

    def consume(count: int) -> list[int]:
        got = []
        for consumed in range(1, count + 1):
            got.append(int(next(stream)["x"][0]))
            assert source.pulled <= consumed + 2
        return got

    assert finishes(lambda: consume(12)) == list(range(12))
    eventually(lambda: source.pulled == 14)
    caller = source.pulled_in[0]
    moved_at = source.pulled_in.index(_prefetch.THREAD_NAME)
    assert moved_at >= 3  # the first batches and the measurements, in the caller's thread
    assert source.pulled_in == [caller] * moved_at + [_prefetch.THREAD_NAME] * (14 - moved_at)
    finishes(stream.close)
    assert source.closed


class Box:
    """A processed item that can be watched for garbage collection."""

    def __init__(self, value: int) -> None:
        self.value = value


@pytest.mark.parametrize("background", MODES)
def test_no_batch_stays_alive_behind_the_consumer(
    overlap_always_pays: None, background: bool | None
) -> None:
    # Batches hold device memory: once the loop has moved past one, nothing may keep it
    # (None: the source moves to a thread on the way, with batches under way).
    stream = _prefetch.run_ahead(range(40), Box, 2, background)
    watched = []
    for _ in range(12):
        box = finishes(lambda: next(stream))
        watched.append(weakref.ref(box))
    assert box.value == 11
    del box
    gc.collect()
    # Only the batch handed over last is referenced (by the suspended generator).
    assert [ref() is None for ref in watched] == [True] * 11 + [False]
    finishes(stream.close)


def test_an_error_after_the_move_surfaces_at_its_position(overlap_always_pays: None) -> None:
    raised_in: list[str] = []

    def failing_late() -> Iterator[dict[str, Any]]:
        yield from _take(10)
        raised_in.append(threading.current_thread().name)
        raise ValueError("corrupt record 10")

    stream = prefetch_to_device(failing_late(), "cpu")
    got = [int(finishes(lambda: next(stream))["x"][0]) for _ in range(10)]
    assert got == list(range(10))
    with pytest.raises(ValueError, match="corrupt record 10") as caught:
        finishes(lambda: next(stream))
    assert raised_in == [_prefetch.THREAD_NAME]
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "failing_late" in frames


@pytest.mark.parametrize("size", [2, 0])
def test_misaligned_batches_land_on_the_device_as_copies(
    overlap_always_pays: None, size: int
) -> None:
    # np.stack'd batches often start off a 64-byte boundary, where JAX's CPU client cannot
    # use them in place: each is copied (in the background thread with size 2), and each
    # placed batch holds its own values, kept or not.
    sources: list[np.ndarray[Any, Any]] = []

    def source() -> Iterator[dict[str, Any]]:
        for index in range(10):
            rows = misaligned_empty(4 * 100_000).view(np.float32)
            rows[:] = index
            sources.append(rows)
            yield {"x": rows, "step": index}

    placed = list(prefetch_to_device(source(), "cpu", size=size))  # every batch kept
    assert all(rows.ctypes.data % 64 for rows in sources)
    for index, (batch, rows) in enumerate(zip(placed, sources, strict=True)):
        x = batch["x"]
        assert x.devices() == {tj.resolve("cpu")} and x.committed and x.dtype == np.float32
        assert batch["step"] == index
        assert not np.shares_memory(np.asarray(x), rows)  # a copy, as to_device makes
        np.testing.assert_array_equal(np.asarray(x), np.full(100_000, index, np.float32))


def test_a_source_that_never_pays_stays_in_the_calling_thread(overlap_never_pays: None) -> None:
    def slow_batches() -> Iterator[dict[str, Any]]:
        for batch in _take(8):
            time.sleep(0.002)  # wall-clock: a slow source the pacer measures
            yield batch

    pulled_in: list[str] = []
    for _ in prefetch_to_device(_recording(slow_batches(), pulled_in), "cpu"):
        time.sleep(0.002)  # wall-clock: a slow step the pacer measures
    assert set(pulled_in) == {threading.current_thread().name}


# --- errors ---------------------------------------------------------------------------


def failing_source() -> Iterator[dict[str, Any]]:
    yield from _take(3)
    raise ValueError("corrupt record 3")


@pytest.mark.parametrize("background", MODES)
def test_a_source_error_surfaces_after_the_batches_before_it_with_its_traceback(
    background: bool | None,
) -> None:
    stream = prefetch_to_device(failing_source(), "cpu", size=2, background=background)
    got = [int(finishes(lambda: next(stream))["x"][0]) for _ in range(3)]
    assert got == [0, 1, 2]
    with pytest.raises(ValueError, match="corrupt record 3") as caught:
        finishes(lambda: next(stream))
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "failing_source" in frames  # the line in the source that raised is shown
    with pytest.raises(StopIteration):
        next(stream)


class Held:
    """What a failed item holds (a load's arrays over a file's mapping, say)."""


class HeldError(ValueError):
    def __init__(self, held: Held) -> None:
        super().__init__("corrupt record 1")
        self.held = held


@pytest.mark.parametrize("background", MODES)
def test_a_raised_error_keeps_nothing_alive_once_the_caller_drops_it(
    background: bool | None,
) -> None:
    # The oracle is reference counting alone: with the collector off, what the error
    # held dies as soon as the caller lets the error go. The stream's frame, kept by the
    # traceback, held the failure that held the error: a cycle only the collector broke,
    # so a failed load_file kept its file open until a collection.
    box = [Held()]
    alive = weakref.ref(box[0])

    def source() -> Iterator[Any]:
        yield {"x": np.zeros(1, np.float32)}
        raise HeldError(box.pop())

    stream = prefetch_to_device(source(), "cpu", size=2, background=background)
    finishes(lambda: next(stream))
    gc.disable()
    try:
        with contextlib.suppress(HeldError):
            next(stream)  # not through finishes(): its own frame would keep the error
        assert alive() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("background", MODES)
def test_a_transfer_error_surfaces_at_its_position(background: bool | None) -> None:
    class NotAnArray:
        def __array__(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("cannot be read")

    source = [{"x": np.zeros(2, np.float32)}, {"x": NotAnArray()}, {"x": np.ones(2, np.float32)}]
    stream = prefetch_to_device(source, "cpu", background=background)
    assert np.all(np.asarray(finishes(lambda: next(stream))["x"]) == 0)
    with pytest.raises(tj.ConversionError, match=r"leaf \['x'\].*looks like an array"):
        finishes(lambda: next(stream))


class Abort(BaseException):
    """Not an Exception: shows that even BaseExceptions reach the consumer."""


@pytest.mark.parametrize("background", MODES)
def test_base_exceptions_reach_the_consumer_at_their_position(background: bool | None) -> None:
    def source() -> Iterator[Any]:
        yield {"x": np.zeros(1, np.float32)}
        raise Abort("stop now")

    stream = prefetch_to_device(source(), "cpu", background=background)
    assert finishes(lambda: next(stream))["x"].shape == (1,)
    with pytest.raises(Abort, match="stop now"):
        finishes(lambda: next(stream))


def test_ctrl_c_in_the_calling_thread_stops_the_loop_at_once() -> None:
    source = Source()
    interrupted = threading.Event()

    class Interrupted(Source):
        def __next__(self) -> dict[str, Any]:
            if self.pulled == 1:
                interrupted.set()
                raise KeyboardInterrupt
            return super().__next__()

    source = Interrupted()
    stream = prefetch_to_device(source, "cpu", size=2, background=False)
    with pytest.raises(KeyboardInterrupt):
        next(stream)  # batch 0 was ready, but Ctrl-C does not wait behind it
    assert interrupted.is_set() and source.closed


# --- shutdown ---------------------------------------------------------------------------


@pytest.mark.parametrize("background", MODES)
def test_close_stops_the_thread_and_closes_the_source(background: bool | None) -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=2, background=background)
    finishes(lambda: next(stream))
    assert len(prefetch_threads()) == (1 if background else 0)
    finishes(stream.close)
    assert source.closed and prefetch_threads() == []
    pulled = source.pulled
    time.sleep(0.05)  # wall-clock: a pause in which a live thread would pull; load only hides
    assert source.pulled == pulled


@pytest.mark.parametrize("background", MODES)
def test_break_closes_a_generator_source(background: bool | None) -> None:
    released = threading.Event()

    def source() -> Iterator[dict[str, Any]]:
        try:
            yield from _take(100)
        finally:
            released.set()

    def first_two() -> list[int]:
        seen = []
        for batch in prefetch_to_device(source(), "cpu", background=background):
            seen.append(int(batch["x"][0]))
            if len(seen) == 2:
                break
        return seen

    assert finishes(first_two) == [0, 1]
    assert released.wait(DEADLINE)
    assert prefetch_threads() == []


@pytest.mark.parametrize("background", MODES)
def test_an_abandoned_stream_is_collected_and_releases_its_source(
    background: bool | None,
) -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", background=background)
    finishes(stream.__next__)
    collected = weakref.ref(stream)
    del stream
    gc.collect()
    assert collected() is None  # the background thread holds no reference to it
    assert source.closed and prefetch_threads() == []


def test_close_wakes_a_producer_waiting_for_room() -> None:
    source = Source()
    stream = prefetch_to_device(source, "cpu", size=1, background=True)
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
    stream = prefetch_to_device(source, "cpu", size=2, background=True)
    finishes(lambda: next(stream))
    assert entered.wait(DEADLINE)
    closer = threading.Thread(target=stream.close, daemon=True)
    closer.start()
    closer.join(0.1)  # wall-clock: close() must still be waiting; load only lengthens it
    assert closer.is_alive() and not source.closed  # close() waits for that next()
    release.set()
    closer.join(DEADLINE)
    assert not closer.is_alive() and finished_next.is_set() and source.closed


@pytest.mark.parametrize("background", MODES)
def test_a_source_that_fails_to_close_makes_close_raise(background: bool | None) -> None:
    class Unclosable(Source):
        def close(self) -> None:
            raise OSError("file handle already gone")

    stream = prefetch_to_device(Unclosable(), "cpu", background=background)
    finishes(lambda: next(stream))
    with pytest.raises(OSError, match="file handle already gone"):
        finishes(stream.close)


# Every way a loop is left at the top level of a script, for each place the source runs;
# at exit, no stream may print (the interpreter's own clean-up used to run their finally
# blocks after module globals were gone: "Exception ignored in: <generator object ...>").
_EXIT_SETUP = textwrap.dedent(
    """
    import gc, sys
    import numpy as np
    import torch2jax_device as tj

    def batches():
        return [{"x": np.full(2, i, np.float32)} for i in range(50)]

    BACKGROUNDS = (None, True, False)
    """
)
_EXIT_WAYS = {
    "break": """
streams = [tj.prefetch_to_device(iter(batches()), "cpu", background=b) for b in BACKGROUNDS]
for stream in streams:
    for batch in stream:
        break
for b in BACKGROUNDS:
    for batch in tj.DeviceLoader(batches(), "cpu", background=b):
        break
""",
    "unfinished-epoch": """
epochs = [iter(tj.DeviceLoader(batches(), "cpu", background=b)) for b in BACKGROUNDS]
firsts = [next(epoch) for epoch in epochs]
""",
    "exception": """
streams = [tj.prefetch_to_device(iter(batches()), "cpu", background=b) for b in BACKGROUNDS]
for stream in streams[:-1]:
    next(stream)
for batch in streams[-1]:
    raise RuntimeError("left the loop")
""",
    "garbage-collection": """
for b in BACKGROUNDS:
    stream = tj.prefetch_to_device(iter(batches()), "cpu", background=b)
    next(stream)
    del stream
    gc.collect()
""",
    "sys.exit": """
streams = [tj.prefetch_to_device(iter(batches()), "cpu", background=b) for b in BACKGROUNDS]
for stream in streams:
    next(stream)
for batch in tj.DeviceLoader(batches(), "cpu"):
    sys.exit(0)
""",
    "dataloader-workers": """
from torch.utils.data import DataLoader
from tests.support.datasets import Squares
loader = DataLoader(Squares(64), num_workers=1, multiprocessing_context="spawn")
epoch = iter(tj.DeviceLoader(loader, "cpu", background=True))
first = next(epoch)
""",
}


def test_an_item_pulled_after_the_consumer_left_is_never_processed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At interpreter exit the producer gets ``EXIT_JOIN_S`` to leave its source; one
    still inside it (a DataLoader waiting on a slow worker) must not then send what it
    pulled: the interpreter is finalizing, and a thread inside JAX then ended the
    process with "terminate called ... FATAL: exception not rethrown" (a script that
    left such a stream open aborted in 2 of 24 runs on the 2-core machine, 0 of 36
    since)."""
    exiting = threading.Event()
    exiting.set()  # as the atexit hook leaves it
    monkeypatch.setattr(_prefetch, "_exiting", exiting)
    monkeypatch.setattr(_prefetch, "EXIT_JOIN_S", 0.05)
    inside, release = threading.Event(), threading.Event()

    def source() -> Iterator[int]:
        yield 0
        inside.set()
        release.wait()  # still inside the source when the consumer leaves
        yield 1

    processed: list[int] = []
    stream = _prefetch.run_ahead(source(), lambda x: processed.append(x) or x, 1, True)
    assert next(stream) == 0
    (producer,) = prefetch_threads()
    assert inside.wait(deadline(10))
    stream.close()  # waits EXIT_JOIN_S, then leaves the producer in the source
    assert producer.is_alive()
    release.set()
    producer.join(deadline(10))
    assert not producer.is_alive()
    assert processed == [0]


@pytest.mark.parametrize("way", list(_EXIT_WAYS))
def test_a_stream_left_open_exits_quietly(way: str, request: pytest.FixtureRequest) -> None:
    if way == "dataloader-workers":  # shared with the fork check: one torch import, not two
        result = request.getfixturevalue("workers_script")
    else:
        result = subprocess.run(
            [sys.executable, "-c", _EXIT_SETUP + _EXIT_WAYS[way]],
            capture_output=True, text=True, timeout=deadline(180), cwd=ROOT,
        )  # fmt: skip
    if way == "exception":  # the script's own error, and nothing after it
        assert result.returncode == 1
        assert result.stderr.rstrip().endswith("RuntimeError: left the loop"), result.stderr
        assert "Exception ignored" not in result.stderr, result.stderr
    else:
        assert (result.returncode, result.stderr) == (0, "")


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


@pytest.mark.parametrize(
    ("background", "size", "error", "message"),
    [
        ("yes", 2, TypeError, "background must be None .*True or False, not str 'yes'"),
        (1, 2, TypeError, "background must be None .*not int 1"),
        (True, 0, ValueError, "background=True .*size=0 allows nothing ahead; use size >= 1"),
    ],
)
def test_a_bad_background_is_rejected_at_the_call(
    background: Any, size: int, error: type, message: str
) -> None:
    source = Source()
    with pytest.raises(error, match=message):
        prefetch_to_device(source, "cpu", size=size, background=background)
    with pytest.raises(error, match=message.replace("size", "prefetch")):
        DeviceLoader(source, "cpu", prefetch=size, background=background)
    assert source.pulled == 0


@pytest.mark.parametrize("call", ["positional", "keyword", "numpy"])
def test_an_int_device_is_refused_with_flax_and_torch_readings(call: str) -> None:
    source = Source()
    with pytest.raises(tj.DeviceTypeError) as caught:
        if call == "positional":
            prefetch_to_device(source, 2)  # Flax: prefetch_to_device(iterator, size)
        elif call == "keyword":
            prefetch_to_device(source, device=2)
        else:
            prefetch_to_device(source, np.int64(2))
    message = str(caught.value)
    assert "flax.jax_utils.prefetch_to_device(iterator, size) reads it as the lookahead" in message
    assert "prefetch_to_device(iterable, size=2)" in message
    assert "prefetch_to_device(iterable, tj.device(2))" in message
    assert isinstance(caught.value, TypeError) and source.pulled == 0


def test_the_fixes_the_int_error_names_work() -> None:
    batches = finishes(lambda: list(prefetch_to_device(_take(3), size=2)))
    assert [int(b["x"][0]) for b in batches] == [0, 1, 2]
    with pytest.raises(tj.DeviceUnavailableError):  # the accelerator index, explicitly
        prefetch_to_device(_take(3), tj.device(2))


def test_a_missing_device_is_rejected_at_the_call() -> None:
    source = Source()
    with pytest.raises(tj.DeviceUnavailableError, match="cuda"):
        prefetch_to_device(source, "cuda:7")
    assert source.pulled == 0


def test_a_non_iterable_is_rejected_at_the_call() -> None:
    with pytest.raises(TypeError, match="'int' object is not iterable"):
        prefetch_to_device(3, "cpu")  # type: ignore[arg-type]


# --- the direct lane for NumPy batches (to_device's; see tests/unit/test_placement.py) --


def test_targets_other_than_a_plain_device_never_take_the_lane() -> None:
    pinned = jax.sharding.SingleDeviceSharding(tj.resolve("cpu"), memory_kind="pinned_host")
    (batch,) = prefetch_to_device([{"x": np.zeros(2, np.float32)}], pinned)
    assert batch["x"].sharding == pinned
    host = np.zeros(2, np.float32)
    (placed,) = prefetch_to_device([{"x": host}], pinned)
    host[:] = 5  # to_device copies into host memory kinds (pin_memory's promise); so here
    assert np.asarray(placed["x"]).tolist() == [0.0, 0.0]


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
    assert repr(DeviceLoader([1], background=False)) == (
        "DeviceLoader([1], device=None, prefetch=2, pin_memory=False, background=False)"
    )


@pytest.mark.parametrize("background", MODES)
def test_device_loader_passes_background_to_each_epoch(background: bool | None) -> None:
    pulled_in: list[str] = []
    loader = DeviceLoader(
        _Replay(lambda: _recording(_take(4), pulled_in)), "cpu", background=background
    )
    assert [int(b["x"][0]) for b in finishes(lambda: list(loader))] == [0, 1, 2, 3]
    in_producer = {name == _prefetch.THREAD_NAME for name in pulled_in}
    assert in_producer == ({True} if background else {False})  # None: 4 batches decide nothing


class _Replay:
    """A re-iterable loader made from a function returning a fresh iterator."""

    def __init__(self, make: Callable[[], Iterator[Any]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        return self.make()


def test_the_wrapped_loaders_attributes_read_through() -> None:
    dataset = Squares(10)
    loader = DataLoader(dataset, batch_size=4, drop_last=True)
    device_loader = DeviceLoader(loader, "cpu")
    assert device_loader.dataset is dataset and len(device_loader.dataset) == 10
    assert device_loader.batch_size == 4 and device_loader.drop_last is True
    assert device_loader.sampler is loader.sampler and device_loader.num_workers == 0
    assert device_loader.collate_fn is loader.collate_fn
    assert device_loader.loader is loader  # still there, as before


def test_own_settings_are_the_device_loaders() -> None:
    loader = DataLoader(Squares(4), batch_size=2)  # its own pin_memory is False
    device_loader = DeviceLoader(loader, "cpu", pin_memory=True)
    assert device_loader.pin_memory is True and loader.pin_memory is False
    device_loader.prefetch = 1
    assert device_loader.prefetch == 1 and not hasattr(loader, "prefetch")


def test_setting_a_loader_attribute_sets_it_on_the_loader_as_torch_would() -> None:
    loader = DataLoader(Squares(6), batch_size=3)
    device_loader = DeviceLoader(loader, "cpu")
    device_loader.timeout = 5  # a plain DataLoader attribute: it takes effect there
    assert loader.timeout == 5 and "timeout" not in vars(device_loader)
    with pytest.raises(ValueError, match="batch_size attribute should not be set after"):
        device_loader.batch_size = 2  # the DataLoader's own refusal
    device_loader.note = "train"  # a name the loader lacks stays on the DeviceLoader
    assert device_loader.note == "train" and not hasattr(loader, "note")


def test_an_attribute_neither_has_names_the_loader_and_the_fix() -> None:
    device_loader = DeviceLoader([{"x": np.zeros(1)}], "cpu")
    with pytest.raises(AttributeError, match=r"no attribute 'dataset', nor has the list it wraps"):
        _ = device_loader.dataset
    with pytest.raises(AttributeError, match=r"wrap the DataLoader \(or the object\) that has"):
        _ = device_loader.sampler


def test_a_device_loader_copies_and_pickles_without_recursing() -> None:
    device_loader = DeviceLoader(DataLoader(Squares(4), batch_size=2), "cpu", prefetch=1)
    for clone in (copy.copy(device_loader), pickle.loads(pickle.dumps(device_loader))):
        assert clone.prefetch == 1 and clone.batch_size == 2
        assert [b["index"].tolist() for b in finishes(lambda c=clone: list(c))] == [[0, 1], [2, 3]]


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
        timeout=deadline(60),  # a stuck worker raises instead of hanging the test
    )
    batches = finishes(lambda: list(DeviceLoader(workers, "cpu")), timeout=deadline(120))
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


# The fork check runs first, its warnings errors only inside it; then, in the same
# interpreter, the DataLoader-workers way of leaving a stream open (_EXIT_WAYS), whose
# exit must stay quiet. Both need torch and a fresh process; one child serves both.
_BEFORE_AND_AFTER_JAX = textwrap.dedent(
    """
    import warnings
    with warnings.catch_warnings():
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


@pytest.fixture(scope="module")
def workers_script() -> subprocess.CompletedProcess[str]:
    """The fork check, then a stream over DataLoader workers left open at exit."""
    script = _BEFORE_AND_AFTER_JAX + _EXIT_SETUP + _EXIT_WAYS["dataloader-workers"]
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=deadline(180),
        cwd=ROOT,
    )


def test_the_fork_check_runs_again_when_an_epoch_starts(
    workers_script: subprocess.CompletedProcess[str],
) -> None:
    assert workers_script.returncode == 0, workers_script.stderr
    assert workers_script.stdout.splitlines() == [
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
    assert host_staging.has_pinned_host(cpu)


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
    other = jnp.ones(3, jnp.float32)
    # What pin_memory's note says: a pinned array is for sending. torch computes on a
    # pinned tensor; JAX refuses to mix host memory with other arrays in a computation.
    with pytest.raises(ValueError, match="memory_space of all inputs"):
        pinned["x"] + other
    moved = tj.to_device(pinned, "cpu", non_blocking=True)
    assert moved["x"].sharding.memory_kind == "device" and moved["x"].committed
    assert jax.jit(lambda x: x * 2)(moved["x"]).tolist() == [0.0, 2.0, 4.0]
    assert (moved["x"] + other).tolist() == [1.0, 2.0, 3.0]


class NoMemorySpaces:
    """Stands for a device of a backend that reports no memories (no such device here)."""

    def addressable_memories(self) -> list[Any]:
        return []


def test_devices_without_pinned_host_memory_are_recognized() -> None:
    assert not host_staging.has_pinned_host(NoMemorySpaces())


def test_pin_memory_loader_stages_each_batch_in_pinned_host_memory(
    transfers: list[list[str | None]],
) -> None:
    loader = DeviceLoader(DataLoader(Squares(6), batch_size=3), "cpu", pin_memory=True)
    batches = finishes(lambda: list(loader))
    # Both batches in one group (two leaves each): staged together, then moved together.
    assert transfers == [["pinned_host"] * 4, ["device"] * 4]
    assert [b["index"].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5]]
    assert all(b["x"].sharding.memory_kind == "device" and b["x"].committed for b in batches)


def test_a_host_memory_target_is_not_staged(transfers: list[list[str | None]]) -> None:
    target = jax.sharding.SingleDeviceSharding(tj.resolve("cpu"), memory_kind="unpinned_host")
    loader = DeviceLoader(DataLoader(Squares(3), batch_size=3), target, pin_memory=True)
    (batch,) = finishes(lambda: list(loader))
    assert transfers == [["unpinned_host", "unpinned_host"]]
    assert batch["x"].sharding == target
