"""Planning: which proposed rewrites are correct on their own (see ``scanner``).

A rewrite is disabled, with the reason its finding reports, when the value it changes
reaches code that cannot take the new one (``_flow``), when it changes torch's runtime
state or default device while torch code still depends on them, when it would leave
part of ``torch.distributed`` behind, when it would start JAX too early
(``_startup``), or when it does not compose with its neighbours. Disabling one
rewrite can make another unsafe, so the checks repeat until nothing changes.
"""

from __future__ import annotations

import ast
import sys
import weakref
from collections.abc import Callable

from ._candidate import Candidate
from ._current_device import SETTERS, Setter, reads_current_device, setter_of, setters
from ._names import all_names
from ._rewrites import Rewrite, compose, with_tj_import
from ._source import SourceFile
from ._startup import StartupOrder
from ._tables import FACTORIES, TENSOR_FACTORIES
from ._values import JAX_ARRAY, NNX_MODULE, NUMBER, PATH, TJ, prefixed

__all__ = ["plan"]

# Rows whose findings, left in torch, mean torch still places data on a device.
_PLACES_DATA = frozenset(
    {
        "tensor-to-device",
        "tensor-to-device-dtype",
        "tensor-to-other",
        "tensor-to-copy",
        "tensor-non-blocking",
        "tensor-cuda",
        "tensor-cpu",
        "tensor-pin-memory",
        "module-to",
        "factory-device",
        "factory-tensor-device",
        "tensor-new-factory",
        "module-device-kwarg",
        "cuda-tensor-type",
        "default-device-context",
        "default-device-set",
        "torch-load-map-location",
        "torch-load-map-location-dict",
        "torch-load-map-location-callable",
        "load-safetensors",
        "dataloader-pin-memory",
        "autocast",
        "grad-scaler",
        "dist-ddp-gradient",
        "dist-data-parallel",
        "generator-device",
        "cuda-stream",
        "cuda-event-timing",
        # A torch.device kept (handed to torch code, or to callers the scanner cannot
        # see): torch places data with it, on the device a query chose.
        "device-select",
        "device-indexed",
        "device-type-index",
        "device-accelerator-index",
        "device-type",
        "device-from-spec",
    }
)
# torch's autograd modes: where they are entered, torch computes (on whatever device its
# tensors are, which a runtime call of the same file waits for or measures).
_TORCH_COMPUTES = frozenset(
    {
        "torch.no_grad",
        "torch.enable_grad",
        "torch.inference_mode",
        "torch.set_grad_enabled",
        "torch.autograd.no_grad",
        "torch.autograd.grad_mode.no_grad",
    }
)
# Libraries whose calls the scanner knows: torch's (its creations are found by name),
# JAX's, NumPy's, and torch2jax_device.
_SEEN_LIBRARIES = ("torch", TJ, "jax", "flax", "optax", "numpy", "math", "safetensors")
# Renames that set torch's current device, which torch's own code keeps reading.
_SETS_CURRENT_DEVICE = frozenset({"tj.cuda.set_device", "tj.accelerator.set_device_index"})
# torch calls that create tensors without being told where (the default device decides).
_TORCH_CREATES = frozenset({"torch.load", "torch.from_numpy", *FACTORIES, *TENSOR_FACTORIES})
# Libraries that own torch's process group, current device or CUDA state once imported:
# they join the job (or read torch's answers) themselves, and never ask JAX.
_OWNER_LIBRARIES = frozenset(
    {
        "accelerate",
        "apex",
        "colossalai",
        "deepspeed",
        "fairscale",
        "lightning",
        "lightning_fabric",
        "megatron",
        "pytorch_lightning",
        "torch_xla",
        "torchtitan",
        "torchtune",
    }
)
# A torch owner: (the file, the line, what owns torch's state there).
_Owner = tuple[SourceFile, int, str]
# A call that creates torch tensors or modules, and its file.
_Created = tuple[SourceFile, ast.Call]


