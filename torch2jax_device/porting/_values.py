"""What a value is: the kinds of expressions, the evidence behind ``scan --diff``'s safety rules.

``Values.kinds`` says what an expression holds (a torch module, a Flax NNX module, a
torch tensor, a ``torch.device``, a file object, a path...) from how it was made:
imports, constructors, classes of the file and their bases, the arguments every call
of a function of the file passes, what functions return. Where a value goes is
``_flow``'s question, asked over these kinds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from . import catalog
from ._constructions import construction, makes_itself, passed_as
from ._names import Binding, Names

__all__ = [
    "DEVICE_MESH",
    "HF_BATCH",
    "LIBRARY_OBJECT",
    "TJ",
    "TORCH_OPTIMIZER",
    "Values",
    "last_name",
    "prefixed",
]

UNKNOWN = "?"
#: An object of a library built on torch that owns the device work (``Accelerator``).
LIBRARY_OBJECT = "library-object"
TORCH_MODULE = "torch-module"
WRAPPED = "ddp-wrapped"
NNX_MODULE = "nnx-module"
TORCH_TENSOR = "torch-tensor"
JAX_ARRAY = "jax-array"
TORCH_DEVICE = "torch-device"
CHECKPOINT = "checkpoint"
FILE = "file"
PATH = "path"
ARGS = "args"
ARGS_VALUE = "args-value"
PARSER = "argparser"
LOADER = "loader"
NUMBER = "number"
CLASS = "class"
FUNCTION = "function"
DEVICE_MESH = "device-mesh"  # torch's DeviceMesh
TORCH_OPTIMIZER = "torch-optimizer"  # torch.optim.SGD(...) and the other tj.optim rules
#: What a Hugging Face tokenizer or processor returns (``BatchEncoding``,
#: ``BatchFeature``): a dict of tensors whose ``.to(device)`` moves it in place.
HF_BATCH = "hf-batch"
#: A value of another array framework (Paddle, TensorFlow, CuPy...), whose ``.to``,
#: ``.cuda()``, ``.cpu()`` and ``.device`` are its own, not torch's.
FOREIGN = "other-framework"
_FOREIGN_FRAMEWORKS = (
    "paddle",
    "tensorflow",
    "cupy",
    "mindspore",
    "oneflow",
    "jittor",
    "mxnet",
    "tinygrad",
    "mlx",
)

# Names the scanner treats as what they are called: a qualified name -> a kind.
_CONSTRUCTORS = {
    "torch.nn.parallel.DistributedDataParallel": {TORCH_MODULE, WRAPPED},
    "torch.nn.DataParallel": {TORCH_MODULE, WRAPPED},
    "torch.nn.parallel.DataParallel": {TORCH_MODULE, WRAPPED},
    "torch.nn.Parameter": {TORCH_TENSOR},
    "torch.nn.parameter.Parameter": {TORCH_TENSOR},
    "torch.device": {TORCH_DEVICE},
    "torch.load": {CHECKPOINT},
    "torch.utils.data.DataLoader": {LOADER},
    "torch.utils.data.dataloader.DataLoader": {LOADER},
    "argparse.ArgumentParser": {PARSER},
    "builtins.open": {FILE},
    "io.open": {FILE},
    "io.BytesIO": {FILE},
    "gzip.open": {FILE},
    "os.path.join": {PATH},
    "os.path.expanduser": {PATH},
    "os.path.abspath": {PATH},
    "os.path.realpath": {PATH},
    "os.fspath": {PATH},
    "pathlib.Path": {PATH},
    "pathlib.PurePath": {PATH},
    "torch.amp.GradScaler": {"grad-scaler"},
    "torch.cuda.amp.GradScaler": {"grad-scaler"},
    "torch.cpu.amp.GradScaler": {"grad-scaler"},
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler": {"grad-scaler"},
    "torch.GradScaler": {"grad-scaler"},
    "torch.cuda.Event": {"cuda-event"},
    "torch.Event": {"cuda-event"},
    "torch.cuda.Stream": {"cuda-stream"},
    "torch.autocast": {"autocast"},
    "torch.amp.autocast": {"autocast"},
    "torch.cuda.amp.autocast": {"autocast"},
    "torch.cpu.amp.autocast": {"autocast"},
    "torch.utils.data.distributed.DistributedSampler": {"dist-sampler"},
    "torch.utils.data.DistributedSampler": {"dist-sampler"},
    "torch.Generator": {"generator"},
    "torch.distributed.device_mesh.init_device_mesh": {DEVICE_MESH},
    "torch.distributed.device_mesh.DeviceMesh": {DEVICE_MESH},
    **{
        f"torch.optim.{name}": {TORCH_OPTIMIZER}
        for name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam")
    },
    **{name: {"lr-scheduler"} for name in catalog.get("lr-scheduler").torch_api},
}
# Annotations that say what a parameter holds, for the objects whose methods have rows.
_ANNOTATED = {
    **{
        name: kinds
        for name, kinds in _CONSTRUCTORS.items()
        if kinds & {"grad-scaler", TORCH_OPTIMIZER, DEVICE_MESH, "dist-sampler", "generator"}
    },
    "torch.optim.Optimizer": {TORCH_OPTIMIZER},
    "torch.optim.optimizer.Optimizer": {TORCH_OPTIMIZER},
}
# The constructors of the libraries' objects: the qualified names of the catalog row.
_LIBRARY_CONSTRUCTORS = frozenset(
    name for name in catalog.get("library-launcher").torch_api if name.split(".")[0].islower()
)
# torch functions that do not return a tensor.
_TORCH_NOT_TENSORS = frozenset(
    "device load save manual_seed seed initial_seed no_grad inference_mode enable_grad "
    "set_grad_enabled compile autocast is_tensor is_floating_point is_complex numel "
    "set_default_device get_default_device set_default_dtype get_default_dtype "
    "set_float32_matmul_precision get_float32_matmul_precision use_deterministic_algorithms "
    "set_num_threads get_num_threads Generator dtype finfo iinfo Size typename".split()
)
# Methods whose result is the object they are called on (module and tensor "in place").
_SELF_METHODS = frozenset(
    "to cuda cpu train eval half float double bfloat16 requires_grad_ share_memory_ "
    "zero_ apply".split()
)
# Evidence that a name holds a module: methods only modules have.
_MODULE_METHODS = frozenset(
    "parameters named_parameters buffers named_buffers modules named_modules children "
    "named_children train eval state_dict load_state_dict register_buffer "
    "register_parameter zero_grad apply requires_grad_".split()
)
# Calls whose result is a Hugging Face batch: a tokenizer or processor called
# (``tokenizer(texts, return_tensors="pt")``, ``self.processor(images=...)``), or its
# methods that build one.
_HF_BATCH_MAKERS = re.compile(
    r"^(.*_)?(tokenizer|processor|feature_extractor)$|^tok$", re.IGNORECASE
)
_HF_BATCH_METHODS = frozenset({"encode_plus", "batch_encode_plus", "pad", "__call__"})
_HF_BATCH_CLASSES = frozenset(
    {
        "transformers.BatchEncoding",
        "transformers.BatchFeature",
        "transformers.tokenization_utils_base.BatchEncoding",
        "transformers.feature_extraction_utils.BatchFeature",
    }
)
_MODULE_NAMES = re.compile(
    r"(^|_)(model|net|module|network|encoder|decoder|backbone|head|classifier|unet|vae|"
    r"transformer|student|teacher|critic|actor|policy|generator|discriminator|ema)"
    r"(_|$|\d)|model$|net$",
    re.IGNORECASE,
)
# Qualified-name prefix of torch2jax_device itself.
TJ = "torch2jax_device"


def prefixed(name: str, prefixes: tuple[str, ...]) -> bool:
    """``name`` is one of ``prefixes`` or a name under one of them."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class Values:
    """The kinds of the expressions of one file."""

    def __init__(self, names: Names, qualname: Callable[[ast.AST], str | None]) -> None:
        self.names = names
        self.qualname = qualname
        self._kinds: dict[object, frozenset[str]] = {}  # by _key
        self._computing: dict[object, int] = {}  # key -> depth, while being computed
        self._partial: dict[object, tuple[frozenset[str], int]] = {}
        self._deepest_cycle = 1 << 30
        self._calls: dict[int, list[ast.Call]] | None = None
        self._attributes: dict[tuple[int, str], list[ast.expr]] | None = None
        self._method_uses: set[int] | None = None
        self._file_types = any(
            isinstance(node, ast.Attribute) and node.attr == "FileType"
            for node in ast.walk(names.tree)
        )
        #: Set by a project scan (``_project``): what a name imported from another
        #: scanned module holds (``"value"``), gives when called (``"call"``) or makes
        #: its subclasses (``"base"``); ``None`` for a name that is not the project's.
        self.imported: Callable[[ast.expr, str], set[str] | None] = _not_imported
        #: Set by a project scan: every call making the file's module-level class in the
        #: project's other modules, each with that module's ``Values`` (``[]`` when none
        #: does), or ``None`` when one reads the class other than by calling it.
        self.constructed: Callable[[ast.ClassDef], list[tuple[Values, ast.Call]] | None] = (
            _not_constructed
        )

    # -- kinds ----------------------------------------------------------------------
    def kinds(self, node: ast.AST) -> frozenset[str]:
        """What ``node`` can hold; contains ``"?"`` when something about it is unknown.

        A value defined in terms of itself (``model = load(model.cpu())``) holds what its
        other definitions hold: a node met again while it is being computed counts as
        nothing, and what was computed under that assumption is not remembered.
        """
        key = self._key(node)
        if key in self._kinds:
            return self._kinds[key]
        if key in self._partial:  # computed in this query, inside a cycle
            found, cycle = self._partial[key]
            self._deepest_cycle = min(self._deepest_cycle, cycle)
            return found
        if key in self._computing:
            self._deepest_cycle = min(self._deepest_cycle, self._computing[key])
            return frozenset()
        depth = len(self._computing)
        self._computing[key] = depth
        outer, self._deepest_cycle = self._deepest_cycle, depth + 1
        try:
            found = frozenset(self._compute(node))
        finally:
            del self._computing[key]
        if self._deepest_cycle >= depth:
            # No cycle through an outer key (one through this key alone has been taken
            # round, counting this key as nothing): final.
            found = found or frozenset({UNKNOWN})
            self._kinds[key] = found
        else:
            self._partial[key] = (found, self._deepest_cycle)
        self._deepest_cycle = min(outer, self._deepest_cycle)
        if not self._computing:
            self._partial.clear()
        return found

    def _key(self, node: ast.AST) -> object:
        """What ``kinds`` remembers ``node`` under: a read of a name shares one key with
        every read that sees the same bindings (the analysis is flow-insensitive), so a
        name bound many times is worked out once, and a chain ``x = x.cuda()`` is one
        cycle rather than one level of recursion per line."""
        if isinstance(node, ast.Name):
            bindings = self.names.bindings(node)
            if bindings:
                return id(bindings)  # the scope's list of the name's bindings
        return node

    def _compute(self, node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return {PATH}
            return {NUMBER} if isinstance(node.value, (int, float)) else {UNKNOWN}
        if isinstance(node, ast.JoinedStr):
            return {PATH}
        if isinstance(node, ast.BinOp):
            sides = self.kinds(node.left) | self.kinds(node.right)
            if PATH in sides and isinstance(node.op, (ast.Add, ast.Div, ast.Mod)):
                return {PATH}
            return {NUMBER} if sides == {NUMBER} else {UNKNOWN}
        if isinstance(node, (ast.IfExp, ast.BoolOp)):
            parts = [node.body, node.orelse] if isinstance(node, ast.IfExp) else node.values
            return set().union(*(self.kinds(p) for p in parts))
        if isinstance(node, ast.Name):
            return self._name_kinds(node)
        if isinstance(node, ast.Call):
            return self._call_kinds(node)
        if isinstance(node, ast.Attribute):
            return self._attribute_kinds(node)
        if isinstance(node, ast.Subscript):
            inner = self.kinds(node.value)
            kept = inner & {CHECKPOINT, TORCH_TENSOR, JAX_ARRAY, ARGS_VALUE}
            return set(kept) if kept else {UNKNOWN}
        return {UNKNOWN}

    def _name_kinds(self, node: ast.Name) -> set[str]:
        if self.names.is_builtin(node):
            return {UNKNOWN}
        imported = self.imported(node, "value")
        if imported is not None:
            return imported
        found: set[str] = set()
        for binding in self.names.bindings(node):
            found |= self.binding_kinds(binding)
        return found

    def binding_kinds(self, binding: Binding) -> set[str]:
        """What a binding holds."""
        if binding.kind == "import":
            return {UNKNOWN}
        if binding.kind == "def":
            return {FUNCTION}
        if binding.kind == "class":
            return {CLASS}
        if binding.kind == "assign" and binding.value is not None:
            if binding.element is None:
                return set(self.kinds(binding.value))
            return {UNKNOWN}
        if binding.kind == "for" and binding.value is not None:
            return self._element_kinds(binding.value, binding.element)
        if binding.kind == "with" and binding.value is not None:
            inner = self.kinds(binding.value)
            return {FILE} if FILE in inner else {UNKNOWN}
        if binding.kind == "param":
            return self._parameter_kinds(binding)
        return {UNKNOWN}

    def _element_kinds(self, iterable: ast.expr, position: int | None) -> set[str]:
        """What ``for x in iterable`` (``position`` for ``for a, b in ...``) binds."""
        if isinstance(iterable, ast.Call):
            name = self.qualname(iterable.func) or self.builtin(iterable.func)
            if name == "enumerate" and iterable.args:
                if position == 0:
                    return {NUMBER}
                return self._element_kinds(iterable.args[0], None) if position == 1 else {UNKNOWN}
            if name in ("tqdm.tqdm", "tqdm.auto.tqdm", "iter") and iterable.args:
                return self._element_kinds(iterable.args[0], position)
            if name == "zip" and position is not None and position < len(iterable.args):
                return self._element_kinds(iterable.args[position], None)
            if _module_tensors(iterable, position):
                return {TORCH_TENSOR}
        if LOADER in self.kinds(iterable):
            return {TORCH_TENSOR}
        return {UNKNOWN}

    def builtin(self, func: ast.AST) -> str | None:
        if isinstance(func, ast.Name) and self.names.is_builtin(func):
            return func.id
        return None

    def _parameter_kinds(self, binding: Binding) -> set[str]:
        annotated = self._annotation_kinds(getattr(binding.node, "annotation", None))
        if annotated:
            return annotated
        function = self.names.enclosing(binding.node, ast.FunctionDef, ast.AsyncFunctionDef)
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return {UNKNOWN}
        arguments = self.arguments_for(function, binding.name)
        if arguments is None and function.name == "__init__":
            return self._constructor_kinds(function, binding.name)
        if arguments is None or not arguments:
            return {UNKNOWN}
        found: set[str] = set()
        for argument in arguments:
            found |= self.kinds(argument)
        return found

    def _constructor_kinds(
        self, init: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str
    ) -> set[str]:
        """What ``__init__``'s ``parameter`` holds: what every construction of its class
        passes (``Trainer(config, model, data)`` hands ``model`` on to ``self.model``),
        in the file and, in a project, in the modules importing it. Unknown when the class
        is read other than by calling it (subclassed, handed on, ``isinstance``), a call
        passes ``*args``/``**kwargs``, or nothing scanned makes it."""
        cls = self.names.parents.get(init)
        if not isinstance(cls, ast.ClassDef):
            return {UNKNOWN}
        here = self._constructions(cls)
        elsewhere = self.constructed(cls)
        if here is None or elsewhere is None or not (here or elsewhere):
            return {UNKNOWN}
        positional = [a.arg for a in [*init.args.posonlyargs, *init.args.args]][1:]
        found: set[str] = set()
        for values, call in [(self, call) for call in here] + elsewhere:
            argument = passed_as(init, positional, call, parameter)
            if argument is None:
                return {UNKNOWN}
            found |= values.kinds(argument)
        return found

    def _constructions(self, cls: ast.ClassDef) -> list[ast.Call] | None:
        """Every call of the file's class ``cls`` in the file; ``None`` if it escapes or
        makes itself (``cls(...)`` in a classmethod, ``type(self)(...)``)."""
        if makes_itself(cls):
            return None
        found: list[ast.Call] = []
        for binding in self.names.definitions():
            if binding.node is not cls:
                continue
            for load in self.names.loads(binding):
                call = construction(self.names.parents.get(load), load)
                if call is False:
                    return None
                if call is not None:
                    found.append(call)
        return found

    def _annotation_kinds(self, annotation: ast.expr | None) -> set[str]:
        """What a parameter annotated ``scaler: Optional[torch.amp.GradScaler]`` holds, for
        torch's objects whose methods are rows of their own (never a tensor's or module's
        kinds, which decide rewrites: an annotation is not evidence of what is passed)."""
        if isinstance(annotation, ast.Subscript):  # Optional[X], Union[X, None]
            inner = annotation.slice
            parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        elif isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            parts = [annotation.left, annotation.right]  # X | None
        else:
            parts = [annotation] if annotation is not None else []
        found: set[str] = set()
        for part in parts:
            name = self.qualname(part)
            if name is not None:
                found |= _ANNOTATED.get(name, set())
        return found

    def arguments_for(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str
    ) -> list[ast.expr] | None:
        """What every call of ``function`` in the file passes as ``parameter``.

        ``None`` when that cannot be known: the function is a method, is used other than
        by calling it, or a call passes ``*args``/``**kwargs``.
        """
        calls = self.calls_of(function)
        if calls is None:
            return None
        positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        found: list[ast.expr] = []
        for call in calls:
            argument = passed_as(function, positional, call, parameter)
            if argument is None:
                return None
            found.append(argument)
        return found

    def calls_of(self, function: ast.AST) -> list[ast.Call] | None:
        """Every call of a function defined in the file; ``None`` if it escapes."""
        if self._calls is None:
            self._index_calls()
        assert self._calls is not None
        scope = self.names.scope_of.get(function)
        if scope is None or scope.kind == "class" or isinstance(function, ast.Lambda):
            return None
        return self._calls.get(id(function))

    def _index_calls(self) -> None:
        calls: dict[int, list[ast.Call]] = {}
        escaped: set[int] = set()
        for binding in self.names.definitions():
            if binding.kind != "def":
                continue
            for load in self.names.loads(binding):
                parent = self.names.parents.get(load)
                if isinstance(parent, ast.Call) and parent.func is load:
                    calls.setdefault(id(binding.node), []).append(parent)
                else:
                    escaped.add(id(binding.node))
            calls.setdefault(id(binding.node), [])
        for key in escaped:
            calls.pop(key, None)
        self._calls = calls

    def _call_kinds(self, node: ast.Call) -> set[str]:
        name = self.qualname(node.func)
        builtin = self.builtin(node.func)
        if builtin == "open":
            return {FILE}
        if builtin == "str":
            return {PATH}
        imported = self.imported(node.func, "call")
        if imported is not None:
            return imported
        if name == f"{TJ}.to_device" and node.args:
            moved = self.kinds(node.args[0])
            if NNX_MODULE in moved or not moved:
                # An NNX module moves in place and comes back; nothing yet, inside a
                # cycle (model = tj.to_device(model, ...)): nothing more.
                return set(moved)
        if _makes_hf_batch(node.func, name):
            return {HF_BATCH}
        if name is not None:
            return self._qualified_call_kinds(name)
        if isinstance(node.func, ast.Name):
            return self._local_call_kinds(node.func, node)
        if isinstance(node.func, ast.Attribute):
            receiver = self.kinds(node.func.value)
            method = node.func.attr
            if receiver == {FOREIGN}:
                return {FOREIGN}  # another framework's methods give its own values
            if method in _SELF_METHODS and (
                not receiver or receiver & {TORCH_MODULE, NNX_MODULE, TORCH_TENSOR, HF_BATCH}
            ):
                return set(receiver)  # nothing yet, inside a cycle: nothing more
            if PARSER in receiver and method in ("parse_args", "parse_known_args"):
                return {ARGS}
            if TORCH_TENSOR in receiver and method not in ("item", "tolist", "numpy", "size"):
                return {TORCH_TENSOR}
            if receiver == {JAX_ARRAY} and method not in ("item", "tolist"):
                return {JAX_ARRAY}
            if receiver == {"generator"} and method == "manual_seed":
                return {"generator"}  # torch.Generator().manual_seed(seed) returns it
        return {UNKNOWN}

    def _qualified_call_kinds(self, name: str) -> set[str]:
        if name in _CONSTRUCTORS:
            return set(_CONSTRUCTORS[name])
        if name in _LIBRARY_CONSTRUCTORS:
            return {LIBRARY_OBJECT}
        if prefixed(name, _FOREIGN_FRAMEWORKS):
            return {FOREIGN}
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.nn.functional.") or name == "torch.from_numpy":
            return {TORCH_TENSOR}
        if name.startswith(("torch.nn.", "torchvision.models.", "timm.")) and last[:1].isupper():
            return {TORCH_MODULE}
        if name in ("timm.create_model",) or (
            prefixed(name, ("transformers", "diffusers")) and last == "from_pretrained"
        ):
            return {TORCH_MODULE}
        if name.startswith("torch.") and name.count(".") == 1 and last not in _TORCH_NOT_TENSORS:
            return {TORCH_TENSOR} if last[:1].islower() else {UNKNOWN}
        if name.startswith("flax.nnx.") and last[:1].isupper():
            return {NNX_MODULE}
        if prefixed(name, ("jax.numpy", "jax.random", "jax.nn", "jax.lax")):
            return {JAX_ARRAY}
        if name in (
            "jax.device_put",
            "jax.dlpack.from_dlpack",
            f"{TJ}.to_device",
            f"{TJ}.to_jax",
            f"{TJ}.pin_memory",
        ):
            return {JAX_ARRAY}
        if name in (f"{TJ}.load", f"{TJ}.load_file"):
            return {CHECKPOINT, JAX_ARRAY}
        return {UNKNOWN}

    def _local_call_kinds(self, func: ast.Name, call: ast.Call) -> set[str]:
        found: set[str] = set()
        for binding in self.names.bindings(func):
            given = self._handed_back(binding, call)
            found |= self.call_kinds(binding) if given is None else set(self.kinds(given))
        return found

    def _handed_back(self, binding: Binding, call: ast.Call) -> ast.expr | None:
        """What ``call`` passes to a function of the file that returns one of its
        parameters unchanged (``def passthrough(value): return value``): the call gives
        back what it was given, whatever other calls pass (``None`` for any other)."""
        function = binding.node
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        returned = [r.value for r in _own_nodes(function) if isinstance(r, ast.Return)]
        names = {r.id for r in returned if isinstance(r, ast.Name)}
        positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        if len(names) != 1 or not names <= set(positional):
            return None
        (name,) = names
        if not all(
            isinstance(r, ast.Name) and all(b.kind == "param" for b in self.names.bindings(r))
            for r in returned
        ):
            return None
        keyword = next((k.value for k in call.keywords if k.arg == name), None)
        index = positional.index(name)
        if (
            keyword is None
            and index < len(call.args)
            and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1])
        ):
            return call.args[index]
        return keyword

    def call_kinds(self, binding: Binding) -> set[str]:
        """What calling the name ``binding`` binds gives."""
        if binding.kind == "class":
            assert isinstance(binding.node, ast.ClassDef)
            return self.class_kinds(binding.node)
        if binding.kind == "def":
            node = binding.node
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            returns = [
                r.value
                for r in _own_nodes(node)
                if isinstance(r, ast.Return) and r.value is not None
            ]
            found: set[str] = set() if returns else {UNKNOWN}
            for value in returns:
                found |= self.kinds(value)
            return found
        if self.binding_kinds(binding) == {NNX_MODULE}:
            return {JAX_ARRAY}  # calling a Flax NNX module
        return {UNKNOWN}

    def class_kinds(self, node: ast.ClassDef) -> set[str]:
        """What instances of a class of the file are, from its bases."""
        found: set[str] = set()
        for base in node.bases:
            name = self.qualname(base)
            imported = self.imported(base, "base")
            if imported is not None:
                found |= imported
            elif name is not None:
                if name.startswith(("torch.nn.", "torchvision.models.")):
                    found |= {TORCH_MODULE} | (_CONSTRUCTORS.get(name, set()) & {WRAPPED})
                elif name.startswith("flax.nnx."):
                    found.add(NNX_MODULE)
                else:
                    found.add(UNKNOWN)
            elif isinstance(base, ast.Name):
                for binding in self.names.bindings(base):
                    if binding.kind == "class":
                        assert isinstance(binding.node, ast.ClassDef)
                        found |= self.class_kinds(binding.node) - {CLASS}
                    else:
                        found.add(UNKNOWN)
            else:
                found.add(UNKNOWN)
        return found or {UNKNOWN}

    def _attribute_kinds(self, node: ast.Attribute) -> set[str]:
        imported = self.imported(node, "value")
        if imported is not None:
            return imported
        receiver = self.kinds(node.value)
        if ARGS in receiver:
            return {ARGS_VALUE} if not self._file_types else {UNKNOWN}
        if node.attr == "module" and WRAPPED in receiver:
            return {TORCH_MODULE}
        stored = self.stored_attributes(node)
        if stored:
            return set().union(*(self.kinds(value) for value in stored))
        return {UNKNOWN}

    def stored_attributes(
        self, node: ast.Attribute, seen: set[int] | None = None
    ) -> list[ast.expr]:
        """What ``self.x = value`` stores, for ``self.x`` read in a method of the class (or,
        where the class stores no ``x``, of the nearest base class of the file that does:
        ColossalChat's ``SimpleConsumer(BaseConsumer)`` reads the ``self.booster`` its base
        made), or ``obj.x`` where ``obj`` is an instance of a class of the file (``seen``:
        the nodes ``instance_classes`` has asked about on the way here, so a class whose
        attribute holds its own instances, ``self.next = Node(self.next)``, ends)."""
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            owner = self.names.enclosing(node, ast.ClassDef)
            stored = self._stored_in(owner, node.attr) if isinstance(owner, ast.ClassDef) else None
            return stored or []
        owners = self.instance_classes(node.value, set() if seen is None else seen)
        stores = self._attribute_stores()
        return [v for owner in owners for v in stores.get((id(owner), node.attr), [])]

    def _attribute_stores(self) -> dict[tuple[int, str], list[ast.expr]]:
        """(id of a class, attribute) -> the values its methods' ``self.x = value`` store."""
        if self._attributes is None:
            self._attributes = {}
            for target in ast.walk(self.names.tree):
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.ctx, ast.Store)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    klass = self.names.enclosing(target, ast.ClassDef)
                    statement = self.names.parents.get(target)
                    if klass is not None and isinstance(statement, ast.Assign):
                        key = (id(klass), target.attr)
                        self._attributes.setdefault(key, []).append(statement.value)
        return self._attributes

    def _stored_in(self, klass: ast.ClassDef, attr: str, depth: int = 0) -> list[ast.expr] | None:
        """What ``klass`` stores in ``self.attr``, else what its nearest base class of the
        file that stores it does (``None``: none of them stores it)."""
        stored = self._attribute_stores().get((id(klass), attr))
        if stored is not None or depth > 8:
            return stored
        for base in klass.bases:
            if not isinstance(base, ast.Name):
                continue
            for binding in self.names.bindings(base):
                if binding.kind == "class" and isinstance(binding.node, ast.ClassDef):
                    found = self._stored_in(binding.node, attr, depth + 1)
                    if found is not None:
                        return found
        return None

    def instance_classes(self, node: ast.AST, seen: set[int]) -> list[ast.ClassDef]:
        """The classes of the file ``node`` is evidently an instance of."""
        if id(node) in seen:
            return []
        seen.add(id(node))
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                return [
                    b.node
                    for b in self.names.bindings(node.func)
                    if b.kind == "class" and isinstance(b.node, ast.ClassDef)
                ]
            if isinstance(node.func, ast.Attribute) and node.func.attr in _SELF_METHODS:
                return self.instance_classes(node.func.value, seen)
        if isinstance(node, ast.Name):
            found: list[ast.ClassDef] = []
            for binding in self.names.bindings(node):
                if (
                    binding.kind == "assign"
                    and binding.value is not None
                    and binding.element is None
                ):
                    found += self.instance_classes(binding.value, seen)
            return found
        if isinstance(node, ast.Attribute):
            stored = self.stored_attributes(node, seen)
            return [c for v in stored for c in self.instance_classes(v, seen)]
        return []

    # -- modules ------------------------------------------------------------------------
    def module_framework(self, node: ast.AST) -> str | None:
        """``"torch"``/``"nnx"`` when ``node`` is evidently a module of that framework,
        ``"module"`` when it looks like a module of either, ``None`` otherwise."""
        kinds = self.kinds(node)
        if TORCH_MODULE in kinds:
            return "torch"
        if NNX_MODULE in kinds:
            return "nnx" if kinds == {NNX_MODULE} else "module"
        if TORCH_TENSOR in kinds:
            return None  # model_v of a model's state_dict(): a tensor, whatever its name
        if self._used_as_module(node) or self._constructed_inline(node):
            return "module"
        name = last_name(node)
        if name is not None and _MODULE_NAMES.search(name):
            return "module"
        return None

    def _constructed_inline(self, node: ast.AST) -> bool:
        """``SSLMetaArch(cfg)``: a class of the project's own (no library's, whose kinds
        are known) made in the expression, as a model is before ``.to(device)``."""
        if not isinstance(node, ast.Call):
            return False
        name = last_name(node.func)
        qualified = self.qualname(node.func) or ""
        own_to = isinstance(node.func, ast.Name) and any(
            isinstance(binding.node, ast.ClassDef)
            and any(
                isinstance(member, ast.FunctionDef) and member.name == "to"
                for member in binding.node.body
            )
            for binding in self.names.bindings(node.func)
        )  # a batch class of the file with a .to of its own
        return (
            name is not None
            and name[:1].isupper()
            and not name.isupper()
            and not qualified.startswith(("torch", "numpy", "jax", "flax", TJ))
            and not own_to
        )

    def _used_as_module(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Name):
            return False
        if self._method_uses is None:
            # Keyed by the scope's list of the name's bindings, which every read of the
            # name shares: one entry per name, however many times it is bound.
            used: set[int] = set()
            for load in ast.walk(self.names.tree):
                if not (isinstance(load, ast.Name) and isinstance(load.ctx, ast.Load)):
                    continue
                parent = self.names.parents.get(load)
                if isinstance(parent, ast.Attribute) and parent.attr in _MODULE_METHODS:
                    bindings = self.names.bindings(load)
                    if bindings:
                        used.add(id(bindings))
            self._method_uses = used
        bindings = self.names.bindings(node)
        return bool(bindings) and id(bindings) in self._method_uses


