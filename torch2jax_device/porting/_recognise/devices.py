"""The "Devices" and "Default device" sections: ``torch.device(...)``, strings that name
an indexed device, ``with torch.device(...):``, and torch's device module chosen by name
(``device_module = getattr(torch, device_type)``)."""

from __future__ import annotations

import ast
import re

from .._names import Binding
from .._tables import ADVICE, RENAMES, wildcard
from .._values import last_name
from ..catalog.availability import ACCELERATOR_MODULES
from .base import Recogniser
from .device_strings import DEVICE_TYPES, names_a_device

__all__ = [
    "default_device_block",
    "default_device_mode",
    "device_call",
    "device_class_tested",
    "device_module_call",
    "imported_module_call",
    "indexed_device_string",
]

# A device module's calls that torch.accelerator answers for any device type: the row and
# the tj.accelerator call.
_ACCELERATOR = {
    "is_available": ("accelerator-is-available", "tj.accelerator.is_available"),
    "device_count": ("accelerator-device-count", "tj.accelerator.device_count"),
    "current_device": ("accelerator-current-index", "tj.accelerator.current_device_index"),
    "set_device": ("accelerator-set-device-index", "tj.accelerator.set_device_index"),
    "synchronize": ("cuda-synchronize", "tj.accelerator.synchronize"),
}
_DEVICE_MODULE = (
    "torch's device module chosen by name (getattr(torch, device_type)): JAX's answer is "
    "the accelerator it has; port it by hand"
)

# A project's helper that hands back torch's device module (verl's get_torch_device(),
# whose body is getattr(torch, get_device_name()) or torch.cuda), by its name; its calls
# are taken for the module's only when no torch.device has the method (a helper named so
# may return a device).
_PROJECT_DEVICE_MODULE = re.compile(r"(^|_)(torch_device|device_module)$")
_MODULE_ONLY = frozenset(
    {
        "empty_cache",
        "current_device",
        "set_device",
        "synchronize",
        "device_count",
        "is_available",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "reset_peak_memory_stats",
        "mem_get_info",
        "ipc_collect",
        "memory_stats",
        "manual_seed_all",
        "get_device_properties",
        "get_device_name",
        "get_device_capability",
    }
)
# torch's calls that hand back a device module by the device's type.
_MODULE_BY_TYPE = frozenset({"torch.get_device_module", "torch._utils._get_device_module"})

_DEEPSPEED_ACCELERATOR = (
    "DeepSpeed's accelerator (get_accelerator()) stands for torch's device module of the "
    "machine it runs on: JAX's answer is the accelerator it has; port it by hand"
)

_DEVICE_PREFIXES = tuple(f"{kind}:" for kind in sorted(DEVICE_TYPES))


def device_call(r: Recogniser, call: ast.Call) -> None:
    """``device-*`` rows: ``torch.device(...)`` becomes ``tj.device(...)`` (same grammar)."""
    first = call.args[0] if call.args else None
    if isinstance(first, ast.JoinedStr) or (first is not None and _formats_a_device(first)):
        r.reported.add(id(first))  # this finding covers the string: not again on its own
    strings = [first.body, first.orelse] if isinstance(first, ast.IfExp) else []
    if strings:
        r.reported.add(id(first))  # device-select covers the names it chooses from
    if first is None and any(k.arg == "type" for k in call.keywords):
        first = next(k.value for k in call.keywords if k.arg == "type")
    if strings and all(isinstance(s, ast.Constant) for s in strings):
        rule = "device-select"
    elif len(call.args) == 2 or any(k.arg == "index" for k in call.keywords):
        rule = "device-type-index"
    elif isinstance(first, ast.Constant) and isinstance(first.value, int):
        rule = "device-accelerator-index"
    elif isinstance(first, ast.Constant) and isinstance(first.value, str):
        rule = "device-indexed" if ":" in first.value else "device-type"
    elif isinstance(first, ast.JoinedStr) and _type_formatted(first):
        rule = "device-from-spec"  # f"{device_name}:{index}": the type known at run time
    elif isinstance(first, ast.JoinedStr) or (first is not None and _formats_a_device(first)):
        rule = "device-indexed"
    else:
        rule = "device-from-spec"
    r.add(
        call,
        rule,
        f"tj.device({r.arguments(call)})",
        rewrite=r.rename(call.func, "tj.device"),
        call=call,
        tj_name="tj.device",
        effect="value",
        subject=call,
        policy="device",
    )


