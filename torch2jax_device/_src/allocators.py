"""Which ``XLA_PYTHON_CLIENT_ALLOCATOR`` values this jaxlib accepts, asked of jaxlib.

jaxlib 0.11 added ``address`` to the five every jaxlib takes; ``tj.configure`` and
``doctor`` follow what the installed jaxlib says instead of its version number.
"""

from __future__ import annotations

import functools
import re
import types

__all__ = ["accepted_allocators", "allocator_problem"]

#: The allocators every jaxlib accepts.
_ALLOCATORS = ("default", "platform", "bfc", "cuda_async", "vmm")


def allocator_problem(text: str, setting: str) -> str | None:
    """Why ``text`` is not an ``XLA_PYTHON_CLIENT_ALLOCATOR`` this JAX accepts, or ``None``."""
    allowed = accepted_allocators()
    if text in allowed:
        return None
    return (
        f"{setting}: unknown allocator {text!r}; JAX accepts {', '.join(allowed)} "
        "('platform' is the one that returns memory to the driver)"
    )


@functools.cache
def accepted_allocators() -> tuple[str, ...]:
    """The ``XLA_PYTHON_CLIENT_ALLOCATOR`` values this jaxlib accepts (jaxlib 0.11 added
    ``'address'``), as jaxlib's GPU plugin options name them when asked for one they do not
    know; ``_ALLOCATORS``, the ones every jaxlib accepts, where they cannot be asked.

    Asked without a GPU and without touching ``os.environ``: the options builder runs with
    a stand-in ``os`` whose only variable is an unknown allocator.

    Examples:
        >>> from torch2jax_device._src.allocators import accepted_allocators
        >>> accepted_allocators()[:3]
        ('default', 'platform', 'bfc')
    """
    from jax._src.lib import xla_client  # type: ignore[attr-defined]  # jaxlib's, as JAX loads it

    build = getattr(xla_client, "generate_pjrt_gpu_plugin_options", None)
    code = getattr(build, "__code__", None)
    if build is None or code is None:
        return _ALLOCATORS
    unknown = "tj-unknown-allocator"
    variables = {"XLA_PYTHON_CLIENT_ALLOCATOR": unknown}
    stand_in_os = types.SimpleNamespace(
        getenv=lambda name, default=None: variables.get(name, default)
    )
    asked = types.FunctionType(code, {**build.__globals__, "os": stand_in_os})
    try:
        asked()
    except ValueError as error:  # "... must be one of "default", ..., got "tj-unknown..."
        listed, _, got = str(error).partition(", got")
        names = tuple(re.findall(r"[\"']([\w-]+)[\"']", listed))
        if unknown in got and set(_ALLOCATORS) <= set(names):
            return names
    except (AttributeError, KeyError, TypeError):  # a builder that reads more than getenv
        pass
    return _ALLOCATORS
