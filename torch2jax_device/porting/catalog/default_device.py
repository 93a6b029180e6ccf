"""Catalog rows, section "Default device": torch.set_default_device and ``with torch.device(...)``:
where new arrays go."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Default device"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="default-device-context",
        section=SECTION,
        title="Create new arrays on a device for a block",
        torch='with torch.device("cpu"):\n    x = torch.zeros(3)',
        jax='with jax.default_device(jax.local_devices(backend="cpu")[0]):\n    x = jnp.zeros(3)',
        tj='with tj.device("cpu"):\n    x = jnp.zeros(3)',
        notes=(
            "Checked when entered (torch checks at the first tensor). Per thread. "
            "Places uncommitted data only: arrays already committed to a device stay there. "
            "A torch mode of the project's own that fills in factories' `device=` "
            "(`class EmptyInitOnDevice(torch.overrides.TorchFunctionMode)`) is the same "
            "block: `with tj.device(device):`."
        ),
        result="x",
        torch_api=("torch.device",),
        tj_api=("tj.device",),
        rewrite="custom",
    ),
    Idiom(
        id="default-device-missing",
        section=SECTION,
        title="A missing device fails",
        torch='with torch.device("cuda"):\n    x = torch.zeros(3)',
        jax='with jax.default_device("gpu"):\n    x = jnp.zeros(3)',
        tj='with tj.device("cuda"):\n    x = jnp.zeros(3)',
        notes="`jax.default_device('cuda')` is rejected; `'gpu'` fails only at the first array.",
        result="x",
    ),
    Idiom(
        id="default-device-set",
        section=SECTION,
        title="Set the default device",
        torch='torch.set_default_device("cpu")\nx = torch.ones(2)',
        jax=(
            'jax.config.update("jax_default_device", jax.local_devices(backend="cpu")[0])\n'
            "x = jnp.ones(2)"
        ),
        tj='tj.set_default_device("cpu")\nx = jnp.ones(2)',
        notes=(
            "Per thread, as in torch 2.13 (`jax.config.update` is process-wide). "
            "`set_default_device(None)` restores JAX's own default."
        ),
        result="x",
        torch_api=("torch.set_default_device",),
        tj_api=("tj.set_default_device",),
        rewrite="rename",
    ),
    Idiom(
        id="default-device-get",
        section=SECTION,
        title="Read the default device",
        torch="device = torch.get_default_device()",
        jax="device = jax.extend.backend.get_default_device()",
        tj="device = tj.get_default_device()",
        notes=(
            "With nothing set, JAX's default is the accelerator when there is one; "
            "torch's is the CPU."
        ),
        runs=False,
        torch_api=("torch.get_default_device",),
        tj_api=("tj.get_default_device",),
        rewrite="rename",
    ),
)
