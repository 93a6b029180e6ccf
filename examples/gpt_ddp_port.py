"""``gpt_ddp_torch.py`` ported to JAX with torch2jax_device and Flax NNX, line by line.

Launch it as the original was launched (2 CPU processes take a few seconds)::

    torchrun --nproc_per_node=2 examples/gpt_ddp_port.py --out-dir /tmp/gpt-jax
    torch2jax-device run --nproc-per-node 2 examples/gpt_ddp_port.py --out-dir /tmp/gpt-jax
    python examples/gpt_ddp_port.py --out-dir /tmp/gpt-jax      # one process

The PyTorch lines are kept as comments above their ports. What changes underneath:

* ``DDP(model)`` is ``tj.to_device(model, NamedSharding(mesh, P()))``: the placed
  model replicated over a mesh of every process's devices;
* each process's batch rows become one global batch (``make_global_batch``), and
  ``nnx.jit`` compiles the step for the whole mesh, so DDP's gradient all-reduce is
  part of the compiled program (gradient accumulation too: one step per optimizer
  update, its micro-batches in a loop inside it);
* rank 0 gathers the model to the host (``tj.to_device(..., "cpu")``) and saves it as
  safetensors; a resumed run loads the model as torch does (``map_location=device``)
  and the optimizer state straight onto the mesh (``map_location=replicated``);
* ``--torch-weights PATH`` starts from a PyTorch ``state_dict`` (the original's
  ``--save-init``), so the two trainers can be compared step by step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from gpt_data import VOCAB_SIZE, get_batch, prepare
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from torch2jax_device import distributed as dist


def normal(std: float) -> Any:
    return nnx.initializers.normal(stddev=std)


class CausalSelfAttention(nnx.Module):
    def __init__(self, args: argparse.Namespace, rngs: nnx.Rngs) -> None:
        projection_std = 0.02 / math.sqrt(2 * args.n_layer)
        self.c_attn = nnx.Linear(args.n_embd, 3 * args.n_embd, kernel_init=normal(0.02), rngs=rngs)
        self.c_proj = nnx.Linear(
            args.n_embd, args.n_embd, kernel_init=normal(projection_std), rngs=rngs
        )
        self.n_head = args.n_head

    def __call__(self, x: jax.Array) -> jax.Array:
        B, T, C = x.shape
        q, k, v = jnp.split(self.c_attn(x), 3, axis=2)
        q, k, v = (t.reshape(B, T, self.n_head, C // self.n_head).swapaxes(1, 2) for t in (q, k, v))
        # PyTorch: F.scaled_dot_product_attention(q, k, v, is_causal=True)
        scores = q @ k.swapaxes(-2, -1) / math.sqrt(C // self.n_head)
        scores = jnp.where(jnp.tril(jnp.ones((T, T), bool)), scores, -jnp.inf)
        y = jax.nn.softmax(scores, axis=-1) @ v
        return self.c_proj(y.swapaxes(1, 2).reshape(B, T, C))


class MLP(nnx.Module):
    def __init__(self, args: argparse.Namespace, rngs: nnx.Rngs) -> None:
        projection_std = 0.02 / math.sqrt(2 * args.n_layer)
        self.c_fc = nnx.Linear(args.n_embd, 4 * args.n_embd, kernel_init=normal(0.02), rngs=rngs)
        self.c_proj = nnx.Linear(
            4 * args.n_embd, args.n_embd, kernel_init=normal(projection_std), rngs=rngs
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=False))  # nn.GELU()


class Block(nnx.Module):
    def __init__(self, args: argparse.Namespace, rngs: nnx.Rngs) -> None:
        self.ln_1 = nnx.LayerNorm(args.n_embd, epsilon=1e-5, rngs=rngs)  # torch's eps
        self.attn = CausalSelfAttention(args, rngs)
        self.ln_2 = nnx.LayerNorm(args.n_embd, epsilon=1e-5, rngs=rngs)
        self.mlp = MLP(args, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nnx.Module):  # nanoGPT's nn.ModuleDict
    def __init__(self, args: argparse.Namespace, rngs: nnx.Rngs) -> None:
        self.wte = nnx.Embed(VOCAB_SIZE, args.n_embd, embedding_init=normal(0.02), rngs=rngs)
        self.wpe = nnx.Embed(args.block_size, args.n_embd, embedding_init=normal(0.02), rngs=rngs)
        self.h = nnx.List([Block(args, rngs) for _ in range(args.n_layer)])
        self.ln_f = nnx.LayerNorm(args.n_embd, epsilon=1e-5, rngs=rngs)


class GPT(nnx.Module):
    def __init__(self, args: argparse.Namespace, rngs: nnx.Rngs) -> None:
        self.transformer = Transformer(args, rngs)

    def __call__(self, idx: jax.Array, targets: jax.Array) -> jax.Array:
        positions = jnp.arange(idx.shape[1])
        x = self.transformer.wte(idx) + self.transformer.wpe(positions)  # embedding lookups
        for block in self.transformer.h:
            x = block(x)
        logits = self.transformer.wte.attend(self.transformer.ln_f(x))  # tied lm_head
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def configure_optimizer(model: GPT, args: argparse.Namespace) -> nnx.Optimizer[GPT]:
    # PyTorch: AdamW with weight decay on the parameters of 2 or more dimensions only
    def decay_mask(params: Any) -> Any:
        return jax.tree.map(lambda p: p.ndim >= 2, params)

    tx = optax.adamw(args.learning_rate, b1=0.9, b2=0.95, eps=1e-8,
                     weight_decay=args.weight_decay, mask=decay_mask)  # fmt: skip
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


def state_dict(module: nnx.Module) -> dict[str, jax.Array]:
    """``module.state_dict()``: every array of the module, by dotted path."""
    leaves = jax.tree_util.tree_leaves_with_path(nnx.state(module))
    return {_dotted(path): leaf for path, leaf in leaves}


def load_state_dict(module: nnx.Module, tensors: dict[str, jax.Array]) -> None:
    """``module.load_state_dict(tensors)``: the arrays go in where they already are."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(nnx.state(module))
    nnx.update(module, jax.tree.unflatten(treedef, [tensors[_dotted(p)] for p, _ in paths]))


