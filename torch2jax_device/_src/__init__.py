"""The implementation of torch2jax_device; the public names live in the package itself.

``docs/architecture.md`` describes the modules and how data flows through them.
"""

from . import preflight as _preflight

# Before any module here imports JAX: a value JAX refuses becomes tj.ConfigError, and the
# command line survives it to diagnose it.
_preflight.import_jax()
