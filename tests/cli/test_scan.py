"""``torch2jax-device scan``: every idiom by rule id and line, the reports, exit statuses."""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import found_rules, port_text, run_cli, scan_text
from tests.support.deadlines import deadline
from torch2jax_device.cli import main
from torch2jax_device.porting import catalog
from torch2jax_device.porting import scanner as _scanner

FIXTURE = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "train_torch.py"

EXPECTED = {
    (10, "device-select"), (10, "cuda-is-available"), (11, "device-indexed"),
    (12, "device-type-index"), (13, "device-accelerator-index"), (14, "cuda-device-count"),
    (15, "cuda-set-device"), (16, "cuda-device-name"), (17, "cuda-device-capability"),
    (18, "mps-is-available"), (19, "accelerator-current"), (20, "default-device-set"),
    (22, "module-to"), (23, "from-numpy"), (24, "tensor-non-blocking"),
    (25, "tensor-to-dtype"), (26, "tensor-to-device-dtype"), (27, "tensor-to-copy"),
    (28, "tensor-cuda"), (29, "tensor-cpu"), (30, "tensor-cpu"),
    (31, "default-device-context"), (33, "parameters-device"), (34, "cuda-memory-allocated"),
    (34, "cuda-max-memory-allocated"), (35, "cuda-empty-cache"), (36, "cuda-reset-peak"),
    (37, "cuda-synchronize"), (38, "device-indexed"), (39, "autocast"), (41, "device-indexed"),
    (45, "torch-load-map-location"), (46, "torch-load-map-location-dict"),
    (47, "torch-load-map-location-callable"), (48, "torch-load"), (49, "load-safetensors"),
    (50, "safe-open-slice"), (52, "save-safetensors"), (57, "dist-local-rank"),
    (58, "dist-env"), (59, "dist-init-process-group"), (60, "dist-sampler-global-batch"),
    (61, "dataloader-pin-memory"), (62, "dataloader-pin-memory"), (63, "tensor-pin-memory"),
    (64, "dist-ddp-gradient"), (65, "dist-all-reduce"), (66, "dist-barrier"), (67, "dist-destroy"),
}  # fmt: skip
# Every call before init_process_group (line 59) whose port starts JAX.
STARTS_JAX = {10, 13, 14, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 33,
              34, 35, 36, 37, 45, 46, 47, 48, 49}  # fmt: skip


# -- what is found ------------------------------------------------------------------------
def test_every_idiom_is_found_by_rule_and_line() -> None:
    found = _scanner.scan_source(FIXTURE.read_text(), str(FIXTURE))
    assert {(f.line, f.rule) for f in found if f.rule != "startup-order"} == EXPECTED
    assert {f.line for f in found if f.rule == "startup-order"} == STARTS_JAX


def test_every_rule_is_a_catalog_row() -> None:
    assert {idiom.id for idiom in catalog.CATALOG if idiom.rewrite} == _scanner.RULES
    assert {rule for _, rule in EXPECTED} <= _scanner.RULES


def test_aliased_imports_are_followed() -> None:
    source = (
        "import torch as T\nfrom torch.cuda import is_available\nd = T.device(0)\nis_available()\n"
    )
    assert found_rules(source) == [(3, "device-accelerator-index"), (4, "cuda-is-available")]


def test_names_that_are_not_torch_are_left_alone() -> None:
    source = "import mylib as torch2\ndevice = torch2.device('cuda')\ncuda = object()\n"
    assert scan_text(source) == []


def test_a_parameter_shadows_an_import_of_the_same_name() -> None:
    source = """\
        import data
        import torch

        def move(data, device):
            return data.to(device)

        class Loader:
            def batch(self, torch):
                return torch.cuda.is_available()
        """
    assert found_rules(source) == [(5, "tensor-to-device")]


