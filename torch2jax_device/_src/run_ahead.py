"""Run an iterator ahead of its consumer, with bounded lookahead, in or out of its thread.

``run_ahead(iterable, process, size)`` yields ``process(item)`` for each item, with up to
``size`` processed items waiting ahead of the consumer. Here ``process`` is an
asynchronous device transfer: starting it early is what overlaps the copy with the
step, and that needs no thread. A thread is needed only to overlap the *source*
(``next()`` of a slow loader) with the step, and it has a price: handing each item from
one thread to the other costs a wake-up and a round of the global interpreter lock,
25-100 µs on a loaded machine, more than a small batch's whole transfer. So:

* in the calling thread (``background=False``), the consumer pulls and processes up to
  ``size`` items ahead itself, between its steps;
* in a background thread (``background=True``), one producer thread pulls and
  processes, and hands items over through a ``_Channel``: a bounded FIFO guarded by one
  condition variable;
* automatically (``background=None``), the stream starts in the calling thread and
  measures, per item, the producer's work (``next()`` plus ``process``) and the
  consumer's time between items; when both medians over the last few items reach
  ``OVERLAP_PAYS_S``, the source moves to a background thread for the rest of the
  stream. Below that, overlapping the two saves less than the hand-off costs.

Every mode gives the same guarantees. Items come in order. The end of the source and
any exception travel in the same queue as the items, so they reach the consumer in
order, after the items before them, with their tracebacks (``KeyboardInterrupt`` in the
calling thread is the exception: it is raised at once). At most ``size`` items are
pulled ahead of the consumer: the producer reserves room *before* it pulls.

Closing the consumer's generator (``close()``, ``break``, garbage collection) closes
the channel, which wakes a producer waiting for room, joins the thread and only then
closes the source: a generator that is still executing cannot be closed, and after the
join nothing else touches it.

A stream still open when the interpreter exits (a loop left by ``break`` at the top
level of a script, an iterator kept in a global, an exception's traceback) is closed
by an ``atexit`` hook, while modules and threads still work: left to the interpreter's
final clean-up, its ``finally`` would run after module globals are gone and print
``Exception ignored in: <generator object run_ahead ...>``. At exit, the producer gets
``EXIT_JOIN_S`` to finish its current item; a source that blocks longer is left to
the daemon thread's end.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["EXIT_JOIN_S", "OVERLAP_PAYS_S", "THREAD_NAME", "run_ahead"]

_T = TypeVar("_T")
_R = TypeVar("_R")

#: The name of every producer thread (what leak checks look for).
THREAD_NAME = "torch2jax_device-prefetch"

#: Seconds of work per item, on each side, from which a background thread pays: the
#: overlap it buys (the smaller of the two) then exceeds a hand-off (25-100 µs) twice.
OVERLAP_PAYS_S = 250e-6

#: Seconds a producer gets, at interpreter exit, to finish the item it is pulling.
EXIT_JOIN_S = 5.0

#: How many recent items the automatic mode judges by (medians: one outlier, such as
#: the step's compilation or a worker's start, decides nothing).
_WINDOW = 3


class _End:
    """The source is exhausted."""


_END = _End()


class _Failure:
    """The source or ``process`` raised; the consumer re-raises the same exception."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error: BaseException | None = error


def _pull(source: Iterator[_T]) -> _T | _End | _Failure:
    """The next item; ``_END`` at the end; an exception as a ``_Failure``.

    ``KeyboardInterrupt`` propagates: in the calling thread, Ctrl-C stops the loop now,
    not ``size`` items later.
    """
    try:
        return next(source)
    except StopIteration:
        return _END
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        return _Failure(error)


def _processed(process: Callable[[_T], _R], item: _T) -> _R | _Failure:
    """``process(item)``, or its exception as a ``_Failure`` (``KeyboardInterrupt`` propagates)."""
    try:
        return process(item)
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        return _Failure(error)


