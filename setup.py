"""Build hook: ship the repository's ``datasets/`` folder in the wheel as ``llmlat/_datasets``.

The folder stays at the top of the repository (its canonical place, next to the notebooks that
write it); a build copies it into the package, so ``llmlat.datasets.load`` works from an
installed wheel without a second copy in git. Everything else is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATASETS = Path(__file__).resolve().parent / "datasets"


class BuildWithDatasets(build_py):
    """``build_py`` that also copies ``datasets/`` to ``<build>/llmlat/_datasets``."""

    def run(self) -> None:
        """Build the package as usual, then add the datasets."""
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's folder in place
            return
        if not DATASETS.is_dir():
            raise FileNotFoundError(f"{DATASETS}: missing (an sdist must include datasets/)")
        target = Path(self.build_lib) / "llmlat" / "_datasets"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(DATASETS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithDatasets})
