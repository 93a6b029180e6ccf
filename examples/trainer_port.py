"""examples/trainer_torch.py ported to Flax NNX: the same trainer, checkpoints both ways.

The model, optimizer (SGD with momentum and weight decay), scheduler (StepLR),
checkpoints and ``--resume`` port line by line: ``tj.optim`` keeps torch's update rule
and state dict format, so a checkpoint the torch original wrote resumes here and one
written here resumes the torch original. Under a launcher it is a DDP trainer: the
model replicated over every process's devices, each process loading its rows of every
batch, rank 0 saving.

    python examples/trainer_port.py --epochs 4 --init runs/torch-init.pt
    python examples/trainer_port.py --epochs 4 --resume runs/torch/checkpoint-2.pt
    torch2jax-device run --nproc-per-node 2 examples/trainer_port.py --epochs 4 ...
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec
from trainer_torch import BATCH, CLASSES, SAMPLES, dataset, epoch_order

import torch2jax_device as tj
from torch2jax_device import distributed as dist
from torch2jax_device import optim


class Net(nnx.Module):
    """trainer_torch.Net: the same names, so its state dict loads here and back."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(1, 8, (3, 3), padding=1, rngs=rngs)
        # torch's BatchNorm2d(8): momentum 0.1 there is 0.9 here; the same epsilon.
        self.bn = nnx.BatchNorm(8, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.fc = nnx.Linear(8, CLASSES, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.transpose(x, (0, 2, 3, 1))  # torch's NCHW batches, Flax's NHWC layers
        x = jax.nn.relu(self.bn(self.conv(x)))
        return self.fc(x.mean(axis=(1, 2)))


@nnx.jit
def train_step(model: Net, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(model: Net) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)  # optimizer.step()
    return loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--resume", default="")
    parser.add_argument("--init", default="", help="initial weights: a torch state dict")
    parser.add_argument("--out-dir", default="runs/port")
    args = parser.parse_args()

    launched = "RANK" in os.environ
    if launched:
        dist.init_process_group(backend="gloo")  # before anything starts JAX
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if launched else (0, 1)
    kind = "cuda" if tj.cuda.is_available() else "cpu"
    mesh = dist.init_device_mesh(kind, (jax.device_count(),), mesh_dim_names=("data",))

    model = Net(nnx.Rngs(0))
    if args.init:
        tj.load_state(model, args.init)  # model.load_state_dict(torch.load(args.init))
    tj.to_device(model, NamedSharding(mesh, PartitionSpec()))  # DDP(model)
    # torch.optim.SGD(model.parameters(), lr, momentum=0.9, weight_decay=1e-4):
    tx = optim.SGD(lr=args.lr, momentum=0.9, weight_decay=1e-4)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    start_epoch = 0
    if args.resume:
        checkpoint = tj.load(args.resume, map_location="cpu")  # every rank, whole
        start_epoch = int(checkpoint["epoch"])
        tj.load_state(model, checkpoint["model"])
        optim.load_state_dict(optimizer, model, checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])

    images, labels = dataset()
    labels = labels.astype(np.int32)
    batches = NamedSharding(mesh, PartitionSpec("data"))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    losses, rates = [], []
    for epoch in range(start_epoch, args.epochs):
        rates.append(scheduler.get_last_lr()[0])
        order = epoch_order(epoch)
        # DistributedSampler's split of each batch: this rank's rows of it.
        mine = [
            order[start : start + BATCH][rank::world_size] for start in range(0, SAMPLES, BATCH)
        ]
        for x, y in tj.DeviceLoader([(images[rows], labels[rows]) for rows in mine], batches):
            loss = train_step(model, optimizer, x, y)
            losses.append(float(loss.addressable_data(0)))  # loss.item()
        scheduler.step()
        state = {
            "model": tj.state_dict(model, layout="torch"),  # model.state_dict()
            "optimizer": optim.state_dict(optimizer, model),  # optimizer.state_dict()
            "scheduler": scheduler.state_dict(),
            "epoch": epoch + 1,
        }
        if rank == 0:
            torch.save(state, out / f"checkpoint-{epoch + 1}.pt")
        if launched:
            dist.barrier()
    summary = {"rank": rank, "world_size": world_size, "devices": jax.device_count(),
               "losses": losses, "lrs": rates}  # fmt: skip
    print("summary: " + json.dumps(summary), flush=True)
    if launched:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