class _Channel(Generic[_R]):
    """A bounded hand-over from one producer thread to one consumer, closed by the consumer."""

    def __init__(self, capacity: int, items: Iterable[_R | _End | _Failure] = ()) -> None:
        self._items: collections.deque[_R | _End | _Failure] = collections.deque(items)
        self._capacity = capacity
        self._closed = False
        # One condition for both sides: the producer waits only when the channel is full
        # and the consumer only when it is empty, never both, so notify() wakes the
        # right one. Reentrant: a garbage-collected consumer may close the channel from
        # the producer thread while that thread holds the lock.
        self._condition = threading.Condition(threading.RLock())

    def wait_for_room(self) -> bool:
        """Block until an item may be produced; ``False`` once the consumer has gone."""
        with self._condition:
            while len(self._items) >= self._capacity and not self._closed:
                self._condition.wait()
            return not self._closed

    def put(self, item: _R | _End | _Failure) -> None:
        with self._condition:
            if not self._closed:
                self._items.append(item)
                self._condition.notify()

    def get(self) -> _R | _End | _Failure:
        with self._condition:
            while not self._items:
                self._condition.wait()
            item = self._items.popleft()
            self._condition.notify()
            return item

    @property
    def closed(self) -> bool:
        """Whether the consumer has gone."""
        return self._closed

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._items.clear()
            self._condition.notify_all()


def _produce(source: Iterator[_T], process: Callable[[_T], _R], channel: _Channel[_R]) -> None:
    """The producer thread: pull, process, hand over, until the end, an error or close.

    An item pulled after the consumer closed the channel is dropped unprocessed: at
    interpreter exit the consumer waits ``EXIT_JOIN_S`` only, and ``process`` (a copy
    to a device) running while the interpreter finalizes can abort the process.
    """
    try:
        while channel.wait_for_room():
            item = _pull(source)
            if channel.closed:
                return
            message = item if isinstance(item, (_End, _Failure)) else _processed(process, item)
            channel.put(message)
            if isinstance(message, (_End, _Failure)):
                return
    except BaseException as error:  # a KeyboardInterrupt raised by the source itself
        channel.put(_Failure(error))


class _Pacer:
    """Whether moving the source to a background thread pays (``background=None``).

    Fed, per group of items, the producer's seconds per item (``next()`` plus
    ``process``), and per item the consumer's (from handing the item over to asking
    for the next one). The first group and the first item's consumer time are left
    out: they hold one-off costs (a DataLoader starting its workers, the step
    compiling). The rule: over the last ``_WINDOW`` samples of each side, both
    medians reach ``OVERLAP_PAYS_S``. A median of 3 reaches it when 2 samples do, so
    each side keeps only a register of which recent samples did: this runs for every
    item of a fast source, where a microsecond counts.
    """

    __slots__ = ("_consumer", "_producer")

    def __init__(self) -> None:
        # Per side: the last samples as bits (1: reached the threshold), newest lowest,
        # behind a marker bit that counts how many were taken; -1 until the first
        # (left out) sample arrives.
        self._producer = self._consumer = -1

    def producer(self, seconds_per_item: float, items: int) -> None:
        for _ in range(items):
            self._producer = _shift(self._producer, seconds_per_item)

    def consumer(self, seconds: float) -> None:
        self._consumer = _shift(self._consumer, seconds)

    def overlap_pays(self) -> bool:
        return _median_reaches(self._producer) and _median_reaches(self._consumer)


_FULL = 1 << _WINDOW  # the marker bit, once a window of samples sits below it


def _shift(register: int, seconds: float) -> int:
    if register < 0:
        return 1  # the first sample is left out; the marker starts here
    register = (register << 1) | (seconds >= OVERLAP_PAYS_S)
    return register if register < _FULL << 1 else _FULL | (register & (_FULL - 1))


def _median_reaches(register: int) -> bool:
    """A full window whose median reached the threshold (more than half the bits)."""
    return register >= _FULL and (register & (_FULL - 1)).bit_count() > _WINDOW // 2


def _pull_group(
    source: Iterator[_T],
    count: int,
    process: Callable[[_T], _R],
    process_group: Callable[[list[_T]], list[_R]] | None,
) -> list[_R | _End | _Failure]:
    """Up to ``count`` items processed together, then ``_END`` or a ``_Failure`` if one came.

    ``process_group`` handles all the items in one call (one batched transfer); when it
    raises, each item goes through ``process`` alone, so that the failure is reported
    for its own item, at its position, and the items before it still arrive.
    """
    items: list[_T] = []
    stop: _End | _Failure | None = None
    try:
        items.extend(itertools.islice(source, count))  # keeps what came before a raise
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        stop = _Failure(error)
    else:
        if len(items) < count:
            stop = _END
    if len(items) > 1 and process_group is not None:
        together = _processed(process_group, items)
        if not isinstance(together, _Failure):
            results: list[_R | _End | _Failure] = list(together)
            return results if stop is None else [*results, stop]
    results = []
    for item in items:
        result = _processed(process, item)
        results.append(result)
        if isinstance(result, _Failure):
            return results
    return results if stop is None else [*results, stop]