# Packages whose ``Device`` classes are no alias of torch.device (their own devices).
_OWN_DEVICES = frozenset(
    "torch torch2jax_device jax jaxlib cupy numba tensorflow tvm pyopencl mlx wgpu".split()
)


def project_device_class(r: Recogniser, call: ast.Call) -> None:
    """``Device("cuda", index=0)`` where ``Device`` is a project's own name
    (``from fairseq2.device import Device``, fairseq2's alias of torch.device) called with
    a device's name: the ``device-*`` row of the same call of torch.device, as advice
    (the file cannot show that it is the alias)."""
    name = r.qualname(call.func)
    first = call.args[0] if call.args else None
    spec = first.value if isinstance(first, ast.Constant) else None
    if (
        name is None
        or name.rsplit(".", 1)[-1] != "Device"
        or name.split(".")[0] in _OWN_DEVICES
        or not (isinstance(spec, str) and names_a_device(spec))
        or id(call) in r.reported
    ):
        return
    if len(call.args) == 2 or any(k.arg == "index" for k in call.keywords):
        rule = "device-type-index"
    else:
        rule = "device-indexed" if ":" in spec else "device-type"
    found = r.add(call, rule, f"tj.device({r.arguments(call)})")
    found.reason = (
        f"{name} is the project's own: where it is torch.device (an alias), it becomes "
        "tj.device with the same arguments"
    )


def default_device_block(r: Recogniser, node: ast.With, call: ast.Call) -> None:
    """``default-device-context``: ``with torch.device(...):`` becomes ``with tj.device(...):``."""
    r.add(
        call,
        "default-device-context",
        f"tj.device({r.arguments(call)})",
        rewrite=r.rename(call.func, "tj.device"),
        call=call,
        tj_name="tj.device",
        effect="default",
        block=node.body,
    )


# torch's modes that see every call of a torch function (or of an operator) in a block:
# a subclass of the project's own that gives factories a device= is a default device.
_MODES = frozenset(
    {
        "torch.overrides.TorchFunctionMode",
        "torch.utils._python_dispatch.TorchDispatchMode",
        "torch.utils._device.DeviceContext",
    }
)


def default_device_mode(r: Recogniser, node: ast.ClassDef) -> None:
    """``default-device-context``: ``class EmptyInitOnDevice(TorchFunctionMode)`` whose
    ``__torch_function__`` fills in ``kwargs["device"]`` (lit-llama's): each ``with
    EmptyInitOnDevice(device):`` block is ``with tj.device(device):``."""
    if not any(r.qualname(base) in _MODES for base in node.bases):
        return
    if any(
        (isinstance(part, ast.Constant) and part.value == "device")
        or (isinstance(part, ast.Attribute) and part.attr == "device")
        for part in ast.walk(node)
    ):
        r.add(
            node,
            "default-device-context",
            "with tj.device(device):  # for each `with` of this mode",
            position=(node.lineno, node.col_offset + 1),
            reason=(
                f"{node.name} is a torch mode that gives torch's factories a device: "
                "JAX's default device for a block is tj.device"
            ),
        )


def device_class_tested(r: Recogniser, call: ast.Call) -> None:
    """``device-type``: ``isinstance(d, torch.device)`` (or a tuple holding it), which is
    ``False`` for a ``tj.device``: once the devices reaching it are torch2jax_device's,
    the test takes the other branch. Advice only: which devices reach it is the
    program's, and the tuple with both classes is right before and after the port."""
    if not (
        r.file.values.builtin(call.func) == "isinstance"
        and len(call.args) == 2
        and not call.keywords
    ):
        return
    classes = call.args[1]
    named = classes.elts if isinstance(classes, ast.Tuple) else [classes]
    torch_device = [c for c in named if r.qualname(c) == "torch.device"]
    if not torch_device:
        return
    for name in torch_device:
        r.reported.add(id(name))
    subject, kept = r.text(call.args[0]), [r.text(c) for c in named if c not in torch_device]
    both = ", ".join([*kept, r.text(torch_device[0]), "tj.device"])
    candidate = r.add(
        call,
        "device-type",
        f"isinstance({subject}, ({both}))  # a tj.device is no torch.device: "
        f"isinstance(d, torch.device) is False for one; test tj.device once every device "
        "reaching it is torch2jax_device's",
    )
    candidate.reason = (
        "which devices reach the test is the program's: isinstance(d, tj.device) is right "
        "only once each of them is a tj.device (a torch.device rewritten here is kept when "
        "it reaches this test)"
    )


