"""What a placement plan may use: ``max_memory`` parsed, each place's budget, the tiers.

Accelerate's rules for ``max_memory`` (``get_max_memory``, ``get_balanced_memory``):
the dict lists every device a plan may use, its GPUs in index order; sizes in its units;
``device_map="auto"`` over several GPUs gives each a balanced share of the model. The
plan itself (``device_plan``) fills these budgets; here is only what they are.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import jax
from jax.sharding import SingleDeviceSharding

from . import platforms, runtime
from .capacity import free_bytes
from .checkpoints.messages import shown
from .detect import is_torch_device
from .device import Device, resolve
from .errors import ConfigError, DeviceUnavailableError, InvalidDeviceError

__all__ = [
    "PINNED",
    "PINNED_KEY",
    "RESERVE",
    "Budgets",
    "Destination",
    "device_in_map",
    "memory_kinds",
    "parse_size",
]

#: The memory kind of host RAM an accelerator's jitted code can read (JAX's name).
PINNED = "pinned_host"
#: The ``max_memory`` key of the budget for the computing accelerator's pinned host memory.
PINNED_KEY = PINNED
#: The share of an accelerator's free memory a plan leaves for activations and compiled
#: programs when ``max_memory`` gives it no figure (Accelerate keeps 10 % too).
RESERVE = 0.10

_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")


def parse_size(value: Any, where: str) -> int:
    """A memory budget as bytes: an int, or a string such as ``"20GiB"``, ``"1.5GB"``.

    Units are Accelerate's: ``KB``/``MB``/``GB``/``TB`` are powers of 1000, ``KiB`` ...
    ``TiB`` powers of 1024, any case (``"20gib"`` too); a bare number is bytes.
    ``where`` names the entry in the message.

    Raises:
        ConfigError: the value is not a non-negative size; Accelerate's ``"20Gb"`` and
            ``"20gb"`` (bits, an eighth of the bytes) are refused rather than guessed.

    Examples:
        >>> from torch2jax_device._src.device_plan import parse_size
        >>> parse_size("20GiB", "cuda:0"), parse_size("1.5GB", "cpu"), parse_size(512, "cpu")
        (21474836480, 1500000000, 512)
        >>> parse_size("2gib", "cpu")  # Accelerate's reading, whatever the case
        2147483648
    """
    if type(value) is int and value >= 0:
        return value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    unit = match.group(2) if match else ""
    factor = _UNITS.get(unit.upper() or "B")
    bits = len(unit) == 2 and unit.endswith("b")  # Accelerate's "Gb", "gb": bits
    if match and factor is not None and not bits:
        return int(float(match.group(1)) * factor)
    raise ConfigError(
        f"max_memory[{where}] = {shown(value)} is not a memory size. Fix: give bytes as an "
        "int, or a number and a unit: '20GiB' (2**30 bytes each), '20GB' (10**9 each), "
        "also KiB, MiB, TiB, KB, MB, TB ('Gb' would be bits: write GB or GiB)"
    )


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where a tensor goes: a device and one of its memory kinds.

    ``memory_kind`` is ``"device"`` (the device's own memory; on a CPU device, host RAM)
    or ``"pinned_host"`` (host RAM an accelerator's jitted code can read).
    """

    device: jax.Device
    memory_kind: str = "device"

    @property
    def sharding(self) -> SingleDeviceSharding:
        """The sharding that puts an array here."""
        return SingleDeviceSharding(self.device, memory_kind=self.memory_kind)

    def spec(self) -> str | tuple[str, str]:
        """How an explicit ``device_map`` names it: ``"cuda:0"``, ``("cuda:0", "pinned_host")``."""
        name = str(Device(self.device))
        return name if self.memory_kind == "device" else (name, self.memory_kind)

    def __str__(self) -> str:
        name = str(Device(self.device))
        return name if self.memory_kind == "device" else f"{name} {self.memory_kind}"