def _close_source(source: Iterator[Any]) -> None:
    close = getattr(source, "close", None)
    if callable(close):
        close()


#: Every stream that may still be open; closed at interpreter exit.
_open_streams: weakref.WeakSet[Generator[Any, None, None]] = weakref.WeakSet()
_exiting = threading.Event()


@atexit.register
def _close_open_streams() -> None:
    """Close the streams left open, while the interpreter still works (see the module doc)."""
    _exiting.set()
    for stream in list(_open_streams):
        # ValueError: running in another thread right now, and that thread's to close.
        with contextlib.suppress(ValueError):
            stream.close()


def run_ahead(
    iterable: Iterable[_T],
    process: Callable[[_T], _R],
    size: int,
    background: bool | None = None,
    process_group: Callable[[list[_T]], list[_R]] | None = None,
) -> Generator[_R, None, None]:
    """``process(item)`` for each item of ``iterable``, computed up to ``size`` items ahead.

    Nothing happens before the first ``next()``, which calls ``iter(iterable)``.
    ``size == 0`` runs everything in the caller's thread, on demand. ``background``
    chooses where the source and ``process`` run: the calling thread (``False``), a
    background thread from the first item (``True``), or the calling thread until
    overlapping pays (``None``; see the module docstring). The source iterator is
    closed (if it has ``close()``) when the generator ends, however it ends.

    In the calling thread, items are pulled in groups: when half the lookahead is
    used up, the next items up to ``size`` ahead are pulled together and handed to
    ``process_group`` (the same as ``process`` on each, in one call) if given: one
    batched transfer costs less than several. At least ``(size + 1) // 2`` items stay
    under way ahead of the consumer.
    """
    stream = _stream(iterable, process, size, background, process_group)
    _open_streams.add(stream)
    return stream


def _stream(
    iterable: Iterable[_T],
    process: Callable[[_T], _R],
    size: int,
    background: bool | None,
    process_group: Callable[[list[_T]], list[_R]] | None,
) -> Generator[_R, None, None]:
    source = iter(iterable)
    if size == 0:
        try:
            for item in source:
                yield process(item)
        finally:
            _close_source(source)
        return
    pacer = _Pacer() if background is None else None
    refill_at = (size + 1) // 2  # pull a group when no more than this many are ahead
    clock = time.perf_counter
    ahead: collections.deque[_R | _End | _Failure] = collections.deque()
    exhausted = False  # the end or a failure is queued: pull no more
    channel: _Channel[_R] | None = None
    producer: threading.Thread | None = None
    try:
        while True:
            # Where the next items come from is decided when more are due (once a group).
            if channel is None and not exhausted and (background or len(ahead) <= refill_at):
                if background or (pacer is not None and pacer.overlap_pays()):
                    channel = _Channel(size, ahead)
                    ahead.clear()  # the channel holds them now; batches are not kept twice
                    producer = threading.Thread(
                        target=_produce,
                        args=(source, process, channel),
                        name=THREAD_NAME,
                        daemon=True,
                    )
                    producer.start()
                else:
                    started = clock()  # size + 1 ahead: with the one handed over next
                    group = _pull_group(source, size + 1 - len(ahead), process, process_group)
                    if pacer is not None:
                        pacer.producer((clock() - started) / len(group), len(group))
                    exhausted = isinstance(group[-1], (_End, _Failure))
                    ahead.extend(group)
                    del group  # the deque alone holds the batches: they die when handed on
            message = ahead.popleft() if channel is None else channel.get()
            if isinstance(message, _End):
                return
            if isinstance(message, _Failure):
                # Raised with nothing here holding it: the traceback keeps the frames it
                # passed (this one, the one that caught it), and a frame holding its own
                # error is a cycle only the garbage collector breaks (a failed load's
                # arrays, and so its file, kept open until a collection).
                error, message.error = message.error, None
                del message
                assert error is not None  # a failure is raised once
                try:
                    raise error
                finally:
                    del error
            handed_over = clock()
            yield message
            if pacer is not None and channel is None:
                pacer.consumer(clock() - handed_over)
    finally:
        if channel is not None:
            channel.close()
        # Garbage collection can finalize an abandoned generator in the producer thread
        # itself; that thread sees the closed channel and ends after its current item,
        # and the source is then released by its own finalizer.
        if producer is None:
            _close_source(source)
        elif threading.current_thread() is not producer:
            producer.join(EXIT_JOIN_S if _exiting.is_set() else None)
            if not producer.is_alive():  # else still inside the source: leave it be
                _close_source(source)
