"""``python -m pgfence``: the ``pgfence`` command line (see :mod:`pgfence.cli`)."""

from .cli import main

raise SystemExit(main())