def load_torch_weights(model: GPT, weights: dict[str, jax.Array]) -> None:
    """A PyTorch nanoGPT ``state_dict`` into the port: names mapped, Linear weights transposed."""
    ported = {}
    for name in state_dict(model):
        stem, kind = name.rsplit(".", 1)
        array = weights[f"{stem}.{'bias' if kind == 'bias' else 'weight'}"]
        ported[name] = array.T if kind == "kernel" else array  # torch's Linear is (out, in)
    load_state_dict(model, ported)


def _dotted(path: tuple[Any, ...]) -> str:
    keys = [getattr(key, "key", getattr(key, "idx", getattr(key, "name", key))) for key in path]
    return ".".join(str(key) for key in keys if key != "value")


@nnx.jit
def train_step(model: GPT, optimizer: nnx.Optimizer[GPT], batches: list[Any]) -> jax.Array:
    # PyTorch: for each micro step, loss = model(X, Y) / accumulation; loss.backward(),
    # then optimizer.step(). The batches span every process: the gradients are DDP's.
    def loss_fn(model: GPT, batch: dict[str, jax.Array]) -> jax.Array:
        return model(batch["x"], batch["y"])

    losses, grads = [], None
    for batch in batches:
        loss, micro_grads = nnx.value_and_grad(loss_fn)(model, batch)
        losses.append(loss)
        grads = micro_grads if grads is None else jax.tree.map(jnp.add, grads, micro_grads)
    optimizer.update(model, jax.tree.map(lambda g: g / len(batches), grads))
    return jnp.mean(jnp.stack(losses))


