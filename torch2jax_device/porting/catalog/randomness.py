"""Catalog rows, section "Randomness": seeds, generators, RNG state and determinism."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Randomness"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="manual-seed",
        section=SECTION,
        title="Seed the global generator",
        torch="torch.manual_seed(0)\nx = torch.rand(3)",
        jax="key = jax.random.key(0)\nx = jax.random.uniform(key, (3,))",
        tj=(
            "key = jax.random.key(0)  # torch.manual_seed(0) still seeds a DataLoader's shuffle\n"
            "x = jax.random.uniform(key, (3,))"
        ),
        notes=(
            "JAX has no global generator: a key made from the seed is passed to every "
            "random call (`jax.random.split` for more keys). Creating a key starts JAX, "
            "so seed after `init_process_group`. The numbers differ from torch's. A torch "
            "`DataLoader(shuffle=True)` (or a `RandomSampler`) still draws its order from "
            "torch's global generator: keep `torch.manual_seed` while one feeds the port, "
            "or give it `generator=torch.Generator().manual_seed(0)`. `scan` keys JAX with the "
            "script's own seed (`torch.manual_seed(args.seed)` becomes "
            "`jax.random.key(args.seed)`)."
        ),
        runs=False,
        torch_api=(
            "torch.manual_seed",
            "torch.random.manual_seed",
            "torch.seed",
            "torch.random.seed",
            "torch.initial_seed",
            "torch.random.initial_seed",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="cuda-manual-seed",
        section=SECTION,
        title="Seed the GPUs' generators",
        torch="torch.cuda.manual_seed_all(0)",
        jax="# nothing to seed: keys give the same numbers on every device",
        tj="tj.cuda.manual_seed_all(0)",
        notes=(
            "Accepted and ignored (torch ignores it without CUDA): JAX's random numbers "
            "come from keys, not per-device generators. Seed with `jax.random.key(seed)`."
        ),
        torch_api=("torch.cuda.manual_seed", "torch.cuda.manual_seed_all"),
        tj_api=("tj.cuda.manual_seed", "tj.cuda.manual_seed_all"),
        rewrite="rename",
    ),
    Idiom(
        id="generator-device",
        section=SECTION,
        title="A generator on a device",
        torch=(
            'generator = torch.Generator(device="cpu").manual_seed(0)\n'
            "x = torch.randn(3, generator=generator)"
        ),
        jax="key = jax.random.key(0)\nx = jax.random.normal(key, (3,))",
        tj="key = jax.random.key(0)\nx = jax.random.normal(key, (3,))",
        notes=(
            "Keys belong to no device: the same key gives the same numbers everywhere. "
            "Create the result under `with tj.device(d):` or move it with `tj.to_device`."
        ),
        runs=False,
        torch_api=("torch.Generator", "torch.cuda.default_generators"),
        rewrite="advice",
    ),
    Idiom(
        id="rng-state",
        section=SECTION,
        title="Save and restore the random state",
        torch="state = torch.cuda.get_rng_state()\ntorch.cuda.set_rng_state(state)",
        jax="# the key is the state: keep it, e.g. in the checkpoint (jax.random.key_data)",
        tj="# the key is the state: keep it, e.g. in the checkpoint (jax.random.key_data)",
        notes="`jax.random.wrap_key_data` turns saved key data back into a key.",
        runs=False,
        torch_api=(
            "torch.get_rng_state",
            "torch.set_rng_state",
            "torch.random.get_rng_state",
            "torch.random.set_rng_state",
            "torch.random.fork_rng",
            "torch.cuda.get_rng_state",
            "torch.cuda.set_rng_state",
            "torch.cuda.get_rng_state_all",
            "torch.cuda.set_rng_state_all",
            # the other accelerators' generators, saved and restored the same way
            *(
                f"torch.{kind}.{name}"
                for kind in ("xpu", "npu", "mps")
                for name in ("get_rng_state", "set_rng_state")
            ),
        ),
        rewrite="advice",
    ),
    Idiom(
        id="deterministic",
        section=SECTION,
        title="Deterministic kernels",
        torch="torch.use_deterministic_algorithms(True)\ntorch.backends.cudnn.deterministic = True",
        jax='os.environ["XLA_FLAGS"] = "--xla_gpu_deterministic_ops=true"  # before JAX starts',
        tj='os.environ["XLA_FLAGS"] = "--xla_gpu_deterministic_ops=true"  # before JAX starts',
        notes=(
            "JAX on the CPU is deterministic already; on GPUs XLA picks deterministic "
            "kernels with this flag (slower). `CUBLAS_WORKSPACE_CONFIG` is not needed, nor "
            "`torch.utils.deterministic.fill_uninitialized_memory`: JAX has no uninitialised "
            "memory (`jnp.empty` is `jnp.zeros`)."
        ),
        runs=False,
        torch_api=(
            "torch.use_deterministic_algorithms",
            "torch.are_deterministic_algorithms_enabled",
            "torch.backends.cudnn.deterministic",
            # whether torch.empty fills its memory when deterministic algorithms are on
            "torch.utils.deterministic.fill_uninitialized_memory",
        ),
        rewrite="advice",
    ),
)
