"""``scan`` on real code the scanner was not written against, an eighth round (issue 35).

``tests/support/fixtures/unseen_round8`` holds files of public repositories that no
earlier test or doc names, labelled blind under the conventions CONTRIBUTING writes down
("How a blind set is labelled"), in sets told apart by their ``.truth`` header:

- the development set (header "Development set of round 8"): 20 files of eleven
  repositories (modded-nanogpt, picotron, mistral-inference, gpt-fast, torchtitan,
  torchtune, stable-baselines3, WeNet, timm, Open-Sora, Diffusers' examples): a
  speed-run trainer, 4-D parallel training from scratch, inference and generation,
  distributed utilities of two PyTorch-native libraries, RL policies, speech training
  with DeepSpeed and DDP, image-model training, video diffusion on ColossalAI,
  Accelerate's text-to-image example. Measured blind on main at c3f7386, before any
  fix of this round: torch lines 312/338 = 0.923, library lines 43/69 = 0.623.

  Fixed by class (``tests/cli/test_scan_round8_dev_classes.py`` generates each over its
  spellings with a silent twin), measured after: torch lines 334/338 = 0.988, library
  lines 69/69 = 1.000. The classes: the compiler's settings (``torch._inductor.config``,
  ``torch._functorch.config``), ``is_compiled_module`` and torchtune's ``compile_model``;
  ``torch.utils.deterministic.fill_uninitialized_memory``; torch's private
  ``_get_available_device_type()`` / ``_get_device_module(t)`` and the device module they
  give, handed back in a helper's tuple or imported from the project by its name;
  ``pin_memory()`` of an object holding a model's tensors (Diffusers' ``EMAModel``);
  ``loss.new([value])``; FSDP's ``model.clip_grad_norm_(clip)``; ``with autocast:`` of a
  context picked from a dict; the launcher's variables checked over a list of their
  names. Libraries: ColossalAI's ``Booster`` (its plugin, ``boost``, ``backward``,
  ``no_sync``, ``execute_pipeline``, ``checkpoint_io``), ``DistCoordinator`` and
  ``set_seed``; Hugging Face's ``save_pretrained`` of a model or pipeline; Accelerate's
  save hooks and ``zero3_init_context_manager``; DeepSpeed named in a comparison
  (``train_engine == "deepspeed"``), ``add_config_arguments``, ZeRO's memory estimates and
  ``convert_zero_checkpoint_to_fp32_state_dict``; torchtune's ``get_memory_stats`` and
  activation offloading, and the device functions of torchtune, ColossalAI, DeepSpeed and
  Stable-Baselines3 by their qualified names (sb3's ``get_device("cpu")`` is found as
  ``library-device``; its ``"cpu"`` is the string class's).

  With rows8's device names in literals merged, 335/338: left are the backend spec
  ``f"{device_type}:{backend},cpu:gloo"`` of torchtitan and torchtune (labelled
  ``dist-other``: a process group's back ends, which the literal class leaves alone)
  and FSDP2's ``model.state_dict()`` (torchtune). No label contradicts CONTRIBUTING's
  conventions; rounds 5 and 6 left ``save_pretrained`` unlabelled where this set labels
  it, which the conventions support (a library's call that writes tensors).

- held-out set B (header "Held out set B of round 8"): 19 files of ten repositories
  (BLIP, Depth-Anything-V2, F5-TTS, InternLM, latent-diffusion, Latte, QLoRA,
  StyleTTS2, Tianshou, TorchRL), and held-out set C ("Held out set C of round 8"): 19
  files of twelve (Amphion, DI-engine, Dolly, GroundingDINO, icefall, imagen-pytorch,
  nerfstudio, OpenVoice, Real-ESRGAN, Sample Factory, threestudio, Unsloth). Labelled
  blind by two more hands, never shown to those who fixed the scanner, never fixed
  against: the honest measure. Blind on main at c3f7386 (the round's start): B torch
  lines 275/295 = 0.932, library lines 42/44 = 0.955; C 248/276 = 0.899, 51/62 = 0.823.
  After every fix of the round (the conventions, round 7's leftovers, the development
  set's classes): B 280/295 = 0.949, 42/44 = 0.955; C 255/276 = 0.924, 52/62 = 0.839;
  together 535/571 = 0.937 and 94/106 = 0.887. Issue 35 asks 0.97 on torch lines: not
  reached. Their misses, by class: a scheduler the file did not make, known by its
  name (``self.scheduler.step()``, ``scheduler.state_dict()``, Transformers'
  ``get_scheduler``, ``SequentialLR``: 10 lines); a ``DataParallel`` subclass and its
  ``.module`` (6); torch's device module chosen at import and kept in a module-level
  name (Unsloth's ``_DEVICE_MODULE``: 4); a variable name held in a constant
  (``CUDA_ENVVAR``), ``os.environ.setdefault("TORCHDYNAMO_DISABLE", ...)``; ``x.type(
  dtype)``; a GradScaler handed to Accelerate; Click options of a DeepSpeed launcher.

Each file is the original's imports and the parts kept, unchanged, cut from the commit its
header names, and rebuilt from a clone of its repository (``tests/support/excerpts.py``:
this project commits none of that code, only where each piece comes from). Each
``.truth`` was written by hand from reading the file, by a labeller who never ran the
scanner on it, and committed before the file was first scanned.

    TORCH2JAX_DEVICE_MIRRORS=DIR python -m tests.cli.test_scan_unseen_round8   # the figures
"""

from __future__ import annotations

from tests.support import unseen_rounds

FOLDER = "unseen_round8"
#: The recall each set must keep: (torch lines, library lines), each set named by the
#: phrase of its ``.truth`` headers. The development set's, after its classes were fixed
#: (335/338, 69/69; blind: 312/338, 43/69). The held-out sets', as measured at the
#: round's end, never fixed against (B: 280/295, 42/44; C: 255/276, 52/62), and after
#: round 9 fixed their classes (B: 295/295, 44/44; C: 275/276, 57/62).
FLOORS = {
    "Development set of round 8": (0.991, 1.0),
    "Held out set B of round 8": (1.0, 1.0),
    "Held out set C of round 8": (0.996, 0.919),
}

if __name__ == "__main__":
    unseen_rounds.print_figures(FOLDER, FLOORS)
else:  # the round's tests (tests/support/unseen_rounds.py names them)
    globals().update(unseen_rounds.round_tests(FOLDER, FLOORS))