def plan(files: list[SourceFile], candidates: list[Candidate]) -> None:
    """Disable the rewrites that are not correct on their own, each with its reason;
    append the ``startup-order`` findings."""
    for candidate in candidates:
        if candidate.rewrite is not None and candidate.file.tj_taken:
            candidate.disable(candidate.file.tj_taken)
    order = StartupOrder(files, candidates)
    computes = _torch_computes(files)
    owner = _library_owner(files, candidates)
    creations: list[_Created] | None = None  # walked once, on first need
    while True:
        changed = False
        rewritten = {id(c.call) for c in candidates if c.enabled and c.call is not None}
        rewritten.update(_dropped_calls(candidates))
        is_rewritten = _member(rewritten)
        places: list[Candidate | tuple[SourceFile, ast.expr]] = [
            c for c in candidates if c.rule in _PLACES_DATA and not c.enabled
        ]
        places.extend(computes)
        creates: list[_Created] = []
        if any(
            c.enabled and (c.effect == "default" or c.tj_name in _SETS_CURRENT_DEVICE)
            for c in candidates
        ):
            if creations is None:
                creations = _torch_creations(files)
            creates = [made for made in creations if id(made[1]) not in rewritten]
        dist_blocker = next((c for c in candidates if _is_dist(c) and not c.enabled), None)
        kept_setters = setters(candidates, owner)
        kept_readers = [
            c for c in candidates if not c.enabled and c.rule not in SETTERS
            and reads_current_device(c)
        ]  # fmt: skip
        for candidate in candidates:
            if candidate.enabled:
                reason = (
                    _ownership(candidate, owner, dist_blocker)
                    or _problem(candidate, is_rewritten, places, creates, dist_blocker)
                    or _current_device(candidate, kept_setters, kept_readers)
                )
                if reason:
                    candidate.disable(reason)
                    changed = True
        changed = changed or order.check() or _compose_check(files, candidates)
        if not changed:
            changed = _unseen_callers(candidates)  # the last word: no other reason holds
        if not changed:
            break
    candidates.extend(order.findings())