def test_comments_strings_and_help_text_are_not_idioms() -> None:
    source = '''\
        """Run with torch.cuda.is_available() and x.to(device); set CUDA_VISIBLE_DEVICES."""
        import argparse
        import torch
        # device = torch.device("cuda")  ; model.cuda()
        parser = argparse.ArgumentParser(description="trains on cuda:0 with pin_memory=True")
        parser.add_argument("--device", default=None, help="torch.device('cuda:1') or cpu")
        parser.add_argument("--workers", type=int, help="os.environ['LOCAL_RANK']")
        message = f"moving to cuda: {parser.prog} .to(device)"
        print("torch.cuda.synchronize()", message)
        '''
    assert scan_text(source) == []


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ('device = torch.device("cpu")', "device-type"),
        ('device = torch.device("cuda")', "device-type"),
        ('device = torch.device("cuda:1")', "device-indexed"),
        ("device = torch.device(args.device)", "device-from-spec"),
        ('device = torch.device("cuda" if use_cuda else "cpu")', "device-select"),
        ('rank = int(os.environ["RANK"])', "dist-env"),
        ('local = int(os.environ["LOCAL_RANK"])', "dist-local-rank"),
        ('launched = "RANK" in os.environ', "dist-env"),
        ('world = int(os.environ.get("WORLD_SIZE", 1))', "dist-env"),
        ('os.environ["CUDA_VISIBLE_DEVICES"] = "0"', "cuda-visible-devices"),
        ("x = x.to(other)", "tensor-to-other"),
        ("on_gpu = x.is_cuda", "tensor-device-type"),
        ('if x.device.type == "cuda": pass', "tensor-device-type"),
        ("device = images.device", "tensor-device"),
        ("raw = model.module", "ddp-module"),
        ("model.require_backward_grad_sync = False", "ddp-no-sync"),
        ("name = 'cuda:{}'.format(rank)", "device-indexed"),
        ("name = f'cuda:{rank}'", "device-indexed"),
    ],
)
def test_rule_labels(line: str, rule: str) -> None:
    found = found_rules(f"import os\nimport torch\n{line}\n")
    assert (3, rule) in found, found


def test_a_setting_named_device_is_not_an_array_device() -> None:
    assert found_rules("import torch\nx = torch.zeros(2).to(args.device)\nd = cfg.device\n") == [
        (2, "tensor-to-device")
    ]


@pytest.mark.parametrize(
    "evidence",
    [
        "net = torch.nn.Linear(2, 2)",
        "class Net(torch.nn.Module):\n    pass\nnet = Net()",
        "net = load()\nnet.eval()",
        "net = load()\nopt = make(net.parameters())",
    ],
)
def test_model_to_is_module_to_when_the_receiver_is_a_module(evidence: str) -> None:
    source = f"import torch\n{evidence}\nnet = net.to(device)\n"
    last = len(source.splitlines())
    assert (last, "module-to") in found_rules(source)


@pytest.mark.parametrize(
    ("call", "rule"),
    [
        ('torch.zeros(2, 3, device="cuda")', "factory-device"),
        ("torch.randn(4, device=device, generator=g)", "factory-device"),
        ("torch.arange(n, dtype=torch.long, device=x.device)", "factory-device"),
        ("torch.zeros_like(x, device=device)", "factory-device"),
        ("torch.full((2,), 7, device=device)", "factory-device"),
        ("torch.tensor([1.0], device=device)", "factory-tensor-device"),
        ("torch.as_tensor(data, device=device)", "factory-tensor-device"),
        ("x.new_zeros((2, 3))", "tensor-new-factory"),
        ("x.new_tensor([1, 2])", "tensor-new-factory"),
        ("torch.nn.Linear(4, 2, device=device)", "module-device-kwarg"),
        ('torch.Generator(device="cuda")', "generator-device"),
        ("torch.cuda.FloatTensor(2)", "cuda-tensor-type"),
        ("torch.cuda.manual_seed_all(0)", "cuda-manual-seed"),
        ("torch.manual_seed(0)", "manual-seed"),
        ("torch.cuda.amp.GradScaler()", "grad-scaler"),
        ('torch.amp.GradScaler("cuda", enabled=True)', "grad-scaler"),
        ("torch.cuda.amp.autocast()", "autocast"),
        ('torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16)', "autocast"),
        ("torch.accelerator.set_device_index(0)", "accelerator-set-device-index"),
        ("torch.cuda.is_initialized()", "cuda-is-initialized"),
        ('torch.set_float32_matmul_precision("high")', "tf32-matmul"),
        ("torch.save(state, path)", "torch-save"),
        ("torch.nn.DataParallel(model)", "dist-data-parallel"),
        ("torch.multiprocessing.spawn(worker, nprocs=2)", "mp-spawn"),
        ("torch.compile(model)", "torch-compile"),
        ("torch.cuda.Event(enable_timing=True)", "cuda-event-timing"),
        ("torch.cuda.Stream()", "cuda-stream"),
        ("torch.cuda.nvtx.range_push('step')", "profiler"),
        ("torch.use_deterministic_algorithms(True)", "deterministic"),
        ("torch.cuda.get_rng_state()", "rng-state"),
        ("torch.cuda.ipc_collect()", "cuda-other"),
        ("torch.backends.cudnn.version()", "cuda-other"),
        ("torch.distributed.all_gather(out, t)", "dist-other"),
        ("torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)", "sync-batchnorm"),
        ("images.cuda(gpu, non_blocking=True)", "tensor-cuda"),
        ("DataLoader(ds, **{'pin_memory': True})", "dataloader-pin-memory"),
        ("MyLoader(ds, batch_size=2, pin_memory=True)", "dataloader-pin-memory"),
    ],
)
def test_call_idioms(call: str, rule: str) -> None:
    assert (2, rule) in found_rules(f"import torch\nresult = {call}\n")


