"""``python -m torch2jax_device`` runs the ``torch2jax-device`` command line."""

from torch2jax_device.cli import main

raise SystemExit(main())
