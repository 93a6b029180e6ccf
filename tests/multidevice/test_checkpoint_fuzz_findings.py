"""What the checkpoint fuzzer found with several CPU devices, one draw each, kept.

The draws of ``tests/parity/test_checkpoint_fuzz_findings.py`` that need a second
device (``"cpu:1"``, ``device_map=``), judged by the same oracle
(``tests/support/checkpoint_fuzz_oracle.py``); each failed before its fix. The slow
test of ``tests/parity/test_checkpoint_fuzz.py`` draws them in a two-device process.
"""

from __future__ import annotations

import pytest

from tests.support.checkpoint_fuzz import Draw, Entry
from tests.support.checkpoint_fuzz_oracle import judge
from tests.support.gpu_proxy import jax_default_is_torch_cpu

pytestmark = pytest.mark.skipif(
    not jax_default_is_torch_cpu(),
    reason="the fuzzer's oracle is torch's CPU; JAX's default device is another here",
)

FOUND = {
    # a legacy-format checkpoint gives a view of an empty storage a fresh storage that
    # map_location never saw: tj.load placed it on cpu:0, ignoring map_location='cpu:1'
    "legacy-empty-view-map-location": Draw(
        writer="torch.save-legacy",
        entries=(
            Entry(name="h.1.attn.bias", dtype="int16", shape=(0,)),
            Entry(name="a", dtype="float32", shape=(1,)),
            Entry(name="tokens", dtype="int16", shape=(0,), view="view", of="h.1.attn.bias"),
        ),
        reader="load",
        container="parameters",
        device="'cpu:1'",
        weights_only=True,
    ),
}


@pytest.mark.parametrize("name", FOUND)
def test_a_draw_the_fuzzer_found_agrees(name: str) -> None:
    assert judge(FOUND[name]) == []