def _library_owner(files: list[SourceFile], candidates: list[Candidate]) -> _Owner | None:
    """The first import of a library that owns torch's process group and devices
    (``import deepspeed``, ``from megatron.core import mpu``), or the first use of one
    that the catalog names (``library-launcher``: ``transformers.Trainer``...)."""
    for file in files:
        found = [
            (node.lineno, module)
            for node in ast.walk(file.tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for module in _imported_modules(node)
            if module.partition(".")[0] in _OWNER_LIBRARIES
        ]
        if found:
            line, module = min(found)
            return file, line, f"import {module}"
    launcher = next((c for c in candidates if c.rule == "library-launcher"), None)
    if launcher is not None:
        return launcher.file, launcher.position[0], launcher.file.text(launcher.node)
    return None


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute modules an import statement imports from."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module] if node.module and not node.level else []


def _ownership(candidate: Candidate, library: _Owner | None, dist: Candidate | None) -> str:
    """Why a call on torch's runtime state or process group stays torch's: a library
    built on torch owns them in this program (both), or torch.distributed does, a call of
    it staying torch's (the runtime state; the process group's own calls say why
    themselves: ``_problem``). Code built on torch reads the call's answer or effect
    (NCCL and the library read torch's current device and process group), and the
    ``tj`` call answers for JAX, starting JAX's backends (under a launcher, joining a JAX
    job) in a process that torch initialises."""
    owner = library
    if owner is None and dist is not None and candidate.effect == "runtime":
        owner = dist.file, dist.position[0], dist.file.text(dist.node)
    if owner is None or candidate.effect not in ("runtime", "dist"):
        return ""
    file, line, what = owner
    return (
        f"torch's process group and devices are owned by {what.splitlines()[0][:80]} "
        f"({file.path}:{line}): code built on torch reads this call's answer or effect, and "
        "the tj call would answer for JAX, starting it (under a launcher, joining a JAX "
        "job) in a process that torch initialises; keep torch's call while that code stays"
    )


def _current_device(candidate: Candidate, kept: list[Setter], readers: list[Candidate]) -> str:
    """Why a rewrite would resolve through tj's current device where torch's decides
    (``_current_device``): a line that reads the current device, reached by a setting of
    torch's that stays torch's; or a setter whose setting a line kept as torch's reads."""
    if candidate.rule in SETTERS:
        setting = setter_of(candidate)
        reader = next((r for r in readers if setting.reaches(r.file, r.node)), None)
        if reader is None:
            return ""
        at = _at(candidate, reader.file, reader.position[0])
        name = candidate.tj_name or "the tj call"
        return (
            f"torch's current device is read by a line kept as torch's ({at}: {reader.rule}): "
            f"{name} would set tj's, not torch's (keep this call, and add {name}(...) beside "
            "it for JAX)"
        )
    if not reads_current_device(candidate):
        return ""
    setter = next((s for s in kept if s.reaches(candidate.file, candidate.node)), None)
    if setter is None:
        return ""
    what = (
        "where this goes" if candidate.effect in ("value", "default") else "what this answers for"
    )
    return (
        f"torch's current device ({setter.cited(candidate.file)}, kept as torch's) decides "
        f"{what}; tj's would be cuda:0 (tj keeps a current device of its own): write the "
        "device's index, or port that line first"
    )


def _dropped_calls(candidates: list[Candidate]) -> set[int]:
    """The calls an enabled rewrite removes with what it replaces (``torch.load(p,
    map_location=device)`` in ``model.load_state_dict(torch.load(...))``, which becomes
    ``tj.load_state(model, p)``): a value handed to them is not used any more, so it
    holds no other rewrite back (else a second ``--diff`` would rewrite it)."""
    dropped: set[int] = set()
    for candidate in candidates:
        rewrite, call = candidate.rewrite, candidate.call
        if not (candidate.enabled and rewrite is not None and isinstance(call, ast.Call)):
            continue
        kept = rewrite.holes()
        for node in ast.walk(call):
            if node is call or not isinstance(node, ast.Call):
                continue
            start, end = candidate.file.span(node)
            inside = rewrite.start <= start and end <= rewrite.end
            if inside and not any(low <= start and end <= high for low, high in kept):
                dropped.add(id(node))
    return dropped


def _member(ids: set[int]) -> Callable[[ast.AST], bool]:
    return lambda node: id(node) in ids


def _problem(
    candidate: Candidate,
    is_rewritten: Callable[[ast.AST], bool],
    places: list[Candidate | tuple[SourceFile, ast.expr]],
    creates: list[_Created],
    dist_blocker: Candidate | None,
) -> str:
    if candidate.effect == "value" and candidate.subject is not None:
        flow = candidate.file.flow
        reason, read_by_jax = flow.escape(candidate.subject, candidate.policy, is_rewritten)
        if reason:
            new = "a tj.device" if candidate.policy == "device" else "JAX arrays"
            return f"it would become {new}, and {reason}"
        if candidate.policy == "array" and not read_by_jax and not _already_jax(candidate):
            return (
                "no JAX code reads the result, so it stays torch's (a JAX array would only "
                "change its dtype rules: 64-bit data becomes 32-bit)"
            )
    shared = _shared_with(candidate)
    if shared:
        return shared
    if candidate.effect == "runtime":
        exported = _exported_name(candidate)
        importers = candidate.file.flow.importers
        # With the importers scanned, follow the answer into them (the program's torch
        # placements hold it back below); without them, any may hand it to torch.
        followed = (
            None
            if exported is None or importers is None
            else (importers(exported, "device", is_rewritten, False))
        )
        if exported is not None and followed is None:
            return (
                f"its answer is kept in {exported}, which this module exports (__all__): "
                "the modules that import it may hand it to torch, for which torch's answer "
                "holds"
            )
        if followed is not None and followed[0]:
            return (
                f"its answer is kept in {exported}, which this module exports, read in "
                f"{followed[0]}: torch's answer holds there"
            )
    if candidate.effect in ("runtime", "default") and places:
        first = next((p for p in places if _file_of(p) is candidate.file), places[0])
        if isinstance(first, Candidate):
            return (
                f"torch still places data on devices ({first.file.path}:{first.position[0]}: "
                f"{first.rule}); this call changes torch's runtime state, so port that first"
            )
        file, node = first
        return (
            f"torch still computes ({file.path}:{node.lineno}: {ast.unparse(node)}), on "
            "devices whose work and memory this call waits for, measures or changes in "
            "torch; port that code first"
        )
    if candidate.tj_name in _SETS_CURRENT_DEVICE and creates:
        file, call = _own_first(candidate, creates)
        return (
            f"torch still creates tensors or modules ({_at(candidate, file, call.lineno)}: "
            f"{ast.unparse(call.func)}), which go to torch's current device: "
            f"{candidate.tj_name} would not set it (keep this call, and add "
            f"{candidate.tj_name}(...) beside it for JAX)"
        )
    if candidate.effect == "default":
        if creates:
            file, call = _own_first(candidate, creates)
            return (
                f"torch still creates tensors ({_at(candidate, file, call.lineno)}: "
                f"{ast.unparse(call.func)}), and they would stop following it"
            )
        if candidate.block is not None:
            unknown = _unknown_call(candidate.file, candidate.block)
            if unknown is not None:
                return (
                    f"line {unknown.lineno}: {ast.unparse(unknown.func)}(...) may create torch "
                    "tensors, which would stop following the block's device"
                )
        else:
            unseen = _unseen_code_call(candidate.file)
            if unseen is not None:
                return (
                    f"line {unseen.lineno}: {ast.unparse(unseen.func)}(...) runs code the "
                    "scanner does not follow, which may create torch tensors: they would "
                    "stop following the default device"
                )
    if candidate.effect == "dist" and dist_blocker is not None and dist_blocker is not candidate:
        return (
            f"torch.distributed is still used ({dist_blocker.file.path}:"
            f"{dist_blocker.position[0]}: {dist_blocker.rule}): the process group stays torch's "
            "until every call is ported"
        )
    return ""


def _unseen_callers(candidates: list[Candidate]) -> bool:
    """Keep torch's runtime calls (a seed, a synchronize, the current device) in a module
    that only defines names and that no scanned module imports: its functions run in
    scripts not scanned with it, which may keep torch's runtime state (minGPT's
    ``set_seed`` seeding torch's CUDA generator for a trainer scanned apart). Whether
    anything was disabled."""
    changed = False
    for candidate in candidates:
        project = candidate.file.project
        if (
            candidate.enabled
            and candidate.effect == "runtime"
            and candidate.file.flow.imported_only
            and not (project is not None and project.is_imported(candidate.file))
        ):
            candidate.disable(
                "this module only defines names: its functions run in the scripts that "
                "import it, which were not scanned with it and may keep torch's runtime "
                "state (its seeds, its current device); scan them with it (name them all, "
                "or scan their folder)"
            )
            changed = True
    return changed


def _shared_with(candidate: Candidate) -> str:
    """Why the new value may not share memory as the old one did: ``torch.from_numpy(a)``
    always shares ``a``, and ``x.cpu()``/``x.to(d)`` return ``x`` itself when it is there
    already; ``tj.to_jax``/``tj.to_device`` share only a 64-byte-aligned buffer, so a
    later write into ``a`` or ``x`` would show through one and not the other."""
    call = candidate.call
    if not isinstance(call, ast.Call):
        return ""
    flow = candidate.file.flow
    if candidate.tj_name == "tj.to_jax" and call.args:
        written = flow.writes.written_after(call.args[0], call, unknown_holders=True)
        if written:
            return (
                f"{written}: torch.from_numpy shares the array's memory, tj.to_jax only "
                "when it is 64-byte aligned (JAX arrays must not change)"
            )
    if (
        candidate.tj_name == "tj.to_device"
        and isinstance(call.func, ast.Attribute)
        and not _already_jax(candidate)
    ):
        rebound = _rebinds(flow.names.statement(call), flow.writes.moved_name(call.func.value))
        written = flow.writes.written_after(
            call.func.value, call, unknown_holders=False, rebound=rebound
        )
        if written:
            return (
                f"{written}: {ast.unparse(call)} is the tensor itself when it is there "
                "already, tj.to_device shares it only when it is 64-byte aligned (JAX arrays "
                "must not change)"
            )
    return ""


def _rebinds(statement: ast.stmt | None, receiver: ast.expr | None) -> bool:
    """Whether ``statement`` assigns the receiver's own name (``x = x.to(d)``, ``x, y =
    x.to(d), y.to(d)``): what the name reads afterwards is the result, not the tensor
    moved, so no later write through it reaches that tensor (through another name given
    it before, ``b = x``, one may)."""
    if not (isinstance(receiver, ast.Name) and isinstance(statement, ast.Assign)):
        return False
    return any(
        isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == receiver.id
        for target in statement.targets
        for node in ast.walk(target)
    )


def _already_jax(candidate: Candidate) -> bool:
    """The call moves a JAX array, which has no ``.to``/``.cpu``/``.cuda`` of its own."""
    call = candidate.call
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    return candidate.file.values.kinds(call.func.value) <= {JAX_ARRAY, NNX_MODULE}


def _is_dist(candidate: Candidate) -> bool:
    if candidate.rule.startswith("dist-") and candidate.rule not in (
        "dist-env",
        "dist-local-rank",
        "dist-launch",
        "dist-elastic-record",  # writes a failed worker's traceback; joins no group
    ):
        return True
    return candidate.rule in ("sync-batchnorm", "ddp-module", "ddp-no-sync", "mp-spawn")


def _exported_name(candidate: Candidate) -> str | None:
    """The name of the file's ``__all__`` that the module-level statement holding the
    candidate's node assigns (``DEVICE = "cuda" if torch.cuda.is_available() else
    "cpu"``), if any."""
    names = candidate.file.names
    statement = names.statement(candidate.node)
    if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
        return None
    scope = names.scope_of.get(statement)
    if scope is None or scope.kind != "module":
        return None
    exported = all_names(candidate.file.tree)
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and node.id in exported:
                return node.id
    return None


def _torch_computes(files: list[SourceFile]) -> list[tuple[SourceFile, ast.expr]]:
    """The first use of one of torch's autograd modes (``with torch.no_grad():``) in each
    file: torch computes there."""
    found: list[tuple[SourceFile, ast.expr]] = []
    for file in files:
        uses = [
            node
            for node in ast.walk(file.tree)
            if isinstance(node, (ast.Attribute, ast.Name))
            and isinstance(node.ctx, ast.Load)
            and file.qualname(node) in _TORCH_COMPUTES
        ]
        if uses:
            found.append((file, min(uses, key=lambda n: (n.lineno, n.col_offset))))
    return found


def _file_of(place: Candidate | tuple[SourceFile, ast.expr]) -> SourceFile:
    return place.file if isinstance(place, Candidate) else place[0]


def _own_first(candidate: Candidate, creates: list[_Created]) -> _Created:
    """The first creation in the candidate's own file, else the first in another."""
    return next((made for made in creates if made[0] is candidate.file), creates[0])


def _at(candidate: Candidate, file: SourceFile, line: int) -> str:
    """A line cited in ``candidate``'s reason: ``line N`` in its own file, else the file
    named (``utils.py:N``)."""
    return f"line {line}" if file is candidate.file else f"{file.path}:{line}"


def _torch_creations(files: list[SourceFile]) -> list[_Created]:
    """Calls that create torch tensors or modules, with their file, the files in the
    order given and each file's in line order (one walk of each file)."""
    found: list[_Created] = []
    for file in files:
        own: list[ast.Call] = []
        for node in ast.walk(file.tree):
            if isinstance(node, ast.Call):
                name = file.qualname(node.func)
                if name in _TORCH_CREATES or (
                    name is not None
                    and name.startswith("torch.nn.")
                    and name.split(".")[-1][:1].isupper()
                ):
                    own.append(node)
                elif isinstance(node.func, ast.Name) and "torch-module" in file.values.kinds(node):
                    own.append(node)
        found.extend((file, call) for call in sorted(own, key=lambda n: (n.lineno, n.col_offset)))
    return found


def _unknown_call(file: SourceFile, block: list[ast.stmt]) -> ast.Call | None:
    """The first call in ``block`` that may create torch tensors."""
    for statement in block:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call):
                continue
            name = file.qualname(node.func)
            if name is not None and name.startswith((TJ, "jax", "flax", "optax", "numpy", "math")):
                continue
            if isinstance(node.func, ast.Name) and file.names.is_builtin(node.func):
                continue
            if name is None and isinstance(node.func, ast.Attribute):
                if file.values.kinds(node.func.value) <= {JAX_ARRAY, NNX_MODULE, NUMBER, PATH}:
                    continue
            return node
    return None