def _module_tensors(iterable: ast.Call, position: int | None) -> bool:
    """``for x in iterable`` binds a module's tensors: ``m.parameters()``,
    ``m.buffers()``, ``m.state_dict().values()``, the second of ``m.named_parameters()``
    and ``m.state_dict().items()``."""
    func = iterable.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("parameters", "buffers"):
        return position is None
    if func.attr in ("named_parameters", "named_buffers"):
        return position == 1
    state = func.value
    is_state = (
        isinstance(state, ast.Call)
        and isinstance(state.func, ast.Attribute)
        and state.func.attr == "state_dict"
    )
    if func.attr == "values":
        return is_state and position is None
    return func.attr == "items" and is_state and position == 1


def _makes_hf_batch(func: ast.expr, name: str | None) -> bool:
    """A call of ``func`` (qualified ``name``) returns a Hugging Face batch:
    ``tokenizer(...)``, ``self.processor(...)``, ``tokenizer.pad(...)``,
    ``BatchEncoding(...)``."""
    if name is not None:
        return name in _HF_BATCH_CLASSES
    if isinstance(func, ast.Attribute) and func.attr in _HF_BATCH_METHODS:
        func = func.value
    called = last_name(func)
    return called is not None and _HF_BATCH_MAKERS.match(called) is not None


def last_name(node: ast.AST) -> str | None:
    """``x`` of ``x`` or of ``a.b.x``; ``None`` for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions or classes inside it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _not_constructed(cls: ast.ClassDef) -> list[tuple[Values, ast.Call]] | None:
    """A file scanned alone: no other scanned module makes its classes."""
    return []


def _not_imported(node: ast.expr, how: str) -> set[str] | None:
    """A file scanned alone imports nothing the scanner reads."""
    return None
