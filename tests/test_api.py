"""The curated public API: every name resolves, and importing llmlat stays light."""

import subprocess
import sys

import pytest

import llmlat


@pytest.mark.parametrize("name", llmlat.__all__)
def test_every_public_name_resolves(name):
    assert getattr(llmlat, name) is not None


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_thing"):
        llmlat.no_such_thing  # noqa: B018


def test_functions_are_not_shadowed_by_their_modules():
    # a submodule named like a package function would replace it on first import
    import llmlat.engine
    import llmlat.fitting

    assert callable(llmlat.sweep) and not isinstance(llmlat.sweep, type(llmlat))
    assert callable(llmlat.fit) and not isinstance(llmlat.fit, type(llmlat))


def test_import_does_not_pull_ipython_or_patch_asyncio():
    code = (
        "import sys, asyncio; before = asyncio.run; import llmlat; "
        "assert 'IPython' not in sys.modules, 'IPython imported'; "
        "assert 'nest_asyncio' not in sys.modules and 'nest_asyncio2' not in sys.modules; "
        "assert asyncio.run is before; "
        "assert 'statsmodels' not in sys.modules and 'seaborn' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
