"""examples/gpt_ddp_port.py trains like the PyTorch original it ports, across 2 x 2 devices.

Four runs share one toy configuration (with gradient accumulation):

* the PyTorch original under torchrun, 2 processes (gloo), saving its initial weights;
* the port in one process on one device with the whole global batch, starting from
  the original's ``torch.save`` file;
* the port under ``torch2jax-device run``, 2 processes x 2 simulated CPU devices,
  starting from the same weights (as safetensors), 4 iterations, rank 0 saving a
  checkpoint;
* the port resumed from that checkpoint to iteration 6 (same 2 x 2 job).

The PyTorch run is the oracle: every loss the port prints must match it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from tests.support.deadlines import deadline
from tests.support.distributed.launch import TORCHRUN, launch, results, run_bounded, worker_env
from tests.support.examples import EXAMPLES, ExampleRunner, example_environment

ORIGINAL, PORT = EXAMPLES / "gpt_ddp_torch.py", EXAMPLES / "gpt_ddp_port.py"
EXIT_AFTER_SCRIPT = Path(__file__).parents[1] / "support" / "distributed" / "exit_after_script.py"
BATCH_PER_PROCESS = 2
CONFIG = (
    "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "8",
    "--gradient-accumulation-steps", "2", "--eval-iters", "1",
)  # fmt: skip
ITERS, SAVED_AT = 6, 4


def _summaries(output: str, processes: int) -> list[dict[str, Any]]:
    found = results(output, "summary: ")
    assert [summary["rank"] for summary in found] == list(range(processes)), output[-3000:]
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, examples: ExampleRunner) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("gpt")
    status, out, err = run_bounded(
        # torch's gloo threads can abort a finished DDP script at interpreter exit
        # (tests/support/distributed/exit_after_script.py says why): exit right after it.
        [str(TORCHRUN), "--nproc_per_node=2", str(EXIT_AFTER_SCRIPT), str(ORIGINAL),
         "--out-dir", str(root / "torch"),
         "--save-init", str(root / "init.pt"), "--max-iters", str(ITERS),
         "--batch-size", str(BATCH_PER_PROCESS), *CONFIG],
        env=worker_env(OMP_NUM_THREADS="1"), timeout=deadline(240),
    )  # fmt: skip
    assert status == 0, err[-3000:]
    torch_job = _summaries(out, 2)
    # The one-process run reads the original's torch.save file; the 2 x 2 job the same
    # tensors as safetensors, which its 4 processes read without importing torch.
    initial = {name: tensor.numpy() for name, tensor in torch.load(root / "init.pt").items()}
    save_file(initial, root / "init.safetensors")

    # One process, one CPU device (forked from the examples' server, which imported
    # torch, JAX and flax once), beside the torch job's output.
    single = examples.start(
        PORT.name, "--out-dir", str(root / "single"), "--torch-weights", str(root / "init.pt"),
        "--max-iters", str(ITERS), "--batch-size", str(2 * BATCH_PER_PROCESS), *CONFIG,
    )  # fmt: skip

    # The 2 x 2 jobs share a compilation cache: the resumed job's rank 0 reads every
    # program the first job's rank 0 compiled. Only JAX's process 0 writes it, and a
    # program's key hashes the devices as the compiling process sees them, so rank 1
    # compiles again and the one-process run (one device) would only write unread entries.
    cache = {"JAX_COMPILATION_CACHE_DIR": str(root / "jax-cache"),
             "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}  # fmt: skip
    ddp_dir = root / "ddp"
    common = ("--nproc-per-node", "2", "--cpu-devices", "2", str(PORT), "--out-dir", str(ddp_dir))
    with example_environment(**cache):
        status, out, err = launch(
            *common, "--torch-weights", str(root / "init.safetensors"),
            "--max-iters", str(SAVED_AT),
            "--batch-size", str(BATCH_PER_PROCESS), *CONFIG, limit_s=240,
        )  # fmt: skip
        assert status == 0, err[-3000:]
        ddp_job = _summaries(out, 2)
        saved = sorted(path.name for path in ddp_dir.glob("*.safetensors"))
        status, out, err = launch(
            *common, "--init-from", "resume", "--max-iters", str(ITERS),
            "--batch-size", str(BATCH_PER_PROCESS), *CONFIG, limit_s=240,
        )  # fmt: skip
        assert status == 0, err[-3000:]
        resumed_job = _summaries(out, 2)
    return {
        "torch": torch_job,
        "ddp": ddp_job,
        "saved": saved,
        "resumed": resumed_job,
        "single": _summaries(single.output(limit_s=240), 1),
        "ddp_dir": ddp_dir,
    }


@pytest.mark.idiom("dist-ddp-port")
def test_port_matches_the_pytorch_original_loss_for_loss(runs: dict[str, Any]) -> None:
    torch_losses = runs["torch"][0]["losses"]
    assert len(torch_losses) == ITERS and torch_losses[-1] < torch_losses[0]
    for summary in runs["ddp"]:
        assert (summary["world_size"], summary["devices"]) == (2, 4)
        np.testing.assert_allclose(summary["losses"], torch_losses[:SAVED_AT], rtol=2e-5)
        assert summary["tokens_seen"] == runs["torch"][0]["tokens_seen"] * SAVED_AT // ITERS
    for summary in runs["resumed"]:
        np.testing.assert_allclose(summary["losses"], torch_losses[SAVED_AT:], rtol=2e-5)
        np.testing.assert_allclose(summary["val_loss"], runs["torch"][0]["val_loss"], rtol=2e-5)


def test_two_processes_give_the_single_process_loss_on_the_same_global_batch(
    runs: dict[str, Any],
) -> None:
    (single,) = runs["single"]
    assert (single["world_size"], single["devices"]) == (1, 1)
    for summary in runs["ddp"]:
        np.testing.assert_allclose(summary["losses"], single["losses"][:SAVED_AT], rtol=1e-5)
    for summary in runs["resumed"]:
        np.testing.assert_allclose(summary["losses"], single["losses"][SAVED_AT:], rtol=1e-5)
        np.testing.assert_allclose(summary["val_loss"], single["val_loss"], rtol=1e-5)


@pytest.mark.idiom("dist-gather-to-host")
@pytest.mark.idiom("dist-resume-onto-mesh")
def test_rank_0_saves_a_checkpoint_the_resumed_job_continues_from(runs: dict[str, Any]) -> None:
    from safetensors.numpy import load_file

    import torch2jax_device as tj

    assert runs["saved"] == ["model.safetensors", "optimizer.safetensors"]
    with tj.safe_open(runs["ddp_dir"] / "model.safetensors") as checkpoint:
        assert checkpoint.metadata() == {"iter_num": str(ITERS)}  # the resumed run's save
    weights = load_file(runs["ddp_dir"] / "model.safetensors")
    assert weights["transformer.wte.embedding"].shape == (64, 16)
    assert [summary["iter_num"] for summary in runs["resumed"]] == [ITERS, ITERS]


def test_model_to_device_then_ddp_reports_each_process_device(runs: dict[str, Any]) -> None:
    # next(tj.parameters(model)).device after tj.to_device(model, device), before the mesh.
    devices = [summary["param_device"] for summary in runs["ddp"]]
    assert devices[0] == "cpu:0"
    assert devices[1].startswith("cpu:")  # rank 1's first CPU device


def test_the_port_has_no_raw_jax_placement(runs: dict[str, Any]) -> None:
    source = Path(PORT).read_text()
    assert "jax.device_put" not in source and "np.asarray" not in source
    assert "tj.to_device(model, replicated)" in source
