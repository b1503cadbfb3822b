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
    import llmlat._engine
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


# ---------------------------------------------------------------- sweep options


@pytest.mark.parametrize("func", [llmlat.sweep, llmlat.asweep], ids=["sweep", "asweep"])
def test_sweep_signature_is_the_options_model(func):
    import inspect
    import typing

    from llmlat.config import SweepConfig, option_specs

    params = list(inspect.signature(func).parameters.values())
    assert [p.name for p in params[:2]] == ["payload", "config"]
    options = params[2:]
    specs = option_specs()
    assert [p.name for p in options] == [o.name for o in specs]
    hints = typing.get_type_hints(SweepConfig)
    for param, spec in zip(options, specs, strict=True):
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        assert param.default == spec.default
        assert param.annotation == hints[spec.name]
        # help() shows every option with its type, default and help text
        assert f"{spec.name} : " in func.__doc__ and spec.help.split()[0] in func.__doc__
    assert "{options}" not in func.__doc__


def test_ipython_completes_sweep_options():
    from IPython.core.completer import provisionalcompleter
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_cell("import llmlat")
    with provisionalcompleter():
        for typed, expected in (
            ("llmlat.sweep(conc", "concurrency="),
            ("llmlat.asweep(timeo", "timeout_s="),
        ):
            texts = [c.text for c in ip.Completer.completions(typed, len(typed))]
            assert expected in texts, texts


def test_unknown_option_names_the_nearest():
    with pytest.raises(TypeError, match=r"'concurency' \(did you mean concurrency\?\)"):
        llmlat.sweep(concurency=[1, 10])
