"""The :class:`Simulator` object: start and stop the simulated provider, read its truth."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmlat.sim.config import SimConfig, config_from_options
from llmlat.sim.model import Replica
from llmlat.sim.server import build_app

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Simulator", "new_event_loop"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """Return a new event loop: uvloop's when it is installed, else asyncio's default.

    Returns
    -------
    asyncio.AbstractEventLoop
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Simulator:
    """A simulated LLM provider on 127.0.0.1 that knows the ground truth of every request.

    Use it as a context manager, sync (a background thread runs its own event loop) or async
    (it serves from the running loop), or call :meth:`start` / :meth:`stop` (async:
    :meth:`astart` / :meth:`astop`).

    Parameters
    ----------
    config : SimConfig, dict or None
        The options; None uses ``preset`` or the defaults.
    preset : str, optional
        A key of :data:`~llmlat.sim.config.PRESETS`, used when ``config`` is None.
    host : str
        Address to bind (default loopback only).
    port : int
        Port; 0 picks a free one.
    **overrides
        Options replacing those of ``config`` / ``preset`` (text values are parsed).

    Attributes
    ----------
    config : SimConfig
        The options in force.
    url : str or None
        Base URL such as ``"http://127.0.0.1:43117"`` while running, else None; clients append
        ``/v1/chat/completions``, ``/v1/completions`` or ``/v1/messages``.

    Examples
    --------
    >>> with Simulator(preset="instant") as sim:  # doctest: +SKIP
    ...     print(sim.url)
    ...     table = sim.truth()
    """

    def __init__(
        self,
        config: SimConfig | dict[str, Any] | None = None,
        *,
        preset: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        **overrides: Any,
    ) -> None:
        if config is not None and preset is not None:
            raise ValueError("preset: give either config or preset, not both")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"port: must be an integer in 0..65535, got {port!r}")
        self.config = config_from_options(config if config is not None else preset, **overrides)
        self.host = host
        self.port = port
        self.url: str | None = None
        self._replica: Replica | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        state = self.url or "stopped"
        return f"<llmlat Simulator {self.config.mode} slots={self.config.slots} {state}>"

    # -- async ---------------------------------------------------------------------------
    async def astart(self) -> Simulator:
        """Start serving from the running event loop.

        Returns
        -------
        Simulator
            ``self``, with :attr:`url` set.
        """
        if self._runner is not None:
            raise RuntimeError("the simulator is already running")
        self._replica = Replica(self.config)
        runner = web.AppRunner(
            build_app(self._replica),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=0.1,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, backlog=1024)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
        return self

    async def astop(self) -> None:
        """Stop serving (pending responses are cut off); the truth stays readable."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        if self._replica is not None:
            self._replica.close()
        await runner.cleanup()
        self.url = None

    async def __aenter__(self) -> Simulator:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()

    # -- sync (background thread) ---------------------------------------------------------
    def start(self) -> Simulator:
        """Start serving from a background thread with its own event loop.

        Returns
        -------
        Simulator
            ``self``, with :attr:`url` set.
        """
        if self._thread is not None or self._runner is not None:
            raise RuntimeError("the simulator is already running")
        ready = threading.Event()
        box: dict[str, BaseException] = {}
        loop = new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.astart())
            except BaseException as exc:  # reported to the caller of start()
                box["error"] = exc
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.astop())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="llmlat-sim", daemon=True)
        self._thread.start()
        ready.wait()
        if "error" in box:
            self._thread.join()
            self._thread = self._loop = None
            raise box["error"]
        return self

    def stop(self) -> None:
        """Stop the server started by :meth:`start` and join its thread."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._thread = self._loop = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- truth ---------------------------------------------------------------------------
    def truth(self) -> pd.DataFrame:
        """Return the ground truth: one row per request received, in arrival order.

        At most the last ``truth_limit`` requests (see :class:`~llmlat.sim.SimConfig`).

        Returns
        -------
        pandas.DataFrame
            Columns of :data:`~llmlat.sim.model.TRUTH_COLUMNS`; times are absolute
            ``time.perf_counter()`` seconds, comparable with any process's on this machine;
            ``outcome`` is one of :data:`~llmlat.sim.model.OUTCOMES` (NA while in progress).
            Also served as JSON records by ``GET /llmlat/truth``.
        """
        if self._replica is None:
            raise RuntimeError("the simulator has not been started")
        return self._replica.truth()
