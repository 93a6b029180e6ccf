"""``torch2jax-device scan``: every idiom by rule id and line, the diff, exit statuses."""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path

import pytest

from torch2jax_device.cli import main
from torch2jax_device.porting import catalog
from torch2jax_device.porting import scanner as _scanner

FIXTURE = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "train_torch.py"

EXPECTED = {
    (10, "device-select"), (10, "cuda-is-available"), (11, "device-indexed"),
    (12, "device-type-index"), (13, "device-accelerator-index"), (14, "cuda-device-count"),
    (15, "cuda-set-device"), (16, "cuda-device-name"), (17, "cuda-device-capability"),
    (18, "mps-is-available"), (19, "accelerator-current"), (20, "default-device-set"),
    (22, "tensor-to-device"), (23, "from-numpy"), (24, "tensor-non-blocking"),
    (25, "tensor-to-dtype"), (26, "tensor-to-device-dtype"), (27, "tensor-to-copy"),
    (28, "tensor-cuda"), (29, "tensor-cpu"), (30, "tensor-cpu"),
    (31, "default-device-context"), (33, "parameters-device"), (34, "cuda-memory-allocated"),
    (34, "cuda-max-memory-allocated"), (35, "cuda-empty-cache"), (36, "cuda-reset-peak"),
    (37, "cuda-synchronize"), (38, "device-indexed"), (39, "autocast"), (41, "device-indexed"),
    (45, "torch-load-map-location"), (46, "torch-load-map-location-dict"),
    (47, "torch-load-map-location-callable"), (48, "torch-load"), (49, "load-safetensors"),
    (50, "safe-open-slice"), (52, "save-safetensors"), (57, "dist-local-rank"),
    (58, "dist-local-rank"), (59, "dist-init-process-group"), (60, "dist-sampler-global-batch"),
    (61, "dataloader-pin-memory"), (62, "dataloader-pin-memory"), (63, "tensor-pin-memory"),
    (64, "dist-ddp-gradient"), (65, "dist-all-reduce"), (66, "dist-barrier"), (67, "dist-destroy"),
}  # fmt: skip


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        status = main(list(argv))
    finally:
        sys.stdout, sys.stderr = streams
    return status, out.getvalue(), err.getvalue()


def test_every_idiom_is_found_by_rule_and_line() -> None:
    found = {(f.line, f.rule) for f in _scanner.scan_source(FIXTURE.read_text(), str(FIXTURE))}
    assert found == EXPECTED


def test_every_rule_is_a_catalog_row() -> None:
    assert _scanner.RULES <= {idiom.id for idiom in catalog.CATALOG}
    assert {rule for _, rule in EXPECTED} <= _scanner.RULES


def test_aliased_imports_are_followed() -> None:
    source = (
        "import torch as T\nfrom torch.cuda import is_available\nd = T.device(0)\nis_available()\n"
    )
    assert [(f.line, f.rule) for f in _scanner.scan_source(source)] == [
        (3, "device-accelerator-index"),
        (4, "cuda-is-available"),
    ]


def test_names_that_are_not_torch_are_left_alone() -> None:
    source = "import mylib as torch2\ndevice = torch2.device('cuda')\ncuda = object()\n"
    assert _scanner.scan_source(source) == []


def test_text_report_is_linter_shaped() -> None:
    status, out, _ = _run("scan", str(FIXTURE))
    assert status == 1
    assert f"{FIXTURE}:10:10: device-select torch.device(" in out
    assert 'torch2jax_device: tj.device("cuda" if torch.cuda.is_available() else "cpu")' in out
    assert "guide:            docs/migration-guide.md#device-select" in out
    assert "(not rewritten by --diff)" in out  # x.cpu().numpy()
    assert out.rstrip().endswith(f"{len(EXPECTED)} idiom(s) found, 36 rewritable with --diff")


def test_json_report() -> None:
    status, out, _ = _run("scan", "--format", "json", str(FIXTURE))
    findings = json.loads(out)
    assert status == 1 and len(findings) == len(EXPECTED)
    first = findings[0]
    assert first["rule"] == "device-select" and first["line"] == 10 and first["column"] == 10
    assert first["jax"] == catalog.get("device-select").jax
    assert first["guide"] == "docs/migration-guide.md#device-select" and first["fixable"]


def test_diff_rewrites_the_safe_idioms_and_keeps_the_rest() -> None:
    source = FIXTURE.read_text()
    rewritten = _scanner.apply_edits(source, _scanner.scan_source(source))
    ast.parse(rewritten)
    lines = rewritten.splitlines()
    assert "import torch2jax_device as tj" in lines
    assert 'device = tj.device("cuda" if tj.cuda.is_available() else "cpu")  # line 10' in lines
    assert "model = tj.to_device(model, device)  # line 22" in lines
    assert "x = tj.to_device(x, device, non_blocking=True)" in lines
    assert 'g = tj.to_device(x, "cuda")' in lines
    assert "print(next(tj.parameters(model)).device)" in lines
    assert "a = x.cpu().numpy()  # line 30" in lines  # not safe: jax arrays have no .numpy()
    assert "torch.cuda.reset_peak_memory_stats()" in lines  # JAX cannot: finding only
    assert 'state = tj.load("ckpt.pt", map_location="cpu")  # line 45' in lines
    assert 'state = torch.load("ckpt.pt", weights_only=False)' in lines  # tj.load: weights only
    assert 'tensors = tj.load_file("model.safetensors", device="cpu")' in lines
    assert 'tj.distributed.init_process_group(backend="nccl")' in lines
    assert "pinned = tj.pin_memory(x)  # line 63" in lines
    assert _scanner.scan_source(rewritten) == [
        f for f in _scanner.scan_source(rewritten) if not f.fixable
    ]


def test_diff_output_is_a_unified_diff() -> None:
    status, out, _ = _run("scan", "--diff", str(FIXTURE))
    assert status == 0
    assert out.startswith(f"--- a/{FIXTURE}\n+++ b/{FIXTURE}\n")
    assert "+import torch2jax_device as tj\n" in out
    assert "\n-model = model.to(device)  # line 22\n" in out
    assert "\n+model = tj.to_device(model, device)  # line 22\n" in out


def test_clean_file_and_broken_file(tmp_path: Path) -> None:
    clean = tmp_path / "clean.py"
    clean.write_text("import jax\nx = jax.numpy.zeros(3)\n")
    assert _run("scan", str(clean))[0] == 0
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    status, _, err = _run("scan", str(tmp_path))
    assert status == 2 and f"cannot scan {broken}" in err


@pytest.mark.parametrize("snippet", ["x.to()", "x.cuda(device)", "x.cpu(1)"])
def test_unusual_calls_are_not_rewritten(snippet: str) -> None:
    findings = _scanner.scan_source(f"import torch\n{snippet}\n")
    assert all(not f.fixable for f in findings)
