"""The checkpoint fuzzer in a process of its own (``python -m`` this module, N, SEED).

Started by ``tests/parity/test_checkpoint_fuzz.py`` with two CPU devices, so draws
place tensors on ``"cpu:1"`` and by ``device_map=``. Each example's draw is printed
(flushed) before it runs: a load that kills the process (a signal, not an exception)
leaves its draw as the last line. Ends with ``N examples, K differences`` and exits 1
when there are differences, each printed as a one-line reproduction above it.
"""

from __future__ import annotations

import gc
import random
import sys
from typing import Any

import jax

from tests.support import checkpoint_fuzz, fuzz_runs
from tests.support.checkpoint_fuzz_oracle import Finding, Tally, judge


def main(examples: int, seed: int) -> int:
    devices = len(jax.devices("cpu"))
    gc.freeze()  # the imports' objects: the oracle collects after each failed load

    def draw(rng: random.Random) -> checkpoint_fuzz.Draw:
        drawn = checkpoint_fuzz.draw(rng, devices=devices)
        print(f"running {drawn.expression()}", flush=True)
        return drawn

    def judged(drawn: Any, tally: Tally) -> list[Finding]:
        return judge(drawn, tally)

    tally = Tally()
    found = fuzz_runs.run(examples, seed, draw, judged, tally)
    for line in fuzz_runs.listed(found, lambda finding: finding):  # unshrunk: the run's own
        print(line)
    print(f"{tally.examples} examples, {sum(map(len, found.values()))} differences", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