class Budgets:
    """``max_memory``, parsed and resolved, and the figures of the places it leaves out."""

    def __init__(self, max_memory: Mapping[Any, Any] | None) -> None:
        if max_memory is not None and not isinstance(max_memory, Mapping):
            raise ConfigError(
                f"max_memory={shown(max_memory)}: give a dict of devices to sizes, e.g. "
                "{'cuda:0': '20GiB', 'cpu': '100GiB'}"
            )
        self.accelerators: dict[jax.Device, int] = {}
        self.host: int | None = None
        self.pinned: int | None = None
        self.shares: dict[Destination, int] = {}  # balanced ones, below their budgets
        for key, value in (max_memory or {}).items():
            where = shown(key)
            size = parse_size(value, where)
            if key == PINNED_KEY:
                self.pinned = size
            elif isinstance(key, str) and key == "disk":
                raise InvalidDeviceError(
                    "max_memory['disk']: tj does not offload to disk. Fix: drop the entry; "
                    "what does not fit the accelerators stays in host memory ('cpu'), and a "
                    "safetensors file is memory-mapped, so the host reads only what is used"
                )
            elif _is_host(key):
                self.host = size
            else:
                self.accelerators[device_in_map(key, "max_memory")] = size
        # Accelerate's rule: a max_memory names every device a plan may use (only "cpu"
        # named: nothing on a GPU), its GPUs filled in index order whatever the dict's.
        self.named = bool(max_memory)
        self.accelerators = dict(
            sorted(self.accelerators.items(), key=lambda item: (item[0].platform, item[0].id))
        )
        if self.named and self.pinned is not None and not self.accelerators:
            raise ConfigError(
                f"max_memory['pinned_host'] = {self.pinned:,} bytes is the budget "
                "of the first accelerator's pinned host memory, and max_memory names no "
                "accelerator (a max_memory lists every device a plan may use, as in "
                "Accelerate). Fix: name it with the bytes its own memory may take, e.g. "
                "{0: '20GiB', 'pinned_host': '40GiB', 'cpu': '100GiB'} (0 bytes keeps "
                "every weight off it)"
            )
        self.host_device = resolve("cpu")
        if self.host_device in self.accelerators:
            raise InvalidDeviceError(
                f"max_memory names {Device(self.host_device)}, the host's own device, as an "
                "accelerator to fill. Fix: give the host's share as max_memory['cpu'], and "
                "let another device stand in for an accelerator (e.g. 'cpu:1' with "
                "jax_num_cpu_devices=2)"
            )

    def in_host(self, place: Destination) -> bool:
        """Whether ``place`` is one of the host's: pinned memory, or a CPU device that is
        not standing in for an accelerator (one ``max_memory`` names with an index)."""
        if place.memory_kind == PINNED:
            return True
        return place.device.platform == "cpu" and place.device not in self.accelerators

    def tiers(self) -> list[Destination]:
        """Where an automatic plan puts tensors, in order."""
        accelerators = list(self.accelerators) if self.named else _local_accelerators()
        tiers = [Destination(device) for device in accelerators]
        if accelerators and PINNED in memory_kinds(accelerators[0]):
            tiers.append(Destination(accelerators[0], PINNED))
        tiers.append(Destination(self.host_device))
        return tiers

    def balance(self, total: int, final_modules: list[int], *, low_zero: bool) -> None:
        """Give each accelerator but the last a balanced share of the model, as
        Accelerate's ``get_balanced_memory`` does for ``device_map="auto"`` /
        ``"balanced"``: the model's ``total`` bytes over the accelerators (all but the
        first with ``low_zero``, ``"balanced_low_0"``), plus 1.25 times the mean of its
        final modules (``final_modules``: the bytes of each module with tensors but no
        module with tensors below it, Accelerate's ``get_module_leaves``), each share
        within the accelerator's budget; the last keeps its whole budget. With one
        accelerator, nothing changes.
        """
        accelerators = [tier for tier in self.tiers() if not self.in_host(tier)]
        limits = {tier: self.of(tier) for tier in accelerators}
        filled = [tier for tier in accelerators if (limit := limits[tier]) is None or limit > 0]
        if len(filled) < 2 or not total:
            return
        mean = int(sum(final_modules) / max(len(final_modules), 1))  # as Accelerate rounds
        buffer = int(1.25 * mean)
        per_device = total // (len(filled) - 1 if low_zero else len(filled)) + buffer
        for tier in filled[:-1]:
            if low_zero and tier == filled[0]:
                continue  # set below, from what the others hold
            limit = limits[tier]
            self.shares[tier] = per_device if limit is None else min(per_device, limit)
        if low_zero:
            others = [self.shares.get(tier, limits[tier]) for tier in filled[1:]]
            least = 0 if None in others else max(0, total - sum(o for o in others if o))
            limit = limits[filled[0]]
            self.shares[filled[0]] = least if limit is None else min(least, limit)

    def of(self, destination: Destination) -> int | None:
        """The budget of one place (``None``: no limit); host places share the host's."""
        if destination in self.shares:
            return self.shares[destination]
        if destination.memory_kind == PINNED:
            host = self.host_total()
            if self.pinned is None or host is None:
                return self.pinned if host is None else host
            return min(self.pinned, host)
        if destination.device in self.accelerators:
            return self.accelerators[destination.device]
        if destination.device.platform == "cpu":
            return self.host_total()
        free = free_bytes(destination.device)
        return None if free is None else int(free * (1 - RESERVE))

    def source(self, place: Destination) -> str:
        """Where the budget of ``place`` comes from, as a message says it."""
        if place in self.shares:
            within = self._source(place)
            return f"its balanced share of the model (device_map='auto'), within {within}"
        return self._source(place)

    def _source(self, place: Destination) -> str:
        host = "max_memory['cpu']" if self.host is not None else "the host's available RAM"
        if place.memory_kind == PINNED:
            return f"max_memory['pinned_host'], within {host}" if self.pinned is not None else host
        if place.device in self.accelerators:
            return f"max_memory[{shown(str(Device(place.device)))}]"
        if place.device.platform == "cpu":
            return host
        return f"{round((1 - RESERVE) * 100)} % of its free memory"

    def host_total(self) -> int | None:
        """The host RAM every host place together may take."""
        return self.host if self.host is not None else _host_available()


