"""The walk over one file: which section's recogniser each node goes to."""

from __future__ import annotations

import ast
import re

from .. import catalog
from .._tables import ADVICE, NEW_FACTORIES, wildcard
from .._values import FOREIGN, UNKNOWN, last_name
from . import (
    checkpoints,
    colossalai,
    creation,
    ddp_semantics,
    device_literals,
    device_strings,
    device_types,
    devices,
    distributed,
    dlpack,
    environment,
    feeding,
    helpers,
    launch_settings,
    launcher_lists,
    libraries,
    library_functions,
    library_internals,
    library_methods,
    module_methods,
    names,
    optimizer_inputs,
    optimizers,
    parameter_defaults,
    placement,
    plugins,
    project_aliases,
    settings,
    start_contexts,
    tensor_types,
    torch_objects,
    workers,
)
from .base import Recogniser

__all__ = ["Detector"]

# What the scanner knows a receiver is -> the advice row of its methods' calls.
_KIND_METHODS = {
    "grad-scaler": "grad-scaler",
    "cuda-event": "cuda-event-timing",
    "cuda-stream": "cuda-stream",
    "dist-sampler": "dist-sampler-global-batch",
    "generator": "generator-device",  # g.manual_seed(0) on g = torch.Generator()
    "lr-scheduler": "lr-scheduler",  # scheduler.step() on a torch.optim.lr_scheduler class
}
# A loss scaler made elsewhere (a parameter, self.grad_scaler, model.fp16_scaler), by its
# name and the methods only torch's GradScaler has among objects so named (a scikit-learn
# StandardScaler fits and transforms).
_SCALER = re.compile(r"(^|_)scaler$", re.IGNORECASE)
_SCALER_METHODS = frozenset(
    "scale unscale_ step update state_dict load_state_dict get_scale is_enabled "
    "_get_scale_async".split()
)
# A method of the project's own that applies FSDP (``task.prepare_fsdp(...)``).
_FSDP = re.compile(r"(^|_)fsdp($|_)", re.IGNORECASE)
# An autocast of the project's own: a helper that builds one (``get_autocast(...)``), or
# the name it is held in (``with autocast():``, ``with self.amp_autocast():``).
_AUTOCAST = re.compile(r"autocast", re.IGNORECASE)
# torch's autocast context managers, by the names they are imported as.
AUTOCASTS = frozenset(
    name for name in catalog.get("autocast").torch_api if name.endswith("autocast")
)
# torch.compile's keywords, which nn.Module.compile takes too (Keras' compile takes an
# optimizer and a loss).
_COMPILE_KEYWORDS = frozenset({"mode", "backend", "fullgraph", "dynamic", "options", "disable"})
# safetensors' load of a file's tensors into a model (torch's load_state_dict underneath).
_SAFETENSORS_INTO_A_MODEL = frozenset({"safetensors.torch.load_model"})
# A torch.Generator's methods that save or restore its state.
_GENERATOR_STATE = frozenset(
    {"get_state", "set_state", "graphsafe_get_state", "graphsafe_set_state"}
)
# Versions of torch itself, not of its GPU runtime.
_NOT_RUNTIME = frozenset({"torch.version.__version__", "torch.version.git_version"})


