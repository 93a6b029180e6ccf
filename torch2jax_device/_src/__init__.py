"""The implementation of torch2jax_device; the public names live in the package itself.

``docs/architecture.md`` describes the modules and how data flows through them.
"""

from . import preflight as _preflight


def prepare_jax() -> None:
    """Import JAX with the environment checked, then have the platform table join a
    launched job before tj starts JAX's backends: what every module here that uses JAX
    needs done first. Does nothing the second time.

    A program has it done when it imports the package. The command line's own process
    calls it only for the commands that use JAX (``devices``, ``doctor``), so that
    ``scan`` and ``run`` start without importing JAX.

    Raises:
        ConfigError: in a program, ``import jax`` refused a variable of the environment.
    """
    _preflight.import_jax()
    # The distributed layer registers the join with the platform table, which never
    # imports it.
    from . import distributed  # noqa: F401


if not _preflight.started_as_command_line():
    prepare_jax()
