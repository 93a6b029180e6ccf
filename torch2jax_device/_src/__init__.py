"""The implementation of torch2jax_device; the public names live in the package itself.

``docs/architecture.md`` describes the modules and how data flows through them.
"""