def indexed_device_string(r: Recogniser, node: ast.AST) -> None:
    """``f"cuda:{i}"``, ``"cuda:{}".format(i)``, ``"cuda:%d" % i``, ``"cuda:" + str(i)``
    outside ``torch.device``."""
    if id(node) in r.reported:
        return
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        found = (
            len(node.values) == 2
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value in _DEVICE_PREFIXES
            and isinstance(node.values[1], ast.FormattedValue)
        )
    elif isinstance(node, ast.BinOp):
        left = node.left
        template = left.value if isinstance(left, ast.Constant) else None
        found = isinstance(template, str) and (
            (
                isinstance(node.op, ast.Mod)
                and template.startswith(_DEVICE_PREFIXES)
                and template.partition(":")[2] in ("%d", "%s", "%i")
            )
            or (isinstance(node.op, ast.Add) and template in _DEVICE_PREFIXES)
        )
    elif isinstance(node, ast.Call):
        func = node.func
        found = (
            isinstance(func, ast.Attribute)
            and func.attr == "format"
            and isinstance(func.value, ast.Constant)
            and isinstance(func.value.value, str)
            and func.value.value.startswith(_DEVICE_PREFIXES)
            and re.fullmatch(r"\{\w*\}", func.value.value.partition(":")[2]) is not None
        )
    else:
        found = False
    if found:
        r.add(node, "device-indexed", f"tj.device({r.text(node)})")


def _formats_a_device(node: ast.AST) -> bool:
    """``"cuda:{}".format(i)`` or ``"cuda:%d" % i``: an indexed device name."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        template = node.func.value if node.func.attr == "format" else None
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        template = node.left
    else:
        return False
    return (
        isinstance(template, ast.Constant)
        and isinstance(template.value, str)
        and template.value.startswith(_DEVICE_PREFIXES)
    )


def device_module_call(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``device_module.set_device(i)`` where ``device_module = getattr(torch, device_type)``
    (``torch.cuda``, ``torch.xpu``, ``torch.npu``... whichever the script runs on):
    ``tj.accelerator``'s call where there is one, else the ``torch.cuda`` row of the same
    name; ``True`` if reported. Advice only: which device type it names is known at run
    time alone."""
    receiver = method.value
    name = method.attr
    deepspeed = _is_deepspeed_accelerator(r, receiver)
    if not deepspeed and not _is_torch_device_module(r, receiver):
        return False
    if _through_a_helper(r, receiver) and name not in _MODULE_ONLY:
        return False  # get_torch_device().type: a helper's device, not the module
    where = r.file.method_position(method)
    if name in _ACCELERATOR:
        rule, tj_name = _ACCELERATOR[name]
        replacement = f"{tj_name}({r.arguments(call)})"
    elif name == "device_name" and deepspeed:  # "cuda:0" for get_accelerator().device_name(0)
        index = r.arguments(call)
        rule = "library-device"
        replacement = (
            f'tj.device(f"{{tj.accelerator.current_accelerator().type}}:{{{index}}}")'
            if index
            else "tj.accelerator.current_accelerator().type"
        )
    else:
        cuda = f"torch.cuda.{name}"
        row = RENAMES[cuda][0] if cuda in RENAMES else ADVICE.get(cuda) or wildcard(cuda)
        if row is None:
            return False
        rule = row.id
        replacement = f"{RENAMES[cuda][1]}({r.arguments(call)})" if cuda in RENAMES else row.tj
    r.add(
        call,
        rule,
        replacement,
        position=where,
        reason=_DEEPSPEED_ACCELERATOR if deepspeed else _DEVICE_MODULE,
    )
    return True