@pytest.mark.parametrize(
    ("statement", "rule"),
    [
        ("torch.backends.cuda.matmul.allow_tf32 = True", "tf32-matmul"),
        ("torch.backends.cudnn.allow_tf32 = True", "tf32-matmul"),
        ("torch.backends.cudnn.benchmark = True", "cudnn-benchmark"),
        ("cudnn.benchmark = True", "cudnn-benchmark"),
        ("torch.backends.cudnn.deterministic = True", "deterministic"),
        ("print(torch.version.cuda)", "cuda-other"),
        ("@torch.cuda.amp.autocast()\ndef f(): pass", "autocast"),
        ("with model.no_sync():\n    pass", "ddp-no-sync"),
        ("scaler = torch.cuda.amp.GradScaler()\nscaler.update()", "grad-scaler"),
    ],
)
def test_statement_idioms(statement: str, rule: str) -> None:
    source = f"import torch\nimport torch.backends.cudnn as cudnn\n{statement}\n"
    last = len(source.splitlines())
    assert (last, rule) in found_rules(source) or (3, rule) in found_rules(source)


def test_multi_line_calls_are_reported_where_the_idiom_is() -> None:
    source = """\
        import torch
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=8,
            pin_memory=True,
        )
        x = torch.zeros(
            (2, 3),
            device=device,
        )
        y = (
            batch
            .to(device)
        )
        """
    assert found_rules(source) == [
        (5, "dataloader-pin-memory"),
        (9, "factory-device"),
        (13, "tensor-to-device"),
    ]


# -- reports -------------------------------------------------------------------------------
def test_text_report_is_linter_shaped() -> None:
    status, out, _ = run_cli("scan", str(FIXTURE))
    assert status == 1
    assert f"{FIXTURE}:10:10: device-select torch.device(" in out
    assert 'torch2jax_device:     tj.device("cuda" if torch.cuda.is_available() else "cpu")' in out
    assert (
        "not rewritten:        it would become a tj.device, and line 22: passed to model.to(device)"
        in out
    )
    assert 'migration guide, section "Devices", #device-select' in out
    assert "(torch2jax-device scan --explain device-select)" in out
    assert "docs/" not in out and "http" not in out  # nothing a wheel user does not have
    total = len(_scanner.scan_source(FIXTURE.read_text()))
    # torch.device(0) (line 13) is not among them: tj.device(0) would start JAX before
    # init_process_group (line 59), torch's or not.
    assert out.rstrip().endswith(f"{total} idiom(s) found, 4 rewritable with --diff")


def test_multi_line_text_is_indented_under_its_label() -> None:
    _, out, _ = run_cli("scan", str(FIXTURE))
    lines = out.splitlines()
    label = "    plain JAX:            "
    first = lines.index(label + catalog.get("device-select").jax.splitlines()[0])
    assert lines[first + 1] == " " * len(label) + "device = jax.local_devices(backend=platform)[0]"


