"""The built-in simulator in a child process: client and server never share a loop or a GIL.

:class:`SimulatorProcess` starts ``python -m llmlat.sim.process CONFIG_JSON`` bound to a free
port of 127.0.0.1 and reads the URL the child prints. The child serves until its standard
input closes, which happens when :meth:`SimulatorProcess.stop` is called, when the parent
exits, and also when the parent is killed, so no simulator outlives the process that started
it. The child runs in its own session: a Ctrl-C in the terminal reaches the sweep (which lets
the requests in flight finish) and not the server they are waiting for.

:func:`serve_simulator` is what the engine uses for ``url=None``: a child process by default,
or (``in_process=True``, for tests) a :class:`~llmlat.sim.Simulator` on the running loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any
from urllib.request import urlopen

from llmlat.sim.config import SimConfig, config_from_options

__all__ = ["SimulatorProcess", "serve_simulator"]

_START_TIMEOUT_S = 60.0  # the child imports aiohttp and pandas before it listens
_STOP_TIMEOUT_S = 5.0
_LIVE: weakref.WeakSet[SimulatorProcess] = weakref.WeakSet()


class SimulatorProcess:
    """The simulated provider served by a child process on 127.0.0.1.

    Parameters
    ----------
    config : SimConfig, dict, str or None
        The simulator's options: a config, a dict of options, a preset name, or None for
        the defaults.
    port : int
        Port to bind; 0 picks a free one.

    Attributes
    ----------
    config : SimConfig
        The options in force.
    url : str or None
        Base URL while running, else None.

    Examples
    --------
    >>> with SimulatorProcess("article") as sim:  # doctest: +SKIP
    ...     print(sim.url)
    """

    def __init__(self, config: SimConfig | dict[str, Any] | str | None = None, port: int = 0):
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"port: must be an integer in 0..65535, got {port!r}")
        self.config = config_from_options(config)
        self.port = port
        self.url: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = self.url or "stopped"
        pid = f" pid={self._proc.pid}" if self._proc is not None else ""
        return (
            f"<llmlat SimulatorProcess {self.config.mode} slots={self.config.slots}{pid} {state}>"
        )

    @property
    def pid(self) -> int | None:
        """The child's process id while running, else None."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> SimulatorProcess:
        """Start the child and wait until it listens.

        Returns
        -------
        SimulatorProcess
            ``self``, with :attr:`url` set.

        Raises
        ------
        OSError
            When the child cannot listen (e.g. the port is taken) or exits at start.
        """
        if self._proc is not None:
            raise RuntimeError("the simulator is already running")
        options = json.dumps({"config": self.config.to_dict(), "port": self.port})
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmlat.sim.process", options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C goes to the sweep, not the server
        )
        self._proc = proc
        _LIVE.add(self)
        line = _read_line(proc, _START_TIMEOUT_S)
        said: Any = None
        try:
            said = json.loads(line)
            self.url = said["url"]
        except (ValueError, KeyError, TypeError):
            self.stop()
            reason = said.get("error") if isinstance(said, dict) else None
            raise OSError(reason or f"the simulator process did not start ({line!r})") from None
        return self

    def stop(self) -> None:
        """Stop the child (closing its stdin; terminated if it does not exit in time)."""
        proc, self._proc, self.url = self._proc, None, None
        _LIVE.discard(self)
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def truth(self) -> Any:
        """Return the ground truth of every request served so far (``GET /llmlat/truth``).

        Returns
        -------
        pandas.DataFrame
        """
        import pandas as pd

        if self.url is None:
            raise RuntimeError("the simulator is not running")
        with urlopen(self.url + "/llmlat/truth", timeout=30) as response:
            return pd.DataFrame(json.loads(response.read()))

    def __enter__(self) -> SimulatorProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """Return the child's first line of output, or "" when it exits or says nothing in time."""
    out: list[bytes] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    return out[0].decode(errors="replace").strip() if out else ""


@contextlib.asynccontextmanager
async def serve_simulator(config: SimConfig, *, in_process: bool = False) -> AsyncIterator[Any]:
    """Serve the simulator for the duration of a block: a child process, or on this loop.

    Parameters
    ----------
    config : SimConfig
        The simulator's options.
    in_process : bool, default False
        Serve from the running event loop instead (tests; the client then shares its loop).

    Yields
    ------
    SimulatorProcess or Simulator
        With ``url`` and ``config``.
    """
    if in_process:
        from llmlat.sim.simulator import Simulator

        async with Simulator(config) as here:
            yield here
        return
    child = SimulatorProcess(config)
    await asyncio.to_thread(child.start)
    try:
        yield child
    finally:
        await asyncio.to_thread(child.stop)


@atexit.register
def _stop_all() -> None:
    for sim in list(_LIVE):
        sim.stop()


# ---------------------------------------------------------------- the child


async def _serve(config: SimConfig, port: int) -> None:
    from llmlat.sim.simulator import Simulator

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def wait_for_eof() -> None:  # the parent closed our stdin, or died
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(stop.set)

    async with Simulator(config, port=port) as sim:
        print(json.dumps({"url": sim.url}), flush=True)
        threading.Thread(target=wait_for_eof, daemon=True).start()
        await stop.wait()


def _main(argv: list[str]) -> int:
    from llmlat.sim.simulator import new_event_loop

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped by its parent, never by a Ctrl-C
    options = json.loads(argv[0])
    config = config_from_options(options["config"])
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(_serve(config, options["port"]))
    except OSError as exc:  # e.g. the port is taken
        print(json.dumps({"error": exc.strerror or str(exc)}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
