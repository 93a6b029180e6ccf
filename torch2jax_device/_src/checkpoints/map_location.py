"""``map_location``, as ``torch.load`` takes it: classified once, applied to every format.

``MapLocationRule`` checks the argument before anything is read and says where a tensor
saved at a location goes; ``LocationHook`` is what ``torch.load`` is given in its place,
keeping storages on the CPU and recording where each one goes afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import jax

from ..detect import is_torch_device
from ..device import Device, DeviceLike
from ..errors import DeviceTypeError, InvalidDeviceError

__all__ = ["LocationHook", "MapLocation", "MapLocationRule"]

#: What ``map_location`` accepts, as in ``torch.load``: a device, a dict from saved
#: location tags (``"cuda:0"``) to location strings, or a callable ``(storage, location)``.
MapLocation = DeviceLike | dict[Any, str] | Callable[[Any, str], Any] | None


class MapLocationRule:
    """One ``map_location``, classified once: a device, a dict of locations or a callable.

    The forms ``torch.load`` takes, checked before anything is read; ``tj.device``
    objects, ``jax.Device`` objects and the ``tj.device`` spellings torch lacks
    (``"gpu"``, ``"cpu:0"``) are accepted as devices too.

    Raises:
        DeviceTypeError: ``map_location`` is none of the forms ``torch.load`` takes.
        InvalidDeviceError: a device string names no device.
    """

    def __init__(self, map_location: MapLocation) -> None:
        self.device: Device | jax.Device | None = None
        self.mapping: dict[Any, Device] | None = None
        self.function: Callable[[Any, str], Any] | None = None
        # Devices first: a tj.device is callable (its decorator form).
        if isinstance(map_location, (str, Device)) or is_torch_device(map_location):
            self.device = _device(map_location)
        elif isinstance(map_location, jax.Device):
            self.device = map_location
        elif isinstance(map_location, dict):
            self.mapping = {key: _location(key, value) for key, value in map_location.items()}
        elif callable(map_location):
            self.function = map_location
        elif map_location is not None:
            raise DeviceTypeError(_wrong_form(map_location))

    def target(self, location: str) -> Any:
        """Where a tensor saved at ``location`` goes, for the device and dict forms."""
        if self.device is not None:
            return self.device
        if self.mapping is not None:
            return self.mapping.get(location, location)
        return location

    def safetensors_device(self, name: str) -> DeviceLike:
        """The device a safetensors file goes to: its tensors count as saved on ``cpu``."""
        if self.function is not None:
            raise DeviceTypeError(
                f"a callable map_location cannot place {name}: it receives torch storages, "
                "and a safetensors file has none. Fix: pass a device, e.g. "
                "tj.load(path, map_location='cuda:0')"
            )
        return cast(DeviceLike, self.target("cpu"))


def _device(map_location: Any, key: Any = None) -> Device:
    """``map_location`` (or its dict's value for ``key``) as a device; a string that names
    none raises ``InvalidDeviceError`` naming the argument and the fix."""
    try:
        return Device(map_location)
    except InvalidDeviceError as error:
        if "Fix" in str(error):
            raise
        given = f"{{{key!r}: {map_location!r}}}" if key is not None else repr(map_location)
        raise InvalidDeviceError(
            f"map_location={given:.80} names no device ({error}; torch raises RuntimeError: "
            "don't know how to restore data location). Fix: name a device as torch spells "
            "it, in lowercase: 'cpu', 'cuda', 'cuda:1' (or tj.device's 'gpu', 'tpu')"
        ) from None


def _location(key: Any, value: Any) -> Device:
    """A dict ``map_location`` value: a location string, as ``torch.load`` requires."""
    if not isinstance(value, str):
        is_device = isinstance(value, (Device, jax.Device)) or is_torch_device(value)
        hint = f"{{{key!r}: {str(Device(value))!r}}}" if is_device else "a string"
        raise DeviceTypeError(
            f"map_location={{{key!r}: {value!r}}}: the values of a map_location dict are "
            f"location strings such as 'cpu' or 'cuda:1', not {type(value).__name__} "
            f"(torch raises TypeError: expected string). Fix: Write {hint}, or pass one "
            "device for every tensor: map_location=device"
        )
    return _device(value, key)


def _wrong_form(map_location: Any) -> str:
    message = (
        f"map_location={map_location!r:.80} is not a form torch.load takes (torch raises "
        "TypeError): it must be a device ('cpu', 'cuda:1', torch.device(...), "
        "tj.device(...)), a dict of location strings ({'cuda:0': 'cpu'}) or a callable "
        f"(storage, location) -> storage, not {type(map_location).__name__}"
    )
    if isinstance(map_location, int) and not isinstance(map_location, bool):
        return message + (
            f". An int is not a device here: 'cuda:{map_location}' is. Fix: "
            f"map_location='cuda:{map_location}' (or tj.device({map_location}) for "
            f"accelerator {map_location})"
        )
    return message + ". Fix: pass one of those, e.g. map_location='cpu'"


class LocationHook:
    """``torch.load``'s ``map_location``: keeps storages on the CPU, records their targets.

    torch calls it with each storage (on the CPU) and its saved location tag. Data stays
    on the CPU and is moved once, after conversion to JAX, to the device ``map_location``
    names, following torch's rules for each form. A callable's storage is used as is.
    """

    def __init__(self, rule: MapLocationRule, storage_type: Any) -> None:
        self._rule = rule
        self._storage_type: Any = storage_type
        # storage._cdata -> (saved location, where it goes)
        self.targets: dict[int, tuple[str, Any]] = {}
        self.data_bytes = 0
        self.failure: BaseException | None = None

    def __call__(self, storage: Any, location: str) -> Any:
        self.data_bytes += storage.nbytes()
        if self._rule.function is None:
            self.targets[storage._cdata] = (location, self._rule.target(location))
            return storage
        try:
            moved: Any = self._rule.function(storage, location)
            if moved is not None and not isinstance(moved, self._storage_type):
                raise DeviceTypeError(
                    f"the map_location callable returned {moved!r:.80} "
                    f"({type(moved).__name__}) for a storage saved on {location!r}; it must "
                    "return a storage (storage, storage.cpu(), ...) or None for the saved "
                    "location (torch raises TypeError here too). Fix: return the storage "
                    "(or None); to send every tensor to one device, pass that device: "
                    "map_location='cpu'"
                )
        except BaseException as err:
            self.failure = err
            raise
        if moved is None:
            self.targets[storage._cdata] = (location, location)
            return storage
        self.targets[moved._cdata] = (location, moved.device)
        return moved

    def unrecorded(self, location: str) -> tuple[str, Any]:
        """(saved location, where it goes) for a tensor on ``location`` whose storage torch
        made without calling the hook: the legacy format gives a view of an empty storage
        a fresh one. ``map_location`` still applies (a callable's rule, to the location)."""
        if self._rule.function is None:
            return (location, self._rule.target(location))
        return (location, location)