def test_json_report() -> None:
    status, out, _ = run_cli("scan", "--format", "json", str(FIXTURE))
    findings = json.loads(out)
    assert status == 1 and len(findings) == len(_scanner.scan_source(FIXTURE.read_text()))
    first = findings[0]
    assert first["rule"] == "device-select" and (first["line"], first["column"]) == (10, 10)
    assert first["jax"] == catalog.get("device-select").jax and first["section"] == "Devices"
    assert first["explain"] == "torch2jax-device scan --explain device-select"
    assert not first["fixable"] and "model.to(device)" in first["reason"]
    assert set(first) == {
        "path", "line", "column", "end_line", "rule", "title", "section", "original",
        "replacement", "jax", "fixable", "reason", "explain",
    }  # fmt: skip
    fixable = [f for f in findings if f["fixable"]]
    assert fixable and all(f["reason"] is None for f in fixable)


def test_the_plain_jax_advice_built_from_the_line_is_printed(tmp_path: Path) -> None:
    """A row whose plain-JAX advice is built from the line (the script's own optimizer)
    prints that advice, in text and JSON, not the row's generic column."""
    script = tmp_path / "train.py"
    script.write_text("import torch\nopt = torch.optim.Adam(net.parameters(), lr=1e-2)\n")
    _, out, _ = run_cli("scan", str(script))
    printed = [line for line in out.splitlines() if line.strip().startswith("plain JAX:")]
    assert len(printed) == 2 and all("optax.adam(1e-2)" in line for line in printed)
    _, as_json, _ = run_cli("scan", "--format", "json", str(script))
    findings = json.loads(as_json)
    assert {f["rule"] for f in findings} == {"optimizer-torch-rules", "optimizer-parameters"}
    for finding in findings:
        assert "optax.adam(1e-2)" in finding["jax"]
        assert finding["jax"] != catalog.get(finding["rule"]).jax


def test_explain_prints_the_guide_entry() -> None:
    status, out, _ = run_cli("scan", "--explain", "grad-scaler")
    row = catalog.get("grad-scaler")
    assert status == 0
    assert out.startswith(f'grad-scaler: {row.title}\nMigration guide, section "Precision"')
    assert "    scaler.scale(loss).backward()" in out and row.jax in out
    assert "--diff never rewrites it" in out


def test_explain_an_unknown_rule() -> None:
    status, _, err = run_cli("scan", "--explain", "grad-scalar")
    assert status == 2 and "no rule 'grad-scalar'; did you mean grad-scaler?" in err
    status, _, err = run_cli("scan", "--explain", "zzz")
    assert status == 2 and "no rule 'zzz'; `torch2jax-device scan --list-rules` lists" in err


def test_list_rules_lists_every_rule_by_section() -> None:
    status, out, _ = run_cli("scan", "--list-rules")
    assert status == 0
    assert all(f"  {rule} " in out for rule in _scanner.RULES)
    assert out.index("Devices\n") < out.index("  device-select") < out.index("Availability\n")


def test_help_describes_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["scan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--format {text,json}", "--diff", "--explain RULE", "--list-rules"):
        assert option in text
    assert "text: one block per finding" in text and "json: a list of objects" in text
    assert "git apply" in text


# -- the diff ----------------------------------------------------------------------------------
def test_diff_rewrites_what_is_correct_on_its_own_and_keeps_the_rest() -> None:
    source = FIXTURE.read_text()
    rewritten = _scanner.apply_edits(source, _scanner.scan_source(source))
    ast.parse(rewritten)
    lines = rewritten.splitlines()
    assert "import torch2jax_device as tj" in lines[:10]
    # device is handed to torch code (model.to(device)): it stays a torch.device
    assert (
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # line 10' in lines
    )
    assert 'other = tj.device("cuda:1")' in lines  # used by nobody: correct on its own
    assert "model = model.to(device)  # line 22" in lines  # a torch module stays torch's
    assert "a = x.cpu().numpy()  # line 30" in lines  # a JAX array has no .numpy()
    assert "torch.cuda.reset_peak_memory_stats()" in lines  # advice only
    assert "torch.cuda.synchronize()" in lines  # torch still computes on the device
    assert 'state = torch.load("ckpt.pt", map_location="cpu")  # line 45' in lines  # unused
    assert 'tj.save_file({"w": np.ones(2)}, "out.safetensors")' in lines  # the same bytes
    assert 'dist.init_process_group(backend="nccl")' in lines  # DDP stays: so does the group
    assert "pinned = x.pin_memory()  # line 63" in lines  # nothing JAX reads it


