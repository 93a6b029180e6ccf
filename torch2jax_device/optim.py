"""`torch.optim` for JAX: torch's optimizers and schedulers, and their checkpoints.

A PyTorch training loop's optimizer, scheduler and their ``state_dict()`` port line
by line onto optax and ``nnx.Optimizer``, and a checkpoint written by either side
resumes on the other:

```python
from torch2jax_device import optim

optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1, momentum=0.9, weight_decay=1e-4),
                          wrt=nnx.Param)       # torch.optim.SGD(model.parameters(), ...)
scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)
...
scheduler.step()                                               # once per epoch, as torch
torch.save({"model": tj.state_dict(model, layout="torch"),
            "optimizer": optim.state_dict(optimizer, model),   # optimizer.state_dict()
            "scheduler": scheduler.state_dict(), "epoch": epoch}, path)
checkpoint = tj.load(path)
tj.load_state(model, checkpoint["model"])
optim.load_state_dict(optimizer, model, checkpoint["optimizer"])  # by parameter index
scheduler.load_state_dict(checkpoint["scheduler"])
```

The optimizers are optax transformations with torch's update rules; the model's
twin order ([`tj.parameters`][torch2jax_device.parameters]) is the parameter index
torch keys optimizer state by. Torch's parameter groups are their one positional
argument (``optim.AdamW([{"params": lambda path, p: p.ndim >= 2, "weight_decay":
0.1}, {"params": lambda path, p: p.ndim < 2, "weight_decay": 0.0}], lr=6e-4)``), and
``optim.param_groups(optimizer)`` is ``optimizer.param_groups``. The
[optimizers guide](how-to/optimizers.md) has the whole loop and what differs.
"""

from __future__ import annotations

from typing import NoReturn

from ._src import lr_scheduler as lr_scheduler
from ._src.optimizer_groups import hyperparameter as hyperparameter
from ._src.optimizer_state import load_state_dict as load_state_dict
from ._src.optimizer_state import state_dict as state_dict
from ._src.optimizers import SGD as SGD
from ._src.optimizers import Adam as Adam
from ._src.optimizers import AdamState as AdamState
from ._src.optimizers import AdamW as AdamW
from ._src.optimizers import RMSprop as RMSprop
from ._src.optimizers import RMSpropState as RMSpropState
from ._src.optimizers import SGDState as SGDState
from ._src.param_group_view import ParamGroup as ParamGroup
from ._src.param_group_view import param_groups as param_groups

#: torch.optim's optimizers that have no port here (their state dicts would not cross).
_UNPORTED = frozenset({
    "ASGD", "Adadelta", "Adafactor", "Adagrad", "Adamax", "LBFGS", "Muon", "NAdam", "RAdam",
    "Rprop", "SparseAdam",
})  # fmt: skip


def __getattr__(name: str) -> NoReturn:
    """``tj.optim.Adagrad`` and the other optimizers of ``torch.optim`` not ported here:
    the library's error naming what is, and what to use instead."""
    from ._src.errors import NoSuchAttributeError

    if name not in _UNPORTED:
        raise NoSuchAttributeError.unmapped("optim", name)
    raise NoSuchAttributeError(
        f"tj.optim has no {name!r} (torch.optim.{name}): tj.optim ports SGD, Adam, AdamW "
        f"and RMSprop, whose state dicts cross to torch's. Fix: use optax's counterpart "
        f"(optax.{name.lower()}, where optax has it) in nnx.Optimizer, whose state does "
        "not convert to torch's optimizer.state_dict(), or keep this optimizer torch's"
    )


__all__ = [
    "SGD",
    "Adam",
    "AdamState",
    "AdamW",
    "ParamGroup",
    "RMSprop",
    "RMSpropState",
    "SGDState",
    "hyperparameter",
    "load_state_dict",
    "lr_scheduler",
    "param_groups",
    "state_dict",
]
