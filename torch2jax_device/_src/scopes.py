"""A context manager as a decorator, for every kind of function.

``@tj.device(...)`` and ``@tj.strict_placement`` run a function's body inside a scope.
A plain ``with scope: return func()`` is wrong for two kinds of function: calling a
generator function only creates the generator, so the scope has ended before its body
runs; and an ``async`` function's scope would stay open across its awaits, applying to
every other task on the thread. Here a generator function runs each step (each ``next``,
``send``, ``throw`` and its ``close``) inside a fresh entry of the scope, and its caller's
code between steps outside it; an ``async`` function is refused with the fix.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from .errors import ArgumentTypeError

__all__ = ["around_each_step"]

_F = TypeVar("_F", bound=Callable[..., Any])


def around_each_step(
    func: _F,
    scope: Callable[[], AbstractContextManager[Any]],
    name: str,
    on_call: Callable[[tuple[Any, ...], dict[str, Any]], None] | None = None,
) -> _F:
    """``func`` whose body runs inside ``scope()`` on every call (every step of a
    generator), after ``on_call(args, kwargs)`` when given.

    Args:
        func: The decorated function.
        scope: Makes the context manager to enter (a fresh one, or a reusable one).
        name: The decorator as written, for the refusal (``"@tj.device('cpu')"``).
        on_call: Runs when the function is called (a generator's creation), before
            any step.

    Raises:
        ArgumentTypeError: ``func`` is an ``async def`` function or async generator.

    Examples:
        >>> from contextlib import contextmanager
        >>> depth = []
        >>> @contextmanager
        ... def inside():
        ...     depth.append(1)
        ...     yield
        ...     depth.pop()
        >>> def count():
        ...     yield len(depth)
        ...     yield len(depth)
        >>> steps = around_each_step(count, inside, "@inside")()
        >>> next(steps), len(depth), next(steps)
        (1, 0, 1)
        >>> steps.close()  # the generator's own cleanup runs inside the scope too
    """
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        raise ArgumentTypeError(
            f"{name} cannot decorate the async function "
            f"{getattr(func, '__qualname__', func)!r}: its scope, held across the "
            "function's awaits, would apply to every other task on the thread. Fix: use "
            "it as a `with` block inside the function, around code that does not await"
        )
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def steps_in_scope(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            if on_call is not None:
                on_call(args, kwargs)
            generator = func(*args, **kwargs)
            resume: Callable[[], Any] = functools.partial(generator.send, None)
            while True:
                try:
                    with scope():
                        value = resume()
                except StopIteration as stop:
                    return stop.value
                try:
                    sent = yield value
                except GeneratorExit:
                    with scope():
                        generator.close()
                    raise
                except BaseException as error:  # thrown in: the generator's to handle
                    resume = functools.partial(generator.throw, error)
                else:
                    resume = functools.partial(generator.send, sent)

        return steps_in_scope  # type: ignore[return-value]

    @functools.wraps(func)
    def in_scope(*args: Any, **kwargs: Any) -> Any:
        if on_call is not None:
            on_call(args, kwargs)
        with scope():
            return func(*args, **kwargs)

    return in_scope  # type: ignore[return-value]