def test_diff_output_is_a_unified_diff() -> None:
    status, out, _ = run_cli("scan", "--diff", str(FIXTURE))
    assert status == 0
    assert out.startswith(f"--- a/{FIXTURE}\n+++ b/{FIXTURE}\n")
    assert "+import torch2jax_device as tj\n" in out
    assert (
        '\n-other = torch.device("cuda:1")\n' in out and '\n+other = tj.device("cuda:1")\n' in out
    )


@pytest.mark.parametrize(
    ("line", "ported"),
    [
        (
            "y = x.to(device).to(torch.float16)",
            "y = tj.to_device(tj.to_device(x, device), torch.float16)",
        ),
        (
            "y = x.cuda().to(torch.float16)",
            'y = tj.to_device(tj.to_device(x, "cuda"), torch.float16)',
        ),
        (
            "y = x.pin_memory().to(device, non_blocking=True)",
            "y = tj.to_device(tj.pin_memory(x), device, non_blocking=True)",
        ),
        (
            "y = [t.cuda(non_blocking=True) for t in xs]",
            'y = [tj.to_device(t, "cuda", non_blocking=True) for t in xs]',
        ),
        ("y = (a + b).cuda(1)", 'y = tj.to_device((a + b), "cuda:1")'),
        (
            "y = x.to(device=device, dtype=torch.float16)",
            "y = tj.to_device(x, device=device, dtype=torch.float16)",
        ),
    ],
)
def test_nested_and_keyword_forms_compose(line: str, ported: str) -> None:
    rewritten = port_text(f"import torch\nimport jax.numpy as jnp\n{line}\nprint(jnp.sum(y[0]))\n")
    assert ported in rewritten.splitlines()


def test_rewrites_never_reach_torch_code() -> None:
    source = """\
        import torch
        model = torch.nn.Linear(2, 2)
        device = torch.device("cpu")
        x = torch.ones(2).to(device)
        y = model(x)
        z = torch.zeros(2, device=device)
        """
    assert port_text(source) == textwrap.dedent(source)
    reasons = {f.rule: f.reason for f in scan_text(source)}
    assert "line 5: passed to model(x)" in reasons["tensor-to-device"]
    assert "line 6: passed to torch.zeros(2, device=device)" in reasons["device-type"]


def test_a_value_used_by_jax_code_is_rewritten() -> None:
    source = """\
        import jax.numpy as jnp
        import numpy as np
        import torch

        def features(batch, device):
            batch = batch.to(device, non_blocking=True)
            return jnp.tanh(batch)

        print(features(torch.from_numpy(np.ones(3, np.float32)), torch.device("cpu")))
        """
    rewritten = port_text(source)
    assert "    batch = tj.to_device(batch, device, non_blocking=True)" in rewritten
    assert 'tj.to_jax(np.ones(3, np.float32)), tj.device("cpu")' in rewritten


def test_torch_load_rewrites_only_what_tj_load_does_the_same() -> None:
    source = """\
        import io
        import jax
        import torch
        a = torch.load("model.pt", map_location="cpu", weights_only=True)
        jax.tree.map(print, a)
        with open("model.pt", "rb") as f:
            b = torch.load(f)
        c = torch.load(io.BytesIO(blob))
        d = torch.load("model.pt", weights_only=False)
        e = torch.load(path_from_somewhere)
        print(a, b, c, d, e)
        """
    rewritten = port_text(source).splitlines()
    assert 'a = tj.load("model.pt", map_location="cpu")' in rewritten
    reasons = {f.line: f.reason for f in scan_text(source) if f.rule.startswith("torch-load")}
    # tj.load reads file objects and paths alike (issue 24): only what reads the result
    # decides, and here torch's print does
    assert reasons[7].startswith("no JAX code reads the result")
    assert reasons[8].startswith("no JAX code reads the result")
    assert reasons[9] == "tj.load never runs code from the file (always weights_only=True)"
    assert reasons[10].startswith("no JAX code reads the result")


