"""Catalog rows, section "Kernels and compilation": cuDNN autotuning, attention kernels,
``torch.compile``."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Kernels and compilation"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="cudnn-benchmark",
        section=SECTION,
        title="Let cuDNN pick the fastest kernels",
        torch="torch.backends.cudnn.benchmark = True",
        jax="# nothing to do: XLA autotunes GPU kernels when it compiles",
        tj="# nothing to do: XLA autotunes GPU kernels when it compiles",
        notes=(
            "XLA measures candidate kernels while compiling each program "
            "(`XLA_FLAGS=--xla_gpu_autotune_level=0..4` changes how hard). "
            "`torch.backends.cudnn.enabled = False` has no equivalent."
        ),
        runs=False,
        torch_api=("torch.backends.cudnn.benchmark", "torch.backends.cudnn.enabled"),
        rewrite="advice",
    ),
    Idiom(
        id="torch-compile",
        section=SECTION,
        title="Compile a model",
        torch="model = torch.compile(model)",
        jax="step = jax.jit(step)  # nnx.jit for Flax NNX: compile the training step",
        tj="step = jax.jit(step)  # nnx.jit for Flax NNX: compile the training step",
        notes=(
            "JAX compiles the functions `jax.jit` wraps, for the devices their inputs are "
            "on; compile the whole step (forward, gradients, update), not the module. "
            "`mode=` and `backend=` have no equivalent: XLA picks the kernels, and the "
            "compiler's settings (`torch._dynamo.config`, `torch._inductor.config`, "
            "`torch._functorch.config`) have none either (XLA's are `XLA_FLAGS`). A "
            "compiled module's `_orig_mod` is the module itself: `jax.jit` wraps the "
            "step, not the model. torchtune's `training.compile_model(model)` calls "
            "`torch.compile` on each layer. The compiler's switches in the environment "
            "(`TORCHDYNAMO_DISABLE`, `TORCH_COMPILE_DISABLE`, `TORCHINDUCTOR_*`) are read by "
            "torch alone: `JAX_DISABLE_JIT=1` turns `jax.jit` off for debugging."
        ),
        runs=False,
        torch_api=(
            "torch.compile",
            "torch.jit.script",
            "torch.jit.trace",
            "torch._dynamo.*",
            "torch._inductor.*",  # the compiler's settings (torch._inductor.config.*)
            "torch._functorch.config.*",
            "torchtune.training.compile_model",
            "torchtune.training.compile_loss",
            "torchtune.utils.compile_model",
            # whether a module is torch.compile's wrapper (its _orig_mod)
            "diffusers.utils.torch_utils.is_compiled_module",
            "accelerate.utils.is_compiled_module",
            "accelerate.utils.other.is_compiled_module",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="sdp-kernel",
        section=SECTION,
        title="Pick the attention kernel",
        torch=(
            "with torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION):\n"
            "    y = F.scaled_dot_product_attention(q, k, v)"
        ),
        jax='y = jax.nn.dot_product_attention(q, k, v, implementation="cudnn")',
        tj='y = jax.nn.dot_product_attention(q, k, v, implementation="cudnn")',
        notes=(
            '`implementation=None` lets XLA choose; `"cudnn"` is the fused GPU kernel, '
            '`"xla"` runs anywhere. JAX\'s layout is (batch, length, heads, dim), '
            "torch's (batch, heads, length, dim): swap axes 1 and 2."
        ),
        runs=False,
        torch_api=(
            "torch.nn.attention.sdpa_kernel",
            "torch.backends.cuda.sdp_kernel",
            "torch.backends.cuda.enable_flash_sdp",
            "torch.backends.cuda.enable_mem_efficient_sdp",
            "torch.backends.cuda.enable_math_sdp",
            "torch.backends.cuda.enable_cudnn_sdp",
        ),
        rewrite="advice",
    ),
)
