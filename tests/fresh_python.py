"""What a fresh Python process has imported after running some code (import-cost tests)."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_loaded(code: str, names: tuple[str, ...]) -> list[str]:
    """Run ``code`` in a new interpreter; return which of ``names`` it left in ``sys.modules``."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps(sorted(set({names!r}) & set(sys.modules))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