def test_modules_move_only_when_they_are_flax_nnx_modules() -> None:
    source = """\
        import torch
        from flax import nnx

        class Net(nnx.Module):
            def __init__(self, rngs):
                self.linear = nnx.Linear(2, 2, rngs=rngs)

        model = Net(nnx.Rngs(0))
        model.to(device)
        torch_model = torch.nn.Linear(2, 2)
        torch_model.to(device)
        unknown = build()
        unknown.to(device)
        """
    rewritten = port_text(source).splitlines()
    assert "tj.to_device(model, device)" in rewritten
    assert "torch_model.to(device)" in rewritten and "unknown.to(device)" in rewritten
    reasons = {f.line: f.reason for f in scan_text(source) if f.rule == "module-to"}
    assert "torch_model is a torch.nn.Module" in reasons[11]
    assert "the result is dropped, so this moves a module in place" in reasons[13]


def test_the_name_tj_taken_stops_every_rewrite() -> None:
    source = "import torch\ntj = 3\nd = torch.device('cpu')\n"
    (finding,) = scan_text(source)
    assert not finding.fixable and finding.reason == "the name tj is already used at line 2"


def test_runtime_calls_wait_for_torch_to_leave_the_device() -> None:
    torch_left = "import torch\nn = torch.cuda.device_count()\nprint(n)\n"
    assert "n = tj.cuda.device_count()" in port_text(torch_left)
    torch_stays = torch_left + "x = torch.ones(2).cuda()\nprint(x.sum().item() + 1, torch.sum(x))\n"
    assert "n = torch.cuda.device_count()" in port_text(torch_stays)


def test_the_process_group_is_ported_all_at_once() -> None:
    alone = "import torch.distributed as dist\ndist.init_process_group('gloo')\ndist.barrier()\n"
    assert port_text(alone).splitlines()[-2:] == [
        "tj.distributed.init_process_group('gloo')",
        "tj.distributed.barrier()",
    ]
    with_ddp = alone + "from torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(m)\n"
    assert port_text(with_ddp) == with_ddp


# -- start-up order ------------------------------------------------------------------------------
def test_jax_starting_calls_before_init_process_group_are_reported() -> None:
    source = """\
        import os
        import torch
        import torch.distributed as dist

        def main():
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl")
            print(torch.cuda.device_count())

        if __name__ == "__main__":
            main()
        """
    found = scan_text(source)
    (order,) = [f for f in found if f.rule == "startup-order"]
    assert order.line == 7
    assert "would start JAX before init_process_group (line 8)" in order.reason
    rewritten = port_text(source)
    assert "            torch.cuda.set_device(local_rank)" not in rewritten  # dedented source
    assert "    torch.cuda.set_device(local_rank)" in rewritten
    assert '    tj.distributed.init_process_group("nccl")' in rewritten
    assert "    print(tj.cuda.device_count())" in rewritten


def test_jax_code_already_before_init_process_group_keeps_the_group_torchs() -> None:
    source = """\
        import jax
        import torch.distributed as dist
        print(jax.devices())
        dist.init_process_group("gloo")
        """
    found = {f.rule: f for f in scan_text(source)}
    assert (
        "jax.devices(...) starts JAX before init_process_group (line 4)"
        in found["startup-order"].reason
    )
    assert not found["dist-init-process-group"].fixable


def test_spawned_workers_are_followed() -> None:
    source = """\
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp

        def worker(rank):
            torch.cuda.set_device(rank)
            dist.init_process_group("nccl", rank=rank, world_size=2)

        if __name__ == "__main__":
            print(torch.cuda.device_count())
            mp.spawn(worker, nprocs=2)
        """
    order = [f.line for f in scan_text(source) if f.rule == "startup-order"]
    assert order == [6]  # the parent's device_count runs in another process


# -- failures ------------------------------------------------------------------------------------
def test_clean_file_and_broken_file(tmp_path: Path) -> None:
    clean = tmp_path / "clean.py"
    clean.write_text("import jax\nx = jax.numpy.zeros(3)\n")
    assert run_cli("scan", str(clean))[0] == 0
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    status, _, err = run_cli("scan", str(tmp_path))
    assert status == 2 and f"cannot scan {broken}" in err


