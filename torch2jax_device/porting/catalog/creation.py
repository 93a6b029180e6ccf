"""Catalog rows, section "Creating tensors": factories with ``device=``, ``new_*``, modules
created on a device."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Creating tensors"

#: torch's factories that take ``device=``; any other ``torch.*`` call given
#: ``device=`` is reported under the same row.
FACTORIES = (
    "torch.zeros",
    "torch.ones",
    "torch.empty",
    "torch.full",
    "torch.arange",
    "torch.range",
    "torch.linspace",
    "torch.logspace",
    "torch.eye",
    "torch.rand",
    "torch.randn",
    "torch.randint",
    "torch.randperm",
    "torch.normal",
    "torch.zeros_like",
    "torch.ones_like",
    "torch.empty_like",
    "torch.full_like",
    "torch.rand_like",
    "torch.randn_like",
    "torch.randint_like",
    "torch.empty_strided",
    "torch.tril_indices",
    "torch.triu_indices",
    "torch.sparse_coo_tensor",
)

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="factory-device",
        section=SECTION,
        title="Create a tensor on a device",
        torch='x = torch.zeros(2, 3, device="cpu")',
        jax='x = jnp.zeros((2, 3), device=jax.local_devices(backend="cpu")[0])',
        tj='x = jnp.zeros((2, 3), device=tj.device("cpu").jax_device)',
        notes=(
            "JAX's factories take `device=` too (`jnp.zeros`, `ones`, `empty`, `full`, "
            "`arange`, `linspace`, `eye`, `*_like`), but only a `jax.Device` or a "
            "`Sharding`: `tj.device(d).jax_device` converts torch's names. Or create "
            "inside `with tj.device(d):`. Shapes are one tuple (`jnp.zeros((2, 3))`). "
            "Random factories (`randn`, `randint`, `rand`, `randperm`, `normal`) become "
            "`jax.random.*` calls with a key (see *Randomness*)."
        ),
        result="x",
        torch_api=FACTORIES,
        rewrite="custom",
    ),
    Idiom(
        id="factory-tensor-device",
        section=SECTION,
        title="Turn data into a tensor on a device",
        torch='x = torch.tensor([1.0, 2.0], device="cpu")',
        jax='x = jnp.asarray([1.0, 2.0], device=jax.local_devices(backend="cpu")[0])',
        tj='x = jnp.asarray([1.0, 2.0], device=tj.device("cpu").jax_device)',
        notes=(
            "`torch.as_tensor` and `torch.asarray` too. Python floats become float32 in "
            "both; Python ints become int64 in torch and int32 in JAX (without x64)."
        ),
        result="x",
        torch_api=("torch.tensor", "torch.as_tensor", "torch.asarray"),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-new-factory",
        section=SECTION,
        title="A new tensor like another (`new_zeros`, `new_tensor`, ...)",
        torch="y = x.new_zeros((2, 3))",
        jax="y = jnp.zeros((2, 3), dtype=x.dtype, device=x.device)",
        tj="y = jnp.zeros((2, 3), dtype=x.dtype, device=tj.device_of(x).jax_device)",
        notes=(
            "`new_*` copy the source's dtype and device; JAX spells both out. "
            "`x.new_tensor(data)` is `jnp.asarray(data, dtype=x.dtype, device=...)`."
        ),
        runs=False,
        torch_api=(
            "Tensor.new_zeros",
            "Tensor.new_ones",
            "Tensor.new_empty",
            "Tensor.new_full",
            "Tensor.new_tensor",
        ),
        rewrite="custom",
    ),
    Idiom(
        id="module-device-kwarg",
        section=SECTION,
        title="Create a layer's parameters on a device",
        torch='layer = torch.nn.Linear(4, 2, device="cpu")',
        jax=(
            'with jax.default_device(jax.local_devices(backend="cpu")[0]):\n'
            "    layer = nnx.Linear(4, 2, rngs=nnx.Rngs(0))"
        ),
        tj='with tj.device("cpu"):\n    layer = nnx.Linear(4, 2, rngs=nnx.Rngs(0))',
        notes=(
            "Flax layers take no device: create them under `with tj.device(...)` (the "
            "parameters are created there) or move them with `tj.to_device(layer, device)`. "
            "A project's own helper told `device=` (`create_model(name, device=device)`) "
            "is reported at the call, as advice: port it where it is defined."
        ),
        runs=False,
        torch_api=("torch.nn.Module",),
        rewrite="custom",
    ),
    Idiom(
        id="cuda-tensor-type",
        section=SECTION,
        title="Legacy CUDA tensor types",
        torch="x = torch.cuda.FloatTensor(2, 3)",
        jax='x = jnp.empty((2, 3), jnp.float32, device=jax.local_devices(backend="cuda")[0])',
        tj='x = jnp.empty((2, 3), jnp.float32, device=tj.device("cuda").jax_device)',
        notes=(
            "`torch.cuda.LongTensor`, `HalfTensor`, ... likewise, and "
            "`torch.set_default_tensor_type(torch.cuda.FloatTensor)` is "
            "`tj.set_default_device('cuda')` (float32 is JAX's default already)."
            " `isinstance(x, torch.LongTensor)` asks for a dtype and a device at once (an int64 "
            "tensor on the CPU; `torch.cuda.LongTensor` on a GPU): `isinstance(x, jax.Array) and "
            'x.dtype == jnp.int64 and tj.device_of(x).type == "cpu"`.'
        ),
        runs=False,
        torch_api=(
            "torch.cuda.FloatTensor",
            "torch.cuda.DoubleTensor",
            "torch.cuda.HalfTensor",
            "torch.cuda.BFloat16Tensor",
            "torch.cuda.ByteTensor",
            "torch.cuda.CharTensor",
            "torch.cuda.ShortTensor",
            "torch.cuda.IntTensor",
            "torch.cuda.LongTensor",
            "torch.cuda.BoolTensor",
            "torch.set_default_tensor_type",
        ),
        rewrite="advice",
    ),
)