class Detector(Recogniser):
    """Walks one file and proposes a candidate per idiom."""

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    # -- names ----------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        parent = self.parent(node)
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.qualified(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parent = self.parent(node)
        maximal = not (isinstance(parent, ast.Attribute) and parent.value is node)
        if maximal and self.qualified(node):
            return
        if maximal and self._class_member(node) and self.qualified(node.value):
            return  # StateDictType.SHARDED_STATE_DICT: a member of a catalog's class
        distributed.held_no_sync(self, node)
        distributed.mesh_names_read(self, node)
        module_methods.compiled_original(self, node)
        library_functions.library_member(self, node)
        if (
            libraries.member(self, node)
            or placement.device_attribute(self, node)
            or device_types.compared_type(self, node)
            or library_internals.scaler_internals(self, node)
            or library_internals.parallelism_flag(self, node)
            or distributed.wrapper_attribute(self, node)
            or settings.launcher_setting(self, node)
        ):
            return
        self.generic_visit(node)

    def qualified(self, node: ast.expr) -> bool:
        """Report a torch name the scanner knows; ``True`` if one was reported."""
        name = self.qualname(node)
        if name is None or id(node) in self.reported or name in _NOT_RUNTIME:
            return False
        parent = self.parent(node)
        call = parent if isinstance(parent, ast.Call) and parent.func is node else None
        if call is None and isinstance(node, ast.Name) and _tests_presence(node, parent):
            return False  # `if xm is not None:` tests a guarded import, uses nothing
        if call is not None and self.custom_call(call, name):
            return True
        if call is not None and (
            optimizers.constructor(self, call, name)
            or optimizers.scheduler(self, call, name)
            or optimizers.library_schedule(self, call)
        ):
            return True
        if dlpack.exchange(self, node, name, call):
            return True
        if names.rename(self, node, name, call) or names.advice(self, node, name, call):
            return True
        if names.private(self, node, name, call):
            return True
        if placement.unbound_move(self, node, name, call):
            return True
        if call is not None and any(k.arg == "device" for k in call.keywords):
            if name.startswith("torch.") and not name.startswith(
                ("torch.cuda.", "torch.distributed.")
            ):
                creation.factory(self, call, name)
                return True
        covering = wildcard(name)
        if covering is not None and not self.inside_reported_call(node):
            fitting = None
            if covering.id == "dist-other":
                fitting = distributed.collective_advice(self, call, name)
            elif covering.id == "library-collective":  # deepspeed.comm.*
                fitting = libraries.collective_advice(self, name.rsplit(".", 1)[-1], call)
            elif call is None and _device_module_fallback(self, node):
                fitting = _DEVICE_MODULE
            self.add(call or node, covering.id, fitting)
            return True
        return False

    def _class_member(self, node: ast.Attribute) -> bool:
        """``node`` reads a member of a class an advice row names (an enum's value:
        ``StateDictType.SHARDED_STATE_DICT``)."""
        owner = self.qualname(node.value)
        return (
            owner is not None
            and owner in ADVICE
            and owner.rsplit(".", 1)[-1][:1].isupper()
            and not isinstance(self.parent(node), ast.Call)
            and not self.inside_reported_call(node)  # FSDP(..., ShardingStrategy.FULL_SHARD)
        )

    def inside_reported_call(self, node: ast.AST) -> bool:
        return names.inside_reported_call(self, node)

    def custom_call(self, call: ast.Call, name: str) -> bool:
        """The handlers of ``custom`` rows for calls of qualified names."""
        if name == "torch.device":
            devices.device_call(self, call)
        elif name == "torch.load":
            checkpoints.load_call(self, call)
        elif name in environment.ENVIRONMENT_READERS:
            return environment.variable_read(self, call, call.args[0] if call.args else None)
        elif name == "torch.save":
            return checkpoints.save_call(self, call)
        elif name == "torch.jit.load":
            self.add(call, "torch-load", checkpoints.TORCHSCRIPT_LOADED)
        elif name in _SAFETENSORS_INTO_A_MODEL and len(call.args) >= 2:
            model, path = call.args[:2]
            self.add(  # safetensors' load_model(model, path): a file's tensors into a model
                call,
                "load-safetensors",
                f"tj.load_state({self.text(model)}, {self.text(path)})  # strict=True, as torch's",
            )
        else:
            return False
        return True

    # -- calls ------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        device_literals.profiler_sorted(self, node)
        feeding.pin_memory_keywords(self, node)
        feeding.workers(self, node)
        libraries.device_keywords(self, node)
        libraries.library_call(self, node)
        settings.launcher_keywords(self, node)
        launch_settings.option_declared(self, node)
        launch_settings.training_arguments_parsed(self, node)
        launch_settings.lightning_checkpoint(self, node)
        device_types.module_by_name(self, node)
        names.read_by_getattr(self, node)
        device_types.module_present(self, node)
        device_types.mapped_constructor(self, node)
        device_types.index_stripped(self, node)
        library_internals.zero3_probe(self, node)
        library_internals.mesh_built(self, node)
        library_internals.plugin_built(self, node)
        workers.ray_gpu_request(self, node)
        workers.ray_devices(self, node)
        workers.deepspeed_engine_call(self, node)
        ddp_semantics.batch_statistics(self, node)
        ddp_semantics.summed_loss(self, node)
        settings.placement_value(self, node)
        libraries.placement_keys(self, node)
        checkpoints.forwarded_map_location(self, node)
        environment.variables_updated(self, node)
        environment.project_reader(self, node)
        environment.launcher_argument(self, node)
        device_strings.string_test(self, node)
        device_strings.split_name(self, node)
        device_strings.keyed_by_type(self, node)
        device_strings.getattr_default(self, node)
        placement.move_by_name(self, node)
        library_methods.pretrained_saved(self, node)
        library_methods.unique_member(self, node)
        module_methods.fsdp_clip_grad_norm(self, node)
        module_methods.legacy_new(self, node)
        module_methods.legacy_type(self, node)
        distributed.wrapped_keys(self, node)
        module_methods.compiled_original(self, node)
        devices.imported_module_call(self, node)
        torch_objects.work_waited(self, node)
        torch_objects.profiler_report(self, node)
        torch_objects.model_shared(self, node)
        torch_objects.sampler_epoch(self, node)
        project_aliases.ddp_by_alias(self, node)
        project_aliases.torch_call_by_name(self, node)
        project_aliases.held_module_call(self, node)
        start_contexts.start_context(self, node)
        tensor_types.legacy_type_tested(self, node)
        library_functions.library_function(self, node)
        library_functions.library_keywords(self, node)
        library_functions.library_member(self, node)
        library_functions.trainer_internal(self, node)
        library_functions.engine_checkpoint(self, node)
        library_functions.fairseq_state_loaded(self, node)
        colossalai.plugin_options(self, node)
        colossalai.plugin_loader(self, node)
        colossalai.boosted_unwrapped(self, node)
        func = node.func
        if isinstance(func, ast.Attribute) and self.qualname(func) is None:
            self.method_call(node, func)
        elif isinstance(func, ast.Name) and self.qualname(func) is None:
            names.called_through_a_name(self, node)
            distributed.wrapper_subclass_made(self, node)
            distributed.held_no_sync(self, node)
        devices.indexed_device_string(self, node)
        devices.project_device_class(self, node)
        devices.device_class_tested(self, node)
        self.generic_visit(node)
        launcher_lists.read_through_parameter(self, node)
        optimizer_inputs.optax_rule(self, node)
        helpers.helper_device_keywords(self, node)  # after the call's own rows
        helpers.project_helper_call(self, node)

    def method_call(self, call: ast.Call, method: ast.Attribute) -> None:
        """``x.method(...)`` where ``x`` is no imported name: by the method's name, else by
        what the scanner knows ``x`` is."""
        receiver = method.value
        if id(call) in self.reported:
            return  # part of another finding (torch.load's map_location callable)
        if self.file.values.kinds(receiver) == {FOREIGN}:
            return  # paddle's x.cuda(), tf's x.cpu(): another framework's own methods
        if devices.device_module_call(self, call, method):
            return
        name = method.attr
        bare = not call.args and not call.keywords
        where = self.file.method_position(method)
        scaler = self.file.values.kinds(receiver) if name in _SCALER_METHODS else frozenset()
        if "grad-scaler" in scaler or (
            UNKNOWN in scaler and _SCALER.search(last_name(receiver) or "")
        ):
            self.add(call, "grad-scaler", position=where)  # a scaler made elsewhere
        elif name == "to" and not bare:
            placement.to_call(self, call, method, where)
        elif name == "cuda":
            placement.cuda_call(self, call, method, where)
        elif name == "cpu" and bare:
            placement.move(self, call, method, where, "tensor-cpu", '"cpu"', ())
        elif name == "numpy" and any(k.arg == "force" for k in call.keywords):
            self.add(  # x.numpy(force=True): a copy to the host, from any device
                call,
                "tensor-cpu",
                f"np.asarray({self.text(receiver)})  # a NumPy copy on the host",
                position=where,
            )
        elif name == "compile" and _compiles_a_module(call):
            self.add(call, "torch-compile", position=where)  # block.compile(**options)
        elif name == "pin_memory" and bare:
            feeding.pin_memory_call(self, call, method, where)
        elif name in NEW_FACTORIES:
            self.add(call, "tensor-new-factory", position=where)
        elif name == "is_pinned" and not call.args:
            feeding.pinned_query(self, call, receiver, where)
        elif name == "get_device" and not call.args:
            placement.get_device(self, call, receiver, where)
        elif name == "record_stream":
            self.add(call, "cuda-stream", position=where)
        elif name == "no_sync" and not call.args:
            self.add(call, "ddp-no-sync", position=where)
        elif name == "register_comm_hook":  # DDP's and FSDP's gradient reduction
            self.add(call, "dist-ddp-gradient", distributed.COMM_HOOK_ADVICE, position=where)
        elif name == "set_requires_gradient_sync":  # FSDP2's FSDPModule: no_sync's twin
            self.add(call, "ddp-no-sync", position=where)
        elif _FSDP.search(name) and not distributed.defined_here(self, method):
            self.add(call, "dist-fsdp", position=where)  # task.prepare_fsdp(model, ...)
        elif optimizers.state_call(self, call, method):
            pass
        elif optimizers.scheduler_by_name(self, call, method):
            pass
        elif name == "load_state_dict" and self.file.values.kinds(receiver) == {"lr-scheduler"}:
            self.add(
                call,
                "lr-scheduler",
                f"{self.text(call)}  {optimizers.SCHEDULE_RESTORED}",
                position=where,
            )
        elif name == "load_state_dict":
            checkpoints.load_state_call(self, call, method, where)
        elif name == "state_dict" and checkpoints.state_in_a_saved_dict(self, call, method):
            pass
        elif name == "state_dict" and checkpoints.fsdp_state(self, call, where):
            pass
        elif name == "to_empty":
            self.add(call, "module-to-empty", position=where)
        elif name in distributed.MESH_METHODS and distributed.mesh_query(self, call, method):
            pass
        elif name == "parameters" and bare:
            placement.parameters_call(self, call, where)
        elif name == "full_tensor" and not call.args:
            self.add(call, "dtensor-full-tensor", position=where)
        elif not isinstance(receiver, ast.Call):  # torch.Generator().manual_seed(0): one finding
            kinds = self.file.values.kinds(receiver)
            rule = next((rule for kind, rule in _KIND_METHODS.items() if kind in kinds), None)
            if rule == "lr-scheduler" and len(kinds) > 1:
                rule = None  # rebound by a library (accelerator.prepare): its scheduler now
            if rule == "generator-device" and name in _GENERATOR_STATE:
                rule = "rng-state"  # g.get_state(): the generator's state saved or restored
            if rule is not None:
                seeded = rule == "generator-device" and name == "manual_seed"
                fitting = names.generator_seed_advice(self, call) if seeded else None
                candidate = self.add(call, rule, fitting, position=where)
                if rule == "generator-device":
                    candidate.reason = feeding.data_generator(self, receiver)

    # -- statements and expressions of other sections ---------------------------------------
    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and self.qualname(call.func) == "torch.device":
                devices.default_device_block(self, node, call)
                for argument in [*call.args, *(k.value for k in call.keywords)]:
                    self.visit(argument)
            else:
                kinds = self.file.values.kinds(call)
                if "autocast" in kinds and not isinstance(call, ast.Call):
                    self.add(call, "autocast")  # with ctx:, ctx = torch.autocast(...) or ...
                elif isinstance(call, ast.Call) and self._names_autocast(call.func):
                    self.add(call, "autocast")  # scope = autocast if amp else nullcontext
                elif (
                    isinstance(call, ast.Call)
                    and not (self.qualname(call.func) or "").startswith("torch")
                    and _AUTOCAST.search(last_name(call.func) or "")
                ):
                    self.add(call, "autocast")  # with autocast(): a helper's, handed in
                elif isinstance(call, (ast.Name, ast.Attribute)) and (
                    self._holds_autocast(call) or _AUTOCAST.search(last_name(call) or "")
                ):  # with self.ctx:, ctx = get_autocast(...); with autocast: (a dict's choice)
                    self.add(call, "autocast")
                elif isinstance(call, (ast.Name, ast.Attribute)) and (
                    "torch-device" in kinds or device_strings.holds_device_name(call)
                ):  # with self._device: a device held in a variable
                    self.add(call, "default-device-context", f"with tj.device({self.text(call)}):")
                self.visit(item)
        for statement in node.body:
            self.visit(statement)

    def _holds_autocast(self, node: ast.Name | ast.Attribute) -> bool:
        """``node`` was assigned a project helper's autocast (``self.training_ctx =
        TorchAutocast(device_type=...)``)."""
        if isinstance(node, ast.Attribute):
            values = self.file.values.stored_attributes(node)
        else:
            values = [
                b.value
                for b in self.file.names.bindings(node)
                if b.kind == "assign" and b.element is None and b.value is not None
            ]
        return any(
            isinstance(value, ast.Call)
            and not (self.qualname(value.func) or "").startswith("torch")
            and _AUTOCAST.search(last_name(value.func) or "") is not None
            for value in values
        )

    def _names_autocast(self, func: ast.expr) -> bool:
        """``func`` is a name bound to torch's autocast itself (not to a call of it):
        ``precision_scope = autocast if opt.precision == "autocast" else nullcontext``."""
        if not isinstance(func, ast.Name):
            return False
        for binding in self.file.names.bindings(func):
            if binding.kind != "assign" or binding.value is None or binding.element is not None:
                continue
            for part in ast.walk(binding.value):
                if isinstance(part, (ast.Name, ast.Attribute)) and self.qualname(part) in AUTOCASTS:
                    return True
        return False

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.qualname(node.value) == "os.environ" and environment.variable_read(
            self, node, node.slice
        ):
            return
        launcher_lists.read_through_parameter(self, node)
        device_strings.keyed_by_type(self, node)
        settings.launcher_setting(self, node)
        device_types.index_sliced(self, node)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        plugins.plugin_imported(self, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        plugins.plugin_imported(self, node)

    def visit_Compare(self, node: ast.Compare) -> None:
        libraries.device_map_test(self, node)
        launch_settings.strategy_named(self, node)
        library_methods.engine_named(self, node)
        if not environment.variable_check(self, node):
            device_strings.string_test(self, node)
            self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        device_strings.name_assignment(self, node)
        value = node.value
        if (
            isinstance(value, ast.Call)
            and not (self.qualname(value.func) or "").startswith("torch")
            and _AUTOCAST.search(last_name(value.func) or "")
            and not isinstance(self.parent(node), ast.withitem)
        ):
            self.add(value, "autocast")  # autocast = get_autocast(args.precision, ...)
        libraries.device_map_choice(self, node)
        libraries.placement_keys(self, node)
        helpers.project_launcher(self, node)
        environment.variable_held(self, node)
        distributed.device_keys_spread(self, node)
        settings.placement_value(self, node)
        settings.model_flags(self, node)
        launch_settings.setting_written(self, node)
        placement.parameters_counted(self, node)
        library_internals.ddp_ignored(self, node)
        library_internals.scaler_handed_over(self, node)
        optimizer_inputs.parameters_gathered(self, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        settings.placement_value(self, node)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        environment.variable_returned(self, node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        settings.class_named(self, node)
        if isinstance(node.value, str):
            device_literals.noted(self, node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        device_strings.index_appended(self, node)
        placement.parameters_counted(self, node)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        device_strings.name_choice(self, node)
        self.generic_visit(node)

    def visit_Tuple(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        environment.variable_names(self, node)
        launcher_lists.names_by_line(self, node)
        device_strings.device_names_listed(self, node)
        self.generic_visit(node)

    visit_List = visit_Tuple
    visit_Set = visit_Tuple

    # -- annotations are types, not code that runs -----------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        device_strings.default_names(self, node.args)
        parameter_defaults.map_location_default(self, node.args)
        libraries.placement_defaults(self, node)
        for child in [*node.decorator_list, node.args, *node.body]:
            self.visit(child)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        devices.default_device_mode(self, node)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        for child in (node.target, node.value):
            if child is not None:
                self.visit(child)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        devices.indexed_device_string(self, node)
        device_strings.formatted_name(self, node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        devices.indexed_device_string(self, node)
        launch_settings.nodes_times_devices(self, node)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        workers.ray_gpu_bundle(self, node)
        feeding.pin_memory_keys(self, node)
        libraries.placement_keys(self, node)
        distributed.device_keys_spread(self, node)
        if not _updates_environment(self, node):  # os.environ.update({...}) reports its keys
            environment.variable_names(self, node)
        self.generic_visit(node)


# getattr(torch, device_type, torch.cuda): the device module, its fallback named.
_DEVICE_MODULE = (
    "device_module = tj.cuda  # the device module: its memory and synchronize calls answer "
    "for JAX's accelerator"
)


def _device_module_fallback(r: Recogniser, node: ast.expr) -> bool:
    """``node`` is the default of ``getattr(torch, name, node)``: a device module."""
    parent = r.parent(node)
    return (
        isinstance(parent, ast.Call)
        and r.file.values.builtin(parent.func) == "getattr"
        and len(parent.args) == 3
        and parent.args[2] is node
        and r.qualname(parent.args[0]) == "torch"
    )


def _updates_environment(r: Recogniser, node: ast.Dict) -> bool:
    parent = r.parent(node)
    return isinstance(parent, ast.Call) and r.qualname(parent.func) == "os.environ.update"


def _tests_presence(name: ast.Name, node: ast.AST | None) -> bool:
    """``x is None``, ``if x:``, ``not x``: ``node`` tests whether ``name`` is bound to
    something. ``autocast if amp else nullcontext`` uses ``autocast``: only the test of
    an ``if`` is a test."""
    if isinstance(node, ast.Compare):
        return all(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops) and all(
            isinstance(c, ast.Constant) and c.value is None for c in node.comparators
        )
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        return node.test is name
    return isinstance(node, ast.BoolOp) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
    )


def _compiles_a_module(call: ast.Call) -> bool:
    """``block.compile()``, ``model.compile(mode="max-autotune")``,
    ``block.compile(**options)``: nn.Module.compile, by torch.compile's keywords."""
    return (
        not call.args
        and all(k.arg is None or k.arg in _COMPILE_KEYWORDS for k in call.keywords)
        and bool(call.keywords)
    )