def test_one_broken_file_does_not_stop_the_diff_of_the_others(tmp_path: Path) -> None:
    (tmp_path / "a_broken.py").write_text("def f(:\n")
    (tmp_path / "b_good.py").write_text("import torch\nd = torch.device('cpu')\nprint(d)\n")
    status, out, err = run_cli("scan", "--diff", str(tmp_path))
    assert status == 2 and "cannot scan" in err
    assert "+d = tj.device('cpu')" in out


def test_an_internal_error_in_one_file_is_reported_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.py").write_text("import torch\nd = torch.device('cpu')\nprint(d)\n")
    (tmp_path / "b.py").write_text("import torch\ne = torch.device('cpu')\nprint(e)\n")
    real = _scanner.detect

    def detect(file: _scanner.SourceFile) -> list[object]:
        if file.path.endswith("a.py"):
            raise RuntimeError("boom")
        return real(file)

    monkeypatch.setattr(_scanner, "detect", detect)
    status, out, err = run_cli("scan", "--diff", str(tmp_path))
    assert status == 2 and "internal error on" in err and "RuntimeError: boom" in err
    assert "+e = tj.device('cpu')" in out


@pytest.mark.parametrize(
    ("snippet", "reason"),
    [
        ("x.cuda(device)", "device may be None, an index or a device"),
        ("x.to(d, torch.half, True, False, 1)", "too many arguments"),
        ("x.to(*args)", "*args/**kwargs"),
    ],
)
def test_unusual_calls_are_not_rewritten(snippet: str, reason: str) -> None:
    """In a line that JAX code reads, where ``x.cuda()`` and ``x.to(d)`` are rewritten,
    the unusual argument forms alone keep the call a finding."""
    source = "import torch\nimport jax.numpy as jnp\ny = {}\nz = jnp.sum(y)\n"
    assert [f.fixable for f in scan_text(source.format("x.cuda()"))] == [True]
    assert [f.fixable for f in scan_text(source.format("x.to(d)"))] == [True]
    findings = scan_text(source.format(snippet))
    assert len(findings) == 1 and not findings[0].fixable
    assert reason in findings[0].reason


@pytest.mark.parametrize(
    "snippet",
    ["x.to(d, torch.half, True)", "x.to(d, non_blocking=True, memory_format=torch.channels_last)"],
)
def test_every_tensor_to_form_tj_takes_is_rewritten(snippet: str) -> None:
    """torch's positional non_blocking/copy and memory_format= are tj.to_device's too."""
    source = f"import torch\nimport jax.numpy as jnp\ny = {snippet}\nz = jnp.sum(y)\n"
    (finding,) = scan_text(source)
    assert finding.fixable, finding.reason
    assert finding.replacement.startswith("tj.to_device(x, d")


def test_methods_called_on_self_are_followed() -> None:
    source = """\
        import torch
        import torch.distributed as dist

        class Trainer:
            def __init__(self):
                self.device_count = torch.cuda.device_count()
                self.setup()

            def setup(self):
                dist.init_process_group("gloo")

        Trainer()
        """
    assert [f.line for f in scan_text(source) if f.rule == "startup-order"] == [6]


def test_a_reader_that_stops_early_ends_the_scan_quietly() -> None:
    """``scan . | head -1``: the closed pipe stops the scan with no traceback."""
    corpus = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "corpus"
    process = subprocess.Popen(
        [sys.executable, "-m", "torch2jax_device", "scan", str(corpus)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # more than a pipe's buffer is still to come
    with process.stderr:
        error = process.stderr.read()
    assert process.wait(timeout=deadline(60)) == 128 + signal.SIGPIPE
    assert b"cnn_example.py" in first
    assert error == b""


@pytest.mark.parametrize("spec", ['"cuda:{}".format(rank)', '"cuda:%d" % rank', 'f"cuda:{rank}"'])
def test_a_formatted_device_string_in_torch_device_is_one_finding(spec: str) -> None:
    findings = scan_text(f"import torch\nd = torch.device({spec})\n")
    assert [(f.line, f.rule, f.column) for f in findings] == [(2, "device-indexed", 5)]
    assert findings[0].replacement == f"tj.device({spec})"
