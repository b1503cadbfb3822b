"""run_coroutine: no loop, a running loop in the same thread (a kernel), a plain thread, uvloop.

Patching with nest-asyncio is process-wide, so every case that re-enters a running asyncio loop
runs in a subprocess: the test process itself must stay unpatched for the rest of the suite.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import pytest

from llmlat import _loop
from llmlat._loop import run_coroutine

pytestmark = pytest.mark.py313

uvloop = pytest.importorskip("uvloop")


async def _where() -> tuple[int, asyncio.AbstractEventLoop]:
    await asyncio.sleep(0)
    return threading.get_ident(), asyncio.get_running_loop()


async def _fail() -> None:
    await asyncio.sleep(0)
    raise ValueError("boom: field x")


def _patched() -> bool:
    """Whether asyncio is patched in this process: a test file that ran earlier on the same
    pytest-xdist worker may have patched it, so the in-process tests check that they add none."""
    return hasattr(asyncio, "_nest_patched")


def _run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_import_patches_nothing() -> None:
    proc = _run_python(
        """
        import asyncio, sys
        import llmlat, llmlat._loop, llmlat._ipython
        assert not hasattr(asyncio, "_nest_patched"), "asyncio patched at import"
        leaked = {"IPython", "nest_asyncio2", "nest_asyncio", "uvloop"} & set(sys.modules)
        # llmlat._ipython may import IPython (it is the extension), plain llmlat may not
        leaked.discard("IPython")
        assert not leaked, leaked
        """
    )
    assert proc.returncode == 0, proc.stderr
    proc = _run_python(
        """
        import sys, llmlat
        llmlat.__all__, llmlat.__version__
        assert "IPython" not in sys.modules
        """
    )
    assert proc.returncode == 0, proc.stderr


def test_no_loop_uses_a_fresh_uvloop_in_this_thread() -> None:
    patched = _patched()
    ident, loop = run_coroutine(_where())
    assert ident == threading.get_ident()
    assert isinstance(loop, uvloop.Loop)
    assert loop.is_closed()
    assert _patched() == patched


def test_no_loop_propagates_errors() -> None:
    with pytest.raises(ValueError, match="field x"):
        run_coroutine(_fail())


def test_from_a_plain_thread() -> None:
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = run_coroutine(_where())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert "error" not in box, box.get("error")
    ident, _ = box["value"]  # type: ignore[misc]
    assert ident == thread.ident


def test_uvloop_running_loop_falls_back_to_a_thread(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_loop, "_reported", set())
    patched = _patched()

    async def outer() -> list[tuple[int, asyncio.AbstractEventLoop]]:
        # two synchronous calls from inside the running loop, as a magic would make
        return [run_coroutine(_where()), run_coroutine(_where())]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        outer_loop = runner.get_loop()
        results = runner.run(outer())
    for ident, loop in results:
        assert ident != threading.get_ident()
        assert loop is not outer_loop
    err = capsys.readouterr().err
    assert err.count("worker thread") == 1, err  # said once, not per call
    assert "uvloop" in err
    assert _patched() == patched


def test_running_loop_in_same_thread_is_reentered() -> None:
    proc = _run_python(
        """
        import asyncio, sys, threading
        from llmlat._loop import run_coroutine
        assert "nest_asyncio2" not in sys.modules  # lazy: not before first use

        async def inner(n):
            await asyncio.sleep(0.001)
            # tasks and gather work inside the re-entered loop
            parts = await asyncio.gather(*(asyncio.sleep(0, i) for i in range(n)))
            return threading.get_ident(), asyncio.get_running_loop(), sum(parts)

        async def fail():
            raise ValueError("boom")

        async def outer():
            me, loop = threading.get_ident(), asyncio.get_running_loop()
            for n in (3, 5):  # twice: the second call finds the loop already patched
                ident, used, total = run_coroutine(inner(n))
                assert (ident, used, total) == (me, loop, n * (n - 1) // 2)
            try:
                run_coroutine(fail())
            except ValueError:
                pass
            else:
                raise AssertionError("error not propagated")
            return "ok"

        print(asyncio.run(outer()))
        assert "nest_asyncio2" in sys.modules and hasattr(asyncio, "_nest_asyncio2")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "worker thread" not in proc.stderr


def test_known_broken_patcher_falls_back_to_a_thread() -> None:
    proc = _run_python(
        """
        import asyncio, threading
        from llmlat import _loop

        # pretend only the old library exists and that this Python breaks it
        _loop._PATCHERS = (("nest_asyncio", (3, 0)),)

        async def where():
            return threading.get_ident()

        async def outer():
            return _loop.run_coroutine(where())

        assert asyncio.run(outer()) != threading.get_ident()
        assert not hasattr(asyncio, "_nest_patched")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "known to break on Python 3.0+" in proc.stderr
    assert "worker thread" in proc.stderr


# The coroutine sends itself SIGINT once it runs, then waits forever; its cleanup must be
# awaited before KeyboardInterrupt reaches the caller, and nothing may be left pending.
_SIGINT_CASE = """
import asyncio, os, signal, sys, threading
from llmlat._loop import run_coroutine

MODE = {mode!r}
cleaned = []
# Ctrl-C as in a terminal, though this test's parent may ignore SIGINT (a job started with `&`
# from a script does, and its children inherit that)
signal.signal(signal.SIGINT, signal.default_int_handler)

async def victim(swallow):
    threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.01)  # cleanup that itself awaits
        cleaned.append(threading.get_ident())
        if swallow:
            return "partial"
        raise

def call(swallow):
    try:
        value = run_coroutine(victim(swallow))
    except KeyboardInterrupt:
        return "interrupted"
    return value

def both():
    return call(False), call(True)

if MODE == "fresh":
    got = both()
elif MODE == "nested":
    async def outer():
        return both()
    got = asyncio.run(outer())
else:
    import uvloop
    async def outer():
        return both()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        got = runner.run(outer())
assert got == ("interrupted", "partial"), got
assert len(cleaned) == 2, cleaned
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
print("ok")
"""


@pytest.mark.parametrize("mode", ["fresh", "nested", "thread"])
def test_sigint_cancels_and_awaits_then_interrupts(mode: str) -> None:
    proc = _run_python(_SIGINT_CASE.format(mode=mode))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "was destroyed but it is pending" not in proc.stderr
    assert "Traceback" not in proc.stderr
