"""``scan`` on real code the scanner was not written against, a seventh round (issue 35).

``tests/support/fixtures/unseen_round7`` holds files of public repositories that no
earlier test or doc names, in sets told apart by their ``.truth`` header:

- the development set (header "Development set of round 7"): 20 files of nine
  repositories (DETR, kohya's sd-scripts, LLaMA-Factory, InternVL, RWKV-LM, ControlNet,
  whisperX, the alignment-handbook, axolotl): distributed start-up over SLURM and MPI
  variables, device-selection helpers over cuda/mps/xpu/npu, training scripts on
  Accelerate, DeepSpeed, Lightning and Transformers' Trainer, samplers and inference;
- the second development set (header "Second development set of round 7"): 20 files of
  eight more repositories (OpenRLHF, verl, FLUX, DeepSeek-V3, Janus, CogVideo, Wan2.1,
  Petals), labelled blind by another hand as held out and measured so (on main at
  928b1fa: torch lines 256/282 = 0.908, library lines 33/55 = 0.600; after the first
  set's fixes 259/282 = 0.918, 34/55 = 0.618), then fixed against by class (below) to
  272/282 = 0.965 and 54/55 = 0.982: Ray and vLLM workers, DeepSpeed engines, FSDP
  utilities, device helpers over cuda/npu, inference and video generation with
  offloading;
- the held-out set (header "Held out"): 19 files of ten more repositories (bark, Coqui
  TTS, k-diffusion, mmengine, OpenFold, open-instruct, open_lm, open-r1, rl_games,
  tortoise-tts), labelled blind by a third hand and never fixed against: the honest
  measure. On main at the round's start (928b1fa) torch lines 353/377 = 0.936, library
  lines 76/92 = 0.826; after every fix made from the two development sets and the
  metamorphic oracle, 358/377 = 0.950 and 76/92 = 0.826 (without ``openlm_main``, which
  began as a copy of round 6's open_clip ``main.py``: 326/344 = 0.948). Issue 35 asks
  0.97 on torch lines: not reached on code never seen. In round 8 it became a development
  set (round 8's sets, labelled blind, are the honest measure now): fixed against by class
  (``tests/cli/test_scan_round8_classes.py``), to 376/377 = 0.997 torch lines, library
  lines 76/92 = 0.826 unchanged.

Each file is the original's imports and the parts kept, unchanged, cut from the commit its
header names, and rebuilt from a clone of its repository (``tests/support/excerpts.py``:
this project commits none of that code, only where each piece comes from).
Each ``.truth`` was written by hand from reading the file, by a labeller who
never ran the scanner on it, and committed before the file was first scanned: every line
where a catalog row applies, torch's own idioms and the lines of the libraries built on
torch (the catalog's section "Libraries built on torch") counted apart.

    TORCH2JAX_DEVICE_MIRRORS=DIR python -m tests.cli.test_scan_unseen_round7   # the figures

Measured blind when labelled (main at 928b1fa, before any fix against it): torch lines
310/337 = 0.920, library lines 122/150 = 0.813.

Fixed by class (each class generated with its silent twin in
``tests/cli/test_scan_round7_classes.py``), to 335/337 = 0.994 and 147/150 = 0.980: a
device's type compared where the device is handed in (kohya's ``if isinstance(device,
str): device = torch.device(device)``) or a helper returns it, named by the project's enum
of device names (LLaMA-Factory's ``get_current_accelerator().type == DeviceType.CUDA``);
a Lightning script's ``--accelerator/--strategy/--devices/--num_nodes/--precision``
options when it works on them before the launcher (``args.precision = 16``, ``"deepspeed"
in args.strategy``, ``num_nodes * devices``; options only handed through stay the
launcher call's finding, as the wild corpus labels them); ``TrlParser``/
``HfArgumentParser`` given training arguments (not when the subclass is defined in the
file: its definition is the finding, as round 6 labels it); Lightning's
``trainer.save_checkpoint``; ``mp.set_start_method("spawn")`` and the
``get_start_method()`` test before it; a torch scheduler's ``load_state_dict``;
``accelerator.scaler._unscale_grads_``; ``hasattr(param, "ds_numel")`` (not when it guards
DeepSpeed's gather, the block's finding) and ``param.numel()`` counted in a loop;
Accelerate's ``ParallelismConfig``, ``build_device_mesh("cuda")`` and
``DistributedDataParallelKwargs``; ``_ddp_params_and_buffers_to_ignore`` (not on a model
the file wraps in DDP); ``accelerator = prepare_accelerator(args)`` and a DeepSpeed plugin
a project's helper builds for the Accelerator; ``if args.deepspeed:``;
``getattr(torch, device_name)``; ``device == "auto"`` and ``device[5:]``; Transformers'
``is_torch_*_available`` from ``import_utils``. Left, against the labels: Transformers'
``trainer.save_state()`` (three lines; it writes ``trainer_state.json``, the step and the
log, no device work: kept unreported as round 6 decided, and as CONTRIBUTING's labelling
conventions now say), and kohya's ``lr_scheduler.step()`` on a scheduler a project's
helper made and ``accelerator.prepare`` rebound (Transformers' and Diffusers' schedules
are no row's). DETR's ``parser.add_argument('--device', default='cuda')``, left in round
7, is found since round 8 (a device chosen by name, wherever it is written: 336/337).

The second development set, fixed by class (each generated with its silent twin in
``tests/cli/test_scan_round7b_classes.py``): Ray's GPU requests (``@ray.remote(num_gpus=
1)``, ``.options(num_gpus=n)``, placement-group ``{"GPU": 1}`` bundles), the devices it
gave (``ray.get_gpu_ids()``, ``get_runtime_context().get_accelerator_ids()``) and
``ray.util.collective``; xDiT's ``init_distributed_environment`` and parallel state;
DeepSpeed's engine kept in a model's name (``model.backward(loss)``, ``model.step()``,
``engine.compile()``), ``get_global_grad_norm()``, ``tp_model_init``; Transformers'
``enable_full_determinism``; ``from accelerate.accelerator import Accelerator`` and
``accelerator.native_amp = False``; verl's ``get_torch_device().empty_cache()`` (torch's
device module handed out by a helper); ``hasattr(torch, "npu")``; ``map(torch.device,
names)``; ``mesh["dp"].get_group()``; ``getattr(model, "no_sync", default)``; safetensors'
``load_model(model, path)``; FSDP's ``_free_storage``; ``torch.device(f"{name}:{i}")`` as
``device-from-spec``; a helper returning ``"CUDA_VISIBLE_DEVICES"``; torch's private
``torch.cuda.memory._set_allocator_settings``. Left, against the labels (the catalog's or
earlier rounds' conventions kept): a module's ``.cpu()`` labelled ``tensor-cpu`` (the
catalog's ``Module.cpu`` is ``module-to``); a project's builders given a device
(``load_t5(device)``, ``WanVAE(device=)``, ``convert_block(..., device)``) and FLUX's
TensorRT engines' ``.to(device=)`` labelled ``module-to``; ``.to(dtype)`` on a block
labelled ``module-to-dtype`` (dtype-only moves); ``num_workers=0`` labelled
``dataloader-workers`` (no worker forks); ``InitProcessGroupKwargs`` and
``distributed_type == DistributedType.DEEPSPEED`` labelled ``library-strategy`` (the
catalog's ``library-launcher`` / ``library-process``); ``getattr(torch, device_name)``,
``get_torch_device().current_device()`` / ``.set_device()`` labelled with ``cuda-*`` rows
(``accelerator-*``, as the first set's fix decided); ``torch.mps`` memory and synchronize
calls labelled with the ``torch.cuda`` rows (the catalog's ``xpu-npu-*`` rows name
``torch.mps``), ``torch.cuda.ipc_collect()`` as ``cuda-empty-cache`` (a rename row: a
different call); Petals' ``device.type`` tests after an unconditional ``device =
torch.device(device)`` (reported where the device is made, as the first set decided);
vLLM's worker ``self.device``; ``os.environ["LOCAL_RANK"] = ...`` labelled
``dist-local-rank`` (a write: ``dist-env``); verl's ``PyNcclCommunicator`` imported in two
branches (no single origin).

The held-out set, made a development set in round 8 and fixed by class against
CONTRIBUTING's labelling conventions (each generated with its silent twin in
``tests/cli/test_scan_round8_classes.py``): a device chosen by name in a literal wherever
it is written (mmengine's ``DEVICE = 'mlu'``/``'dipu'``/``'musa'``, OpenFold's
``add_argument("--model_device", default="cpu")``, rl_games' ``config.get('device',
'cuda:0')`` and ``'cuda:' + str(self.local_rank)``), every torch device type compared
(``device_type == 'musa'``) or cut (``model_device.split(":")``); ``torch.jit.load``;
a ``torch.Generator``'s ``get_state``/``set_state``; ``key_averages().table(sort_by=
"cuda_time_total")``; ``os.environ.get("PMI_RANK")``; ``model.state_dict()`` under
``FSDP.state_dict_type``; and open-instruct's ``dist`` (``deepspeed.comm`` imported in a
``try:``, then ``torch.distributed``: a module name bound twice had no origin, so
``dist.is_initialized()`` and ``dist.broadcast_object_list`` went unreported). Left,
against the conventions: OpenFold's ``load_models_from_command_line(config,
args.model_device, ...)`` labelled ``module-to`` (a project's builder given a device), and
the library lines (Transformers' ``trainer.save_state()``, OpenFold's DeepSpeed
``zero_to_fp32`` helpers and Lightning's ``MPIEnvironment``, k-diffusion's ``unwrap``,
open-instruct's DeepSpeed offload states).
"""

from __future__ import annotations

from tests.support import unseen_rounds

FOLDER = "unseen_round7"
#: The recall each set must keep: (torch lines, library lines), each set named by the
#: phrase of its ``.truth`` headers. The development set's, what the fixes by class
#: reached (336/337, 147/150; 310/337, 122/150 when labelled). The second development
#: set's, what its fixes by class reached (272/282, 54/55; 256/282, 33/55 measured blind
#: at 928b1fa). The held-out set's, what round 8's fixes by class reached (376/377,
#: 76/92; 358/377 at round 7's end, never fixed against). Round 9's fixes: the
#: development set 337/337, 147/150; the held-out set's library lines 79/92.
FLOORS = {
    "Development set of round 7": (1.0, 0.98),
    "Second development set of round 7": (0.964, 0.981),
    "Held out": (0.997, 0.858),
}

if __name__ == "__main__":
    unseen_rounds.print_figures(FOLDER, FLOORS)
else:  # the round's tests (tests/support/unseen_rounds.py names them)
    globals().update(unseen_rounds.round_tests(FOLDER, FLOORS))