def _unseen_code_call(file: SourceFile) -> ast.Call | None:
    """The first call in ``file`` of a function imported from a module the scanner cannot
    see (``from train import train``; not the standard library's, torch's, NumPy's or
    JAX's): once torch's default device is set, code there may create torch tensors.
    Asked per candidate and planning pass, worked out once per file."""
    if file not in _UNSEEN_CALLS:
        _UNSEEN_CALLS[file] = _first_unseen_code_call(file)
    return _UNSEEN_CALLS[file]


# Each file's answer to _unseen_code_call, for as long as the file is scanned.
_UNSEEN_CALLS: weakref.WeakKeyDictionary[SourceFile, ast.Call | None] = weakref.WeakKeyDictionary()


def _first_unseen_code_call(file: SourceFile) -> ast.Call | None:
    found: list[ast.Call] = []
    for node in ast.walk(file.tree):
        if not isinstance(node, ast.Call):
            continue
        root = node.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or file.names.origin(root) is None:
            continue  # not an imported name
        name = file.qualname(node.func)
        if name is None or name.partition(".")[0] in sys.stdlib_module_names:
            continue
        if file.project is not None and file.project.kinds(file, node.func, "call") is not None:
            continue  # the project's own code: its torch creations are among the files'
        if not prefixed(name, _SEEN_LIBRARIES):
            found.append(node)
    return min(found, key=lambda n: (n.lineno, n.col_offset)) if found else None


def _compose_check(files: list[SourceFile], candidates: list[Candidate]) -> bool:
    """Disable rewrites that do not compose, or leave a file that does not parse."""
    changed = False
    for file in files:
        own = [c for c in candidates if c.file is file and c.enabled]
        if not own:
            continue
        by_rewrite: dict[Rewrite, list[Candidate]] = {}
        for c in own:
            assert c.rewrite is not None
            by_rewrite.setdefault(c.rewrite, []).append(c)
        data, rejected = compose(file.data, list(by_rewrite))
        for rewrite in rejected:
            for c in by_rewrite[rewrite]:
                c.disable("it overlaps another rewrite that leaves no room for it")
            changed = True
        if rejected or _parses(data):
            continue
        broken = [r for r in by_rewrite if not _parses(compose(file.data, [r])[0])]
        for rewrite in broken or list(by_rewrite):
            for c in by_rewrite[rewrite]:
                c.disable("the rewritten line would not parse; please report this")
        changed = True
    return changed


def _parses(data: bytes) -> bool:
    try:
        ast.parse(with_tj_import(data.decode()))
    except SyntaxError:
        return False
    return True
