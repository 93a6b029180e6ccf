"""Run an iterator ahead of its consumer in a background thread, with bounded lookahead.

The consumer and one producer thread share a ``_Channel``: a bounded FIFO
guarded by one condition variable. The producer reserves room *before* it pulls the
next item, so at most ``size`` processed items ever wait ahead of the consumer. It
pulls from the source, applies ``process`` (here: an asynchronous device transfer)
and hands the result over; the end of the source and any exception travel through
the same channel, so they reach the consumer in order, after the items before them.

Closing the consumer's generator (``close()``, ``break``, garbage collection) closes
the channel, which wakes a producer waiting for room, joins the thread and only then
closes the source: a generator that is still executing cannot be closed, and after the
join nothing else touches it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["THREAD_NAME", "run_ahead"]

_T = TypeVar("_T")
_R = TypeVar("_R")

#: The name of every producer thread (what leak checks look for).
THREAD_NAME = "torch2jax_device-prefetch"


class _End:
    """The source is exhausted."""


_END = _End()


class _Failure:
    """The source or ``process`` raised; the consumer re-raises the same exception."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Channel(Generic[_R]):
    """A bounded hand-over from one producer thread to one consumer, closed by the consumer."""

    def __init__(self, capacity: int) -> None:
        self._items: collections.deque[_R | _End | _Failure] = collections.deque()
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

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._items.clear()
            self._condition.notify_all()


def _produce(source: Iterator[_T], process: Callable[[_T], _R], channel: _Channel[_R]) -> None:
    """The producer thread: pull, process, hand over, until the end, an error or close."""
    try:
        while channel.wait_for_room():
            try:
                item = next(source)
            except StopIteration:
                channel.put(_END)
                return
            channel.put(process(item))
    except BaseException as error:  # handed to the consumer, who re-raises it
        channel.put(_Failure(error))


def _close_source(source: Iterator[Any]) -> None:
    close = getattr(source, "close", None)
    if callable(close):
        close()


def run_ahead(
    iterable: Iterable[_T], process: Callable[[_T], _R], size: int
) -> Generator[_R, None, None]:
    """``process(item)`` for each item of ``iterable``, computed up to ``size`` items ahead.

    Nothing happens before the first ``next()``, which calls ``iter(iterable)`` and
    starts the thread. ``size == 0`` runs everything in the caller's thread, on demand.
    The source iterator is closed (if it has ``close()``) when the generator ends,
    however it ends.
    """
    source = iter(iterable)
    if size == 0:
        try:
            for item in source:
                yield process(item)
        finally:
            _close_source(source)
        return
    channel: _Channel[_R] = _Channel(size)
    producer = threading.Thread(
        target=_produce, args=(source, process, channel), name=THREAD_NAME, daemon=True
    )
    producer.start()
    try:
        while True:
            message = channel.get()
            if isinstance(message, _End):
                return
            if isinstance(message, _Failure):
                raise message.error
            yield message
    finally:
        channel.close()
        # Garbage collection can finalize an abandoned generator in the producer thread
        # itself; that thread sees the closed channel and ends after its current item,
        # and the source is then released by its own finalizer.
        if threading.current_thread() is not producer:
            producer.join()
            _close_source(source)