@nnx.jit
def eval_loss(model: GPT, batch: dict[str, jax.Array]) -> jax.Array:
    return model(batch["x"], batch["y"])


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--init-from", choices=("scratch", "resume"), default="scratch")
    parser.add_argument("--torch-weights", type=Path, help="start from a PyTorch state_dict")
    parser.add_argument("--max-iters", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4, help="per process, as nanoGPT")
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--eval-iters", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1337)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    data_dir = args.out_dir / "data"
    ddp = int(os.environ.get("RANK", -1)) != -1  # unchanged: launched by torchrun?
    # PyTorch: device_type = "cuda" if torch.cuda.is_available() else "cpu"
    device_type = "cuda" if tj.cuda.is_available() else "cpu"  # before init: allowed
    if ddp:
        # PyTorch: init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
        # PyTorch: rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        rank, world_size = dist.get_rank(), dist.get_world_size()
        # PyTorch: local_rank = int(os.environ["LOCAL_RANK"])
        local_rank = dist.get_local_rank()
        # PyTorch: device = f"cuda:{local_rank}"; torch.cuda.set_device(device)
        device = tj.device(f"cuda:{local_rank}") if device_type == "cuda" else tj.device("cpu")
    else:
        rank, world_size, local_rank = 0, 1, 0
        device = tj.device(device_type)
    master_process = rank == 0
    if master_process:
        prepare(data_dir)
    if ddp:
        dist.barrier()  # the data exists before anyone reads it

    # One mesh over every device of every process (one process alone: its own devices).
    mesh = dist.init_device_mesh(device_type, (jax.device_count(),), mesh_dim_names=("data",))
    replicated = NamedSharding(mesh, P())

    iter_num = 0
    # PyTorch: torch.manual_seed(seed); model = GPT(config)
    model = GPT(args, nnx.Rngs(args.seed))
    model_path = args.out_dir / "model.safetensors"
    optimizer_path = args.out_dir / "optimizer.safetensors"
    if args.init_from == "resume":
        # PyTorch: checkpoint = torch.load(ckpt_path, map_location=device)
        #          model.load_state_dict(checkpoint["model"])
        load_state_dict(model, tj.load(model_path, map_location=device))
        with tj.safe_open(model_path) as checkpoint:
            iter_num = int(checkpoint.metadata()["iter_num"])
    elif args.torch_weights is not None:
        # PyTorch: model.load_state_dict(torch.load(path, map_location=device))
        load_torch_weights(model, tj.load(args.torch_weights, map_location=device))
    # PyTorch: model.to(device)
    tj.to_device(model, device)
    param_device = str(next(tj.parameters(model)).device)
    # PyTorch: model = DDP(model, device_ids=[local_rank])
    tj.to_device(model, replicated)  # DDP: one replica per device of every process
    # PyTorch: optimizer = model.configure_optimizers(...)
    optimizer = configure_optimizer(model, args)
    # Its state lives where the parameters are, as in torch (the step counters too).
    nnx.update(optimizer, tj.to_device(nnx.state(optimizer), replicated))
    if args.init_from == "resume":
        # PyTorch: optimizer.load_state_dict(checkpoint["optimizer"])  (onto the parameters'
        # devices): straight onto the mesh, each process reading what its devices hold.
        load_state_dict(optimizer, tj.load(optimizer_path, map_location=replicated))

    def batch(split: str, step: int, micro_step: int) -> dict[str, jax.Array]:
        x, y = get_batch(
            data_dir, split, step, micro_step, rank, world_size, args.batch_size, args.block_size
        )
        # PyTorch: x, y = x.to(device), y.to(device)  (each rank its own rows)
        return dist.make_global_batch({"x": x.astype(np.int32), "y": y.astype(np.int32)}, mesh)

    losses: list[float] = []
    tokens_seen = 0
    while iter_num < args.max_iters:
        micro_batches = [
            batch("train", iter_num, micro) for micro in range(args.gradient_accumulation_steps)
        ]
        loss = train_step(model, optimizer, micro_batches)
        losses.append(float(loss))  # the global batch's loss: the same on every rank
        tokens_seen += args.gradient_accumulation_steps * args.batch_size * args.block_size
        if master_process:
            print(f"iter {iter_num}: loss {losses[-1]:.4f}", flush=True)
        iter_num += 1

    # PyTorch: estimate_loss(); dist.all_reduce(loss, SUM); loss /= world_size
    val_loss = float(jnp.mean(jnp.stack([eval_loss(model, batch("val", k, 0))
                                         for k in range(args.eval_iters)])))  # fmt: skip
    if master_process:
        # PyTorch: torch.save({"model": raw_model.state_dict(), "optimizer": ...,
        #                      "iter_num": iter_num}, ckpt_path)
        metadata = {"iter_num": str(iter_num)}
        tj.save_file(tj.to_device(state_dict(model), "cpu"), model_path, metadata)
        tj.save_file(tj.to_device(state_dict(optimizer), "cpu"), optimizer_path)
    # PyTorch: dist.all_reduce(tokens, op=dist.ReduceOp.SUM)
    total_tokens = int(dist.all_reduce(tokens_seen, op=dist.ReduceOp.SUM)) if ddp else tokens_seen
    summary = {
        "rank": rank,
        "world_size": world_size,
        "devices": jax.device_count(),
        "losses": losses,
        "val_loss": val_loss,
        "tokens_seen": total_tokens,
        "iter_num": iter_num,
        "param_device": param_device,
    }
    print("summary: " + json.dumps(summary, sort_keys=True), flush=True)
    if ddp:
        # PyTorch: destroy_process_group()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
