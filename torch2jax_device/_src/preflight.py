"""Importing JAX, before anything else of the package does: an environment JAX refuses.

``import jax`` parses its ``JAX_*`` variables at once and raises a bare ``ValueError``
for a value it refuses (``JAX_ENABLE_X64=maybe``, ``JAX_NUM_CPU_DEVICES=abc``). Every
module of the package that uses JAX is imported after
[`import_jax`][torch2jax_device._src.preflight.import_jax] (``_src.prepare_jax`` calls it
first), so that

* a program, which has it called when it imports the package, gets
  [`tj.ConfigError`][torch2jax_device.ConfigError] (a ``ValueError``) naming the
  variable and the fix;
* the ``torch2jax-device`` command line, whose own process never starts JAX (``doctor``
  and ``devices`` start it in a probe process), still runs in such an environment and
  reports every variable JAX refuses. That process
  ([`started_as_command_line`][torch2jax_device._src.preflight.started_as_command_line])
  imports JAX only for the commands that use it: ``scan`` and ``run`` never do.

This module imports nothing of JAX at module level and nothing of the package but
its errors.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Sequence

from .errors import ConfigError

__all__ = ["COMMAND", "import_jax", "started_as_command_line"]

#: The console script; ``python -m torch2jax_device`` runs the same command line.
COMMAND = "torch2jax-device"
_PACKAGE = "torch2jax_device"
# How JAX names the variable it refuses: bool_env ("... for environment 'JAX_X'") and
# the int/float/enum options ("... for JAX flag jax_x").
_REFUSED_VARIABLE = re.compile(r"for environment '(\w+)'|for JAX flag (\w+)")
# Interpreter options that take the next argument as their value.
_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def import_jax() -> None:
    """Import JAX with the environment checked as JAX reads it.

    In a program, a value JAX refuses at import becomes a ``ConfigError`` naming the
    variable and the fix. In the command line, JAX is imported with its variables
    hidden (and restored right after), since that process never starts JAX and must
    survive the very settings it is asked to diagnose.

    Raises:
        ConfigError: ``import jax`` refused a variable of the environment.
    """
    if "jax" in sys.modules:
        return
    if started_as_command_line():
        hidden = {name: os.environ.pop(name) for name in list(os.environ) if name[:3] == "JAX"}
        try:
            importlib.import_module("jax")
        finally:
            os.environ.update(hidden)
        return
    try:
        importlib.import_module("jax")
    except ValueError as error:
        match = _REFUSED_VARIABLE.search(str(error))
        variable = (match.group(1) or match.group(2).upper()) if match else "the variable"
        raise ConfigError(
            f"JAX refuses its environment at import ({error}). Fix: set {variable} to a value "
            f"JAX accepts, or unset it; `{COMMAND} doctor` lists every variable JAX refuses, "
            "with its fix."
        ) from error


def started_as_command_line(argv: Sequence[str] | None = None) -> bool:
    """Whether this interpreter runs ``torch2jax-device`` or ``python -m torch2jax_device``.

    ``argv`` is the interpreter's own command line (default ``sys.orig_argv``).

    Examples:
        >>> from torch2jax_device._src.preflight import started_as_command_line
        >>> started_as_command_line(["python", "-X", "dev", "-m", "torch2jax_device", "doctor"])
        True
        >>> started_as_command_line(["python", "train.py"])
        False
    """
    words = list(sys.orig_argv if argv is None else argv)[1:]
    while words:
        word = words.pop(0)
        if word in _OPTIONS_WITH_VALUE:
            words = words[1:]
        elif word.startswith("-m"):
            return (word[2:] or (words[0] if words else "")) == _PACKAGE
        elif word.startswith("-c") or word == "-":
            return False
        elif not word.startswith("-"):
            name = re.split(r"[\\/]", word)[-1]  # a script, on POSIX or Windows
            return name == COMMAND or name.startswith((f"{COMMAND}.", f"{COMMAND}-script"))
    return False
