"""The simulator's aiohttp application: HTTP in front of a :class:`~llmlat.sim.model.Replica`.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/messages``,
``GET /v1/models``, ``GET /llmlat/truth`` (the truth table as JSON records) and a JSON 404 for
anything else. A streamed response writes everything that became due at one moment in one
write; when the whole response is due at once (zero service time) it goes out as a single
HTTP response with a Content-Length.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from aiohttp import web

from llmlat.sim.model import Refusal, Replica, Sequence, TruthRow
from llmlat.sim.protocol import API_PATHS, BadRequest, Formatter, error_body, parse_request

__all__ = ["REPLICA_KEY", "build_app"]

#: Application key under which the app keeps its :class:`Replica`.
REPLICA_KEY = web.AppKey("llmlat_replica", Replica)

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_JSON = "application/json"


def _json_response(
    api: str,
    status: int,
    message: str,
    param: str | None = None,
    headers: Any = None,
    code: str | None = None,
) -> web.Response:
    body = json.dumps(error_body(api, status, message, param, code)).encode()
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)


def _retry_headers(seconds: float, api: str) -> dict[str, str]:
    # what each API sends on a 429: Retry-After in whole seconds (RFC 9110's delay-seconds;
    # OpenAI and Anthropic both send it), rounded up so waiting is enough; the OpenAI flavour
    # adds the exact wait in retry-after-ms, as Azure OpenAI sends it and OpenAI's SDKs read it;
    # Anthropic's API has no such header
    ms = max(1, math.ceil(seconds * 1000))
    headers = {"Retry-After": str(math.ceil(ms / 1000))}
    if api != "anthropic-messages":
        headers["retry-after-ms"] = str(ms)
    return headers


class _Api:
    """The handler of one generation endpoint."""

    def __init__(self, replica: Replica, api: str) -> None:
        self.replica = replica
        self.api = api

    async def handle(self, request: web.Request) -> web.StreamResponse:
        row = self.replica.arrive(self.api, request.headers.get("x-llmlat-request-id"))
        try:
            return await self._serve(request, row)
        except BaseException as exc:  # every truth row gets an outcome and an end
            if row.outcome is None:
                gone = isinstance(exc, asyncio.CancelledError | ConnectionError)
                row.outcome = "disconnected" if gone else "error_500"  # aiohttp answers 500
            if math.isnan(row.t_end):
                row.t_end = time.perf_counter()
            raise

    async def _serve(self, request: web.Request, row: TruthRow) -> web.StreamResponse:
        replica = self.replica
        cfg = replica.config
        try:  # aiohttp stops reading past client_max_size (max_body_bytes)
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large(row)
        try:
            parsed = parse_request(self.api, raw, cfg.max_output_tokens, cfg.context_tokens)
        except BadRequest as exc:
            response = _json_response(self.api, 400, str(exc), exc.param, code=exc.code)
            return self._finish(row, "invalid", response)
        row.stream = parsed.stream
        admitted = replica.admit(row, parsed.prompt_tokens, parsed.max_tokens, parsed.prefixes)
        headers = replica.limit_headers(self.api)
        headers["x-request-id"] = f"req_llmlat{row.request_id}"
        if isinstance(admitted, Refusal):
            return self._refuse(row, admitted, headers)
        seq = admitted
        if seq.fault in ("error_500", "error_503"):
            status = 500 if seq.fault == "error_500" else 503
            text = "simulated server error" if status == 500 else "simulated overload"
            return self._finish(
                row, seq.fault, _json_response(self.api, status, text, None, headers)
            )
        usage = {
            "prompt_tokens": parsed.prompt_tokens,
            "completion_tokens": seq.n_tokens,
            "cached_tokens": row.cached_tokens or 0,
            "cache_creation_tokens": row.cache_creation_tokens or 0,
        }
        fmt = Formatter(
            self.api,
            row.request_id,
            parsed.model,
            int(time.time()),
            usage,
            parsed.max_tokens is not None,
            parsed.include_usage,
        )
        replica.serve(seq)
        try:
            if parsed.stream:
                return await self._stream(request, seq, fmt, headers)
            return await self._whole(request, seq, fmt, headers)
        finally:
            replica.release(seq)

    def _too_large(self, row: TruthRow) -> web.Response:
        limit = self.replica.config.max_body_bytes
        message = f"the request body exceeds the maximum of {limit} bytes"
        response = _json_response(self.api, 413, message, code="request_too_large")
        response.force_close()  # the rest of the body is not read
        return self._finish(row, "invalid", response)

    @staticmethod
    def _finish(row: TruthRow, outcome: str, response: web.Response) -> web.Response:
        row.outcome = outcome
        row.status = response.status
        row.t_end = time.perf_counter()
        return response

    def _refuse(self, row: TruthRow, refusal: Refusal, headers: dict[str, str]) -> web.Response:
        if math.isinf(refusal.retry_after_s):  # larger than the whole TPM bucket: never fits
            message = f"request too large for the {refusal.limit}-per-minute limit"
            return self._finish(row, "invalid", _json_response(self.api, 400, message))
        headers.update(_retry_headers(refusal.retry_after_s, self.api))
        if refusal.reason == "queue_full":
            message = "the replica's queue is full, retry later"
        else:
            message = f"rate limit reached for {refusal.limit} per minute"
        return self._finish(
            row, refusal.reason, _json_response(self.api, 429, message, None, headers)
        )

    async def _whole(
        self, request: web.Request, seq: Sequence, fmt: Formatter, headers: dict[str, str]
    ) -> web.StreamResponse:
        while not seq.finished:
            await seq.wait()
        row = seq.row
        if seq.fault == "dropped":
            row.completion_tokens = 0
            return self._drop(request, row)
        row.t_first_token = row.t_last_token = time.perf_counter()
        row.completion_tokens = seq.n_tokens
        body = fmt.body()
        if seq.fault == "malformed":
            body = body[: len(body) // 2]
        row.outcome = row.outcome or "ok"
        return self._finish(
            row, row.outcome, web.Response(body=body, content_type=_JSON, headers=headers)
        )

    @staticmethod
    def _drop(request: web.Request, row: TruthRow) -> web.StreamResponse:
        row.t_end = time.perf_counter()
        if request.transport is not None:
            request.transport.close()
        # nothing more can be written; aiohttp drops the (unsent) response of a closed transport
        return web.Response(status=200)

    async def _stream(
        self, request: web.Request, seq: Sequence, fmt: Formatter, headers: dict[str, str]
    ) -> web.StreamResponse:
        row = seq.row
        drop_at = seq.n_tokens // 2 if seq.fault == "dropped" else -1
        bad_at = seq.n_tokens // 2 if seq.fault == "malformed" else -1
        while not seq.started:
            await seq.wait()
        if seq.finished and drop_at < 0:  # everything is due now: one plain response
            now = time.perf_counter()
            row.t_first_token = row.t_last_token = now
            row.completion_tokens = seq.n_tokens
            body = fmt.start() + fmt.tokens(0, seq.n_tokens, bad_at) + fmt.end()
            whole = web.Response(body=body, headers={**headers, **_SSE_HEADERS})
            return self._finish(row, row.outcome or "ok", whole)
        response = web.StreamResponse(headers={**headers, **_SSE_HEADERS})
        row.status = 200
        await response.prepare(request)
        out, written = fmt.start(), 0
        while True:
            due = seq.emitted if drop_at < 0 else min(seq.emitted, drop_at)
            if due > written:
                out += fmt.tokens(written, due, bad_at)
                now = time.perf_counter()
                if written == 0:
                    row.t_first_token = now
                row.t_last_token = now
                row.completion_tokens = written = due
            if written == drop_at:
                await response.write(out)
                return self._drop(request, row)
            if seq.finished:
                await response.write_eof(out + fmt.end())
                row.t_end = time.perf_counter()
                row.outcome = row.outcome or "ok"
                return response
            if out:
                await response.write(out)
                out = b""
                continue  # tokens may have come while the write waited for the client
            await seq.wait()


async def _models(request: web.Request) -> web.Response:
    model = request.app[REPLICA_KEY].config.model
    data = [{"id": model, "object": "model", "created": 0, "owned_by": "llmlat"}]
    return web.json_response({"object": "list", "data": data})


async def _truth(request: web.Request) -> web.Response:
    frame = request.app[REPLICA_KEY].truth()
    return web.Response(body=frame.to_json(orient="records"), content_type=_JSON)


async def _not_found(request: web.Request) -> web.Response:
    message = f"no route for {request.method} {request.path}"
    return _json_response("openai-chat", 404, message)


def build_app(replica: Replica) -> web.Application:
    """Build the aiohttp application serving a replica.

    Parameters
    ----------
    replica : Replica
        The model to put behind HTTP (created in the loop that will run the app).

    Returns
    -------
    aiohttp.web.Application
    """
    app = web.Application(client_max_size=replica.config.max_body_bytes)
    app[REPLICA_KEY] = replica
    for api, path in API_PATHS.items():
        app.router.add_post(path, _Api(replica, api).handle)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/llmlat/truth", _truth)
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app
