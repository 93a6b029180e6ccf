"""``tj.optim``'s parameter groups without torch, side by side with torch's.

Where torch is installed its own optimizer lays out a group (the oracle); where it is
not, ``optimizer_groups.TORCH_DEFAULTS`` does. So the table cannot rot: for every
``tj.optim`` class and a grid of constructor keywords (the kernel choices and flags
among them, with and without parameter groups of their own keys), the groups read with
torch hidden are torch's own ``optimizer.param_groups[i]``, keys in order and values; a
torch that changes its layout fails here, naming the class and the keys. Then a process
in which torch cannot be imported reads a rate and writes the state dict's groups as the
torch path does, and what truly needs torch (the buffers, torch tensors) is refused with
the library's error naming the fix.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from flax import nnx

from tests.support.deadlines import deadline
from torch2jax_device import optim
from torch2jax_device._src.optimizer_groups import KINDS, TORCH_DEFAULTS

#: Each tj.optim class with the keywords it is made with: the defaults, every
#: hyperparameter, each flag and kernel choice (the combinations torch takes).
GRID: dict[str, list[dict[str, Any]]] = {
    "SGD": [
        {},
        {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-4},
        {"momentum": 0.9, "nesterov": True, "maximize": True},
        {"foreach": True, "differentiable": True},
        {"foreach": False},
        {"fused": True},
    ],
    "Adam": [
        {},
        {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1, "amsgrad": True},
        {"maximize": True, "foreach": True, "capturable": True},
        {"differentiable": True, "decoupled_weight_decay": True},
        {"fused": True, "capturable": True},
    ],
    "AdamW": [
        {},
        {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.0, "amsgrad": True},
        {"maximize": True, "foreach": False, "capturable": True},
        {"differentiable": True},
        {"fused": True},
    ],
    "RMSprop": [
        {},
        {"lr": 0.1, "alpha": 0.9, "eps": 1e-6, "weight_decay": 0.1, "momentum": 0.5},
        {"centered": True, "capturable": True, "foreach": True, "maximize": True},
        {"differentiable": True, "foreach": False},
    ],
}
#: Each group's own keys (torch's come first, in their order): a hyperparameter, a
#: flag, a key of the user's own, a scheduler's.
OWN_KEYS: tuple[dict[str, Any], ...] = (
    {"name": "decay", "weight_decay": 0.1, "maximize": True},
    {"initial_lr": 0.2},
)
CASES = [(kind, keywords) for kind, grid in GRID.items() for keywords in grid]


def _ids(case: tuple[str, dict[str, Any]]) -> str:
    kind, keywords = case
    return f"{kind}({', '.join(f'{key}={value}' for key, value in keywords.items())})"


def _made(kind: str, keywords: dict[str, Any], grouped: bool) -> tuple[Any, Any, Any]:
    """The tj.optim optimizer, its model, and torch's optimizer over the twin's parameters."""
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    twin = torch.nn.Linear(2, 3)
    if grouped:
        ours: Any = [
            {"params": [name], **own}
            for name, own in zip(["kernel", "bias"], OWN_KEYS, strict=True)
        ]
        theirs: Any = [
            {"params": [p], **own} for p, own in zip(twin.parameters(), OWN_KEYS, strict=True)
        ]
    else:
        ours, theirs = None, twin.parameters()
    optimizer = nnx.Optimizer(model, getattr(optim, kind)(ours, **keywords), wrt=nnx.Param)
    return optimizer, model, getattr(torch.optim, kind)(theirs, **keywords)


def _without_torch(monkeypatch: pytest.MonkeyPatch, read: Any) -> Any:
    with monkeypatch.context() as hidden:
        hidden.setitem(sys.modules, "torch", None)  # as if torch were not installed
        return read()


def test_the_table_is_the_installed_torchs_defaults() -> None:
    assert sorted(TORCH_DEFAULTS) == sorted(KINDS.values())
    for name, table in TORCH_DEFAULTS.items():
        defaults = getattr(torch.optim, name)([torch.zeros(1)]).defaults
        assert list(table) == list(defaults.items()), (
            f"torch {torch.__version__}'s {name} lays out its group as {list(defaults)}; "
            f"TORCH_DEFAULTS[{name!r}] holds {[key for key, _ in table]}: update the table"
        )


@pytest.mark.parametrize("grouped", [False, True], ids=["one-group", "own-keys"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_the_groups_without_torch_are_torchs(
    case: tuple[str, dict[str, Any]], grouped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, keywords = case
    optimizer, model, theirs = _made(kind, keywords, grouped)
    torch_path = [dict(group) for group in optim.param_groups(optimizer)]
    read = _without_torch(monkeypatch, lambda: [dict(g) for g in optim.param_groups(optimizer)])
    saved = _without_torch(monkeypatch, lambda: optim.state_dict(optimizer, model))
    for number, group in enumerate(theirs.param_groups):
        expected = [(key, value) for key, value in group.items() if key != "params"]
        for path, got in (("without torch", read[number]), ("with torch", torch_path[number])):
            assert list(got.items()) == expected, (
                f"tj.optim.{kind}({keywords}) group {number} {path}: keys {list(got)}, "
                f"torch's {[key for key, _ in expected]}"
            )
    assert saved["param_groups"] == theirs.state_dict()["param_groups"]
    assert [list(group) for group in saved["param_groups"]] == [
        list(group) for group in theirs.state_dict()["param_groups"]
    ]


#: Run where torch cannot be imported: the groups' reprs and the state dict's.
_SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # as if torch were not installed
    from flax import nnx
    import jax.numpy as jnp
    from torch2jax_device import MissingFrameworkError, optim
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    {made}
    print(repr(optim.param_groups(optimizer)[0]["lr"]))
    print(repr([dict(group) for group in optim.param_groups(optimizer)]))
    print(repr(optim.state_dict(optimizer, model)))
    optimizer.update(model, nnx.grad(lambda m: m(jnp.ones((1, 2))).sum())(model))
    try:
        optim.state_dict(optimizer, model)
    except MissingFrameworkError as error:
        print(repr(str(error)))
""")
MADE = {
    "SGD": "optim.SGD(lr=0.1, momentum=0.9, nesterov=True, foreach=True)",
    "Adam": "optim.Adam(lr=3e-4, betas=(0.8, 0.99), amsgrad=True, fused=True)",
    "AdamW": "optim.AdamW([{'params': ['kernel'], 'name': 'k'}, {'params': ['bias'], "
    "'weight_decay': 0.0}], lr=6e-4, capturable=True)",
    "RMSprop": "optim.RMSprop(lr=0.01, centered=True, momentum=0.5, differentiable=True)",
}


@pytest.mark.parametrize("kind", list(MADE))
def test_a_process_without_torch_reads_the_groups_the_torch_path_does(kind: str) -> None:
    made = f"optimizer = nnx.Optimizer(model, {MADE[kind]}, wrt=nnx.Param)"
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(made=made)],
        capture_output=True,
        text=True,
        timeout=deadline(120),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rate, groups, saved, refused = result.stdout.splitlines()
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, eval(MADE[kind], {"optim": optim}), wrt=nnx.Param)
    assert ast.literal_eval(rate) == optim.param_groups(optimizer)[0]["lr"]
    assert groups == repr([dict(group) for group in optim.param_groups(optimizer)])
    assert saved == repr(optim.state_dict(optimizer, model))
    message = ast.literal_eval(refused)
    assert "tj.optim.state_dict's buffers" in message and "pip install torch" in message
