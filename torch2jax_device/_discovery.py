"""List every backend and device JAX can use, not just the default backend's."""

from __future__ import annotations

from . import _platforms
from ._device import Device

__all__ = ["available_backends", "list_devices"]


def available_backends() -> list[str]:
    """Every JAX backend usable here, default first (e.g. ``['cuda', 'cpu']``).

    ``jax.devices()`` only shows the default backend and probing others means
    catching ``RuntimeError``; this asks JAX once for all of them. It respects
    ``JAX_PLATFORMS``. The first call starts JAX's backends (creating a CUDA context
    on a GPU machine), so make start-up settings before calling it.

    Raises:
        BackendInitError: JAX could not start (e.g. ``JAX_PLATFORMS`` lists a
            platform this machine lacks); the message says how to fix it.

    Example:
        >>> import torch2jax_device as tj
        >>> "cpu" in tj.available_backends()
        True
    """
    return _platforms.available_platforms()


def list_devices(backend: str | None = None) -> list[Device]:
    """Every device of this process, on every backend or on one, default backend first.

    Args:
        backend: A JAX platform name (``"cuda"``, ``"cpu"``, ...) to list only its
            devices; an absent backend gives ``[]``.

    Raises:
        BackendInitError: JAX could not start (see :func:`available_backends`).

    Example:
        >>> import torch2jax_device as tj
        >>> tj.device("cpu") in tj.list_devices("cpu")
        True
    """
    platforms = [backend] if backend is not None else _platforms.available_platforms()
    return [Device(device) for name in platforms for device in _platforms.local_devices(name)]
