"""``python -m llmlat``: the same as the ``llmlat`` command."""

from llmlat.cli import main

raise SystemExit(main())
