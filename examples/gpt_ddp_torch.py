"""A nanoGPT-shaped PyTorch DDP trainer: the original that ``gpt_ddp_port.py`` ports to JAX.

The shape of Karpathy's nanoGPT ``train.py`` at toy size: a GPT (token and position
embeddings, causal self-attention, MLP, tied output head), AdamW with weight decay on
the matrices only, gradient accumulation, DDP under torchrun, an evaluation averaged
over the ranks, and a checkpoint rank 0 saves and a later run resumes from.

Run it (2 CPU processes take a few seconds)::

    torchrun --nproc_per_node=2 examples/gpt_ddp_torch.py --out-dir /tmp/gpt-torch
    python examples/gpt_ddp_torch.py --out-dir /tmp/gpt-torch    # one process, no DDP

``--save-init PATH`` writes the freshly initialized ``state_dict`` before training,
so the port can start from exactly these weights.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from gpt_data import VOCAB_SIZE, get_batch, prepare
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


class CausalSelfAttention(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.c_attn = nn.Linear(args.n_embd, 3 * args.n_embd)
        self.c_proj = nn.Linear(args.n_embd, args.n_embd)
        self.n_head = args.n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.c_fc = nn.Linear(args.n_embd, 4 * args.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * args.n_embd, args.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(args.n_embd)
        self.attn = CausalSelfAttention(args)
        self.ln_2 = nn.LayerNorm(args.n_embd)
        self.mlp = MLP(args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(VOCAB_SIZE, args.n_embd),
                "wpe": nn.Embedding(args.block_size, args.n_embd),
                "h": nn.ModuleList([Block(args) for _ in range(args.n_layer)]),
                "ln_f": nn.LayerNorm(args.n_embd),
            }
        )
        self.lm_head = nn.Linear(args.n_embd, VOCAB_SIZE, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * args.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(positions)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, args: argparse.Namespace) -> torch.optim.AdamW:
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.95), eps=1e-8)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--init-from", choices=("scratch", "resume"), default="scratch")
    parser.add_argument("--save-init", type=Path, help="save the initial state_dict here")
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
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
    else:
        rank, world_size, local_rank = 0, 1, 0
        device = "cuda" if torch.cuda.is_available() else "cpu"
    master_process = rank == 0
    if master_process:
        prepare(data_dir)
    if ddp:
        torch.distributed.barrier()  # the data exists before anyone reads it
    torch.manual_seed(args.seed)

    iter_num = 0
    model = GPT(args)
    ckpt_path = args.out_dir / "ckpt.pt"
    if args.init_from == "resume":
        checkpoint = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(checkpoint["model"])
        iter_num = checkpoint["iter_num"]
    elif args.save_init is not None and master_process:
        torch.save(model.state_dict(), args.save_init)
    model.to(device)
    optimizer = model.configure_optimizers(args)
    if args.init_from == "resume":
        optimizer.load_state_dict(checkpoint["optimizer"])
    if ddp:
        model = DDP(model, device_ids=[local_rank] if device.startswith("cuda") else None)
    raw_model = model.module if ddp else model

    def batch(split: str, step: int, micro_step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = get_batch(
            data_dir, split, step, micro_step, rank, world_size, args.batch_size, args.block_size
        )
        return (
            torch.from_numpy(x.astype(np.int64)).to(device),
            torch.from_numpy(y.astype(np.int64)).to(device),
        )

    @torch.no_grad()
    def estimate_loss() -> float:
        model.eval()
        losses = torch.stack([raw_model(*batch("val", k, 0)) for k in range(args.eval_iters)])
        model.train()
        mean = losses.mean()
        if ddp:  # gloo has no ReduceOp.AVG: sum, then divide
            torch.distributed.all_reduce(mean, op=torch.distributed.ReduceOp.SUM)
            mean /= world_size
        return float(mean)

    losses: list[float] = []
    tokens_seen = 0
    while iter_num < args.max_iters:
        micro_losses = []
        for micro_step in range(args.gradient_accumulation_steps):
            if ddp:  # sync the gradients only at the last micro step
                model.require_backward_grad_sync = (
                    micro_step == args.gradient_accumulation_steps - 1
                )
            x, y = batch("train", iter_num, micro_step)
            loss = model(x, y) / args.gradient_accumulation_steps
            loss.backward()
            micro_losses.append(loss.item() * args.gradient_accumulation_steps)
            tokens_seen += x.numel()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # The step's loss averaged over the ranks, as the port's global batch gives it.
        step_loss = torch.tensor(float(np.mean(micro_losses)))
        if ddp:
            torch.distributed.all_reduce(step_loss, op=torch.distributed.ReduceOp.SUM)
            step_loss /= world_size
        losses.append(float(step_loss))
        if master_process:
            print(f"iter {iter_num}: loss {losses[-1]:.4f}", flush=True)
        iter_num += 1

    val_loss = estimate_loss()
    if master_process:
        checkpoint = {
            "model": raw_model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "iter_num": iter_num,
            "config": {k: v for k, v in vars(args).items() if isinstance(v, (int, float))},
        }
        torch.save(checkpoint, ckpt_path)
    total_tokens = torch.tensor(tokens_seen)
    if ddp:
        torch.distributed.all_reduce(total_tokens, op=torch.distributed.ReduceOp.SUM)
    summary: dict[str, Any] = {
        "rank": rank,
        "world_size": world_size,
        "losses": losses,
        "val_loss": val_loss,
        "tokens_seen": int(total_tokens),
        "iter_num": iter_num,
    }
    print("summary: " + json.dumps(summary, sort_keys=True), flush=True)
    if ddp:
        destroy_process_group()


if __name__ == "__main__":
    main()
