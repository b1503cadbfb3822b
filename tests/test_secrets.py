"""A server that echoes the key back gets it into no artefact, in any case or in fragments.

The key (from ``api_key_env``, and Azure-style in ``headers=``) is echoed by a hostile server on
127.0.0.1 in the Content-Type, a header and the error body, re-cased and cut. Every artefact is
then searched: tables, parquet files, sidecar, journal, reprs, notebook output and the report.
"""

from __future__ import annotations

import asyncio
import io
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hostile import HostileServer, serving_in_a_thread
from IPython.core.interactiveshell import InteractiveShell

from llmlat._client import Target, _request_headers, _warn_if_proxy_unused
from llmlat._engine import Sweeper
from llmlat._redact import redact
from llmlat._report import write_report
from llmlat.results import DatasetWriter

KEY = "sk-Hostile-KEY-5f0c9a7e21bd43"
AZURE = "azureKey0987654321ABCDEFabcdef"


def leaks(text: str, secret: str) -> list[str]:
    """Runs of 8 characters of ``secret`` found in ``text``, whatever their case."""
    low = text.lower()
    return [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8].lower() in low]


def test_the_redactor_masks_secrets_re_cased_and_in_fragments():
    text = f"a {KEY.upper()} b {KEY[2:12]} c {KEY[-9:].swapcase()} d Bearer abcdefgh123"
    out = redact(text, [KEY])
    assert not leaks(out, KEY) and "abcdefgh123" not in out and out.startswith("a *** b ***")


@pytest.mark.parametrize(
    ("options", "secret"),
    [
        ({"api_key_env": "LLMLAT_HOSTILE_KEY"}, KEY),
        ({"headers": {"api-key": AZURE}}, AZURE),  # Azure's header: not from an env variable
    ],
)
def test_an_echoed_key_reaches_no_artefact(options, secret, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMLAT_HOSTILE_KEY", KEY)
    save = tmp_path / "run.parquet"
    shown: list[str] = []

    async def go():
        async with HostileServer() as server:
            results = []
            for mode, stream in (("key_echo", True), ("key_echo", False), ("key_echo_401", False)):
                sweeper = Sweeper(
                    "hi",
                    url=server.url(mode),
                    model="m",
                    stream=stream,
                    concurrency=2,
                    requests=3,
                    retries=0,
                    progress=False,
                    save=save if mode == "key_echo" and stream else None,
                    **options,
                )
                results.append(await sweeper.run())
            # the journal, as a crashed run would leave it
            writer = DatasetWriter(tmp_path / "journal.parquet", sweeper._meta)
            writer.append(sweeper._issued, sweeper._attempts)
            shown.append((tmp_path / "journal.parquet.journal").read_text())
            writer.close()
            return results

    results = asyncio.run(go())
    errors = " ".join(" ".join(r.requests["error"].dropna()) for r in results)
    assert "expected an event stream" in errors and "HTTP 401" in errors  # the echo came back
    for result in results:
        assert not result.requests["ok"].any()
        shown += [repr(result), result._repr_html_(), result.requests.to_csv()]
        shown += [result.attempts.to_csv(), str(result.meta), result.summary().to_string()]
        write_report(result, tmp_path / "report")
    shown += [p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file()]
    found = {i: leaks(text, secret) for i, text in enumerate(shown) if leaks(text, secret)}
    assert not found


def test_notebook_output_of_a_sweep_against_an_echoing_server(monkeypatch):
    monkeypatch.setenv("LLMLAT_HOSTILE_KEY", KEY)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "llmlat")

    out, err = io.StringIO(), io.StringIO()
    with serving_in_a_thread() as server, redirect_stdout(out), redirect_stderr(err):
        value = ip.run_cell_magic(
            "llmsweep",
            f"--url {server.url('key_echo_401')} --model m -c 2 -n 3 --retries 0 --api-key-env "
            "LLMLAT_HOSTILE_KEY --no-progress -o echoed",
            "hi",
        )
    echoed = ip.user_ns["echoed"]
    shown = [out.getvalue(), err.getvalue(), repr(value), echoed._repr_html_()]
    assert "HTTP 401" in " ".join(echoed.requests["error"].dropna())
    assert not [leaks(s, KEY) for s in shown if leaks(s, KEY)]


def test_a_key_over_plain_http_to_another_host_warns_before_any_connection(monkeypatch):
    # the request headers are built before any connection: no client is opened to another host
    monkeypatch.setenv("LLMLAT_HOSTILE_KEY", KEY)
    with pytest.warns(UserWarning, match=r"credentials over plain http to api\.example\.com"):
        _request_headers(Target("http://api.example.com/v1", api_key_env="LLMLAT_HOSTILE_KEY"))
    with pytest.warns(UserWarning, match="plain http"):
        _request_headers(Target("http://10.1.2.3:8000", headers={"x-api-key": AZURE}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _request_headers(Target("http://127.0.0.1:9", api_key_env="LLMLAT_HOSTILE_KEY"))
        _request_headers(Target("https://api.example.com", api_key_env="LLMLAT_HOSTILE_KEY"))


def test_a_key_with_a_line_break_is_refused_naming_the_variable_only(monkeypatch):
    monkeypatch.setenv("LLMLAT_HOSTILE_KEY", KEY + "\r\nX-Injected: 1")
    with pytest.raises(ValueError, match=r"^api_key_env: the value of LLMLAT_HOSTILE_KEY") as info:
        Target("http://127.0.0.1:9", api_key_env="LLMLAT_HOSTILE_KEY").api_key()
    assert not leaks(str(info.value), KEY)


def test_the_default_transport_says_it_does_not_use_a_configured_proxy(monkeypatch):
    # checked on the route alone: no client is opened to another host
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    with pytest.warns(UserWarning, match=r"http11 transport connects directly: use transport="):
        _warn_if_proxy_unused("https://api.example.com/v1", "http11")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_if_proxy_unused("https://api.example.com/v1", "aiohttp")
        _warn_if_proxy_unused("https://127.0.0.1:9/v1", "http11")  # loopback: never proxied
        monkeypatch.setenv("NO_PROXY", "api.example.com")
        _warn_if_proxy_unused("https://api.example.com/v1", "http11")