def device_in_map(spec: Any, where: str) -> jax.Device:
    """``spec`` resolved, with the map entry named if it does not exist here."""
    try:
        return resolve(spec)
    except DeviceUnavailableError as err:
        raise DeviceUnavailableError(f"{where} names {shown(spec)}: {err}") from None
    except InvalidDeviceError as err:
        raise InvalidDeviceError(f"{where} names {shown(spec)}: {err}") from None


def _is_host(key: Any) -> bool:
    """Whether a ``max_memory`` key is Accelerate's ``"cpu"``: the host, unindexed
    (``torch.device("cpu")`` and ``tj.device("cpu")`` too, which equal it)."""
    if isinstance(key, str):
        return key == "cpu"
    if is_torch_device(key):
        key = Device(key)
    return isinstance(key, Device) and key.type == "cpu" and key.index is None


def _local_accelerators() -> list[jax.Device]:
    platform = runtime.current_platform(platforms.ACCELERATORS)
    return [] if platform is None else list(platforms.device_indices(platform).values())


def memory_kinds(device: jax.Device) -> set[str]:
    try:
        return {memory.kind for memory in device.addressable_memories()}
    except (AttributeError, NotImplementedError, jax.errors.JaxRuntimeError):
        return {"device"}


def _host_available() -> int | None:
    """The host RAM the kernel says is available now (``MemAvailable``), if it says."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