def imported_module_call(r: Recogniser, call: ast.Call) -> None:
    """``device_module.synchronize()`` where ``device_module`` is the project's, imported
    by its name (``from torchtitan.tools.utils import device_module``): a qualified name
    no row knows, so the walk's method calls do not see it."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and id(call) not in r.reported
        and _imported_device_module(r, func.value)
    ):
        device_module_call(r, call, func)


def _type_formatted(name: ast.JoinedStr) -> bool:
    """``f"{device_name}:{index}"``: the device's type is a value of its own, not written
    (``f"cuda:{rank}"`` names its type)."""
    return bool(name.values) and isinstance(name.values[0], ast.FormattedValue)


def _through_a_helper(r: Recogniser, node: ast.expr) -> bool:
    """``node`` is a call of a project's helper named for the device module (not torch's
    own ``torch.get_device_module``), or a name bound to one: its body is not at hand,
    its name alone tells."""
    if isinstance(node, ast.Name):
        return _imported_device_module(r, node) or any(
            b.kind == "assign" and isinstance(b.value, ast.Call) and _helper_call(r, b.value)
            for b in r.file.names.bindings(node)
        )
    return isinstance(node, ast.Call) and _helper_call(r, node)


def _bound_value(r: Recogniser, binding: Binding) -> ast.expr | None:
    """What ``binding`` assigns: its value, or for ``device_type, device_module =
    get_device_info()`` the element every ``return`` of the file's function hands back
    there (torchtitan's ``return device_type, device_module``); ``None`` if unknown."""
    if binding.kind != "assign":
        return None
    if binding.element is None:
        return binding.value
    call = binding.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    functions = [
        b.node
        for b in r.file.names.bindings(call.func)
        if isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    returned = [
        statement.value
        for function in functions
        for statement in ast.walk(function)
        if isinstance(statement, ast.Return)
        and r.file.names.enclosing(statement, ast.FunctionDef, ast.AsyncFunctionDef) is function
    ]
    elements = [
        value.elts[binding.element]
        for value in returned
        if isinstance(value, ast.Tuple) and len(value.elts) > binding.element
    ]
    if len(functions) != 1 or not elements or len(elements) != len(returned):
        return None
    return elements[0] if len(elements) == 1 else None


def _imported_device_module(r: Recogniser, node: ast.Name) -> bool:
    """``from torchtitan.tools.utils import device_module``: the project's device module,
    imported under its name (its body is in another file)."""
    bindings = r.file.names.bindings(node)
    return (
        bool(bindings)
        and all(b.kind == "import" for b in bindings)
        and _PROJECT_DEVICE_MODULE.search(node.id) is not None
        and not (r.qualname(node) or "").startswith("torch.")
    )


def _helper_call(r: Recogniser, call: ast.Call) -> bool:
    return _PROJECT_DEVICE_MODULE.search(last_name(call.func) or "") is not None and not (
        r.qualname(call.func) or ""
    ).startswith("torch")


def _is_deepspeed_accelerator(r: Recogniser, node: ast.expr) -> bool:
    """``get_accelerator()`` of ``deepspeed.accelerator``, or a name every binding of
    which is one: DeepSpeed's stand-in for torch's device module."""
    if isinstance(node, ast.Call):
        return r.qualname(node.func) == "deepspeed.accelerator.get_accelerator"
    if not isinstance(node, ast.Name):
        return False
    bindings = r.file.names.bindings(node)
    return bool(bindings) and all(
        binding.kind == "assign"
        and isinstance(binding.value, ast.Call)
        and r.qualname(binding.value.func) == "deepspeed.accelerator.get_accelerator"
        for binding in bindings
    )


def _is_torch_device_module(r: Recogniser, node: ast.expr, seen: set[int] | None = None) -> bool:
    """``node`` holds one of torch's device modules chosen at run time: ``getattr(torch,
    device_type)``, ``torch.get_device_module(device)``, ``torch.cuda if cuda else
    torch.xpu``, or a name or ``self.attribute`` every value of which is one."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return False
    seen.add(id(node))
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr" and r.file.names.is_builtin(func):
            return len(node.args) >= 2 and r.qualname(node.args[0]) == "torch"
        if r.qualname(func) in _MODULE_BY_TYPE:
            return True
        return _helper_call(r, node)
    if isinstance(node, ast.IfExp):
        return _modules_or_none(r, [node.body, node.orelse], seen)
    if isinstance(node, ast.Name) and _imported_device_module(r, node):
        return True
    name = r.qualname(node)
    if name is not None:
        return name == "torch.cuda" or name in ACCELERATOR_MODULES
    values: list[ast.expr | None]
    if isinstance(node, ast.Name):
        values = [_bound_value(r, b) for b in r.file.names.bindings(node)]
    elif isinstance(node, ast.Attribute):
        values = list(r.file.values.stored_attributes(node))
    else:
        return False
    return None not in values and _modules_or_none(r, [v for v in values if v is not None], seen)


def _modules_or_none(r: Recogniser, values: list[ast.expr], seen: set[int]) -> bool:
    """Each of ``values`` is one of torch's device modules or ``None`` (Unsloth's ``None
    if _IS_MLX else getattr(torch, DEVICE_TYPE_TORCH, None)``: no module on a runtime
    without torch), and one at least is a module."""
    modules = [v for v in values if not (isinstance(v, ast.Constant) and v.value is None)]
    return bool(modules) and all(_is_torch_device_module(r, v, seen) for v in modules)
