"""The implementation of torch2jax_device; the public names live in the package itself.

``docs/architecture.md`` describes the modules and how data flows through them.
"""

from . import preflight as _preflight

# Before any module here imports JAX: a value JAX refuses becomes tj.ConfigError, and the
# command line survives it to diagnose it.
_preflight.import_jax()

# A launched job joins its group before tj starts JAX's backends: the distributed layer
# registers that with the platform table, which never imports it.
from . import distributed as distributed  # noqa: E402
