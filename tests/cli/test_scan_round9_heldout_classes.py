"""``scan`` by class on round nine's held-out sets G and H (label9g, label9h: Chronos,
stable-dreamfusion, MiniCPM-V, MONAI, Open-Sora-Plan, PatchTST, Tacotron 2,
Time-Series-Library; AutoAWQ, AutoGPTQ, ColossalAI, gemma_pytorch, GPTQ, lighteval,
lingua, llm-awq, Optimum, SmoothQuant, TransformerEngine, trlx), measured blind at round
nine's end and then fixed against as the next round's development set: each class's
spellings, crossed with the places a script writes them, and its twin without device
meaning that stays silent.

The library classes: Accelerate's big-model hooks (``cpu_offload_with_hook``,
``AlignDevicesHook``, ``get_balanced_memory``, ``load_checkpoint_in_model``).

Each line that a class covers is marked in its snippet with ``# -> rule``, each twin with
``# silent`` (``tests/cli/test_scan_round7b_classes.py``'s marks).
"""

from __future__ import annotations

import itertools
import re

import pytest

from tests.cli.test_scan_round7b_classes import advice_only, check


def _marked(source: str) -> None:
    check(source)
    advice_only(source)


def _silenced(source: str) -> str:
    """``source`` with every mark made ``# silent``."""
    return re.sub(r"#\s*->\s*[\w-]+\s*$", "# silent", source, flags=re.MULTILINE)


# -- Accelerate's big-model hooks -----------------------------------------------------------------
# name -> (the modules that export it, its row, a call of it)
_BIG_MODEL = {
    "cpu_offload_with_hook": (
        ("accelerate", "accelerate.hooks"),
        "library-to-device",
        "_, hook = {f}(module, execution_device=0, prev_module_hook=hook){mark}",
    ),
    "AlignDevicesHook": (
        ("accelerate.hooks",),
        "library-to-device",
        "hook = {f}(d, io_same_device=True, place_submodules=True){mark}",
    ),
    "get_balanced_memory": (
        ("accelerate.utils", "accelerate.utils.modeling"),
        "library-device",
        "max_memory = {f}({mark}\n        model, dtype=torch.float16, low_zero=False\n    )",
    ),
    "load_checkpoint_in_model": (
        ("accelerate", "accelerate.utils", "accelerate.utils.modeling"),
        "library-checkpoint",
        "{f}({mark}\n        model, checkpoint=path, offload_state_dict=True\n    )",
    ),
}
_SPELLINGS = ("from-import", "module attribute")


@pytest.mark.parametrize(
    ("name", "module", "spelling"),
    [
        (name, module, spelling)
        for name, (modules, _, _) in _BIG_MODEL.items()
        for module, spelling in itertools.product(modules, _SPELLINGS)
    ],
)
def test_accelerates_big_model_hooks_are_their_rows(name: str, module: str, spelling: str) -> None:
    _, rule, call = _BIG_MODEL[name]
    if spelling == "from-import":
        imported, func = f"from {module} import {name}\n", name
    else:
        imported, func = f"import {module}\n", f"{module}.{name}"
    source = (
        f"import torch\n{imported}"
        "def place(model, module, d, path, device_map, hook=None):\n"
        f"    {call.format(f=func, mark=f'  # -> {rule}')}\n"
    )
    _marked(source)
    # a project's own function of the same name
    twin = f"import torch\ndef {name}(*args, **kwargs):\n    return None\n" + source.split(
        imported, 1
    )[1].replace(func, name)
    check(_silenced(twin))
