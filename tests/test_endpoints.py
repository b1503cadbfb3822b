"""API flavours: request bodies, headers and parsing of real SSE / JSON bytes (no server)."""

from __future__ import annotations

import json

import pytest

from llmlat._apis import API_NAMES, get_endpoint, make_payload
from llmlat._redact import one_line


def sse(*events: object, done: bool = True) -> bytes:
    """An OpenAI-style stream: one ``data:`` line per event, blank line after each."""
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def chat_chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 3,
    "prompt_tokens_details": {"cached_tokens": 8},
}
CHAT_STREAM = sse(
    chat_chunk({"role": "assistant", "content": ""}),
    chat_chunk({"content": "Hel"}),
    chat_chunk({"content": "lo"}),
    chat_chunk({"content": "!"}),
    chat_chunk({}, finish="stop"),
    {"id": "c1", "choices": [], "usage": USAGE},
)


def feed_split(parser, data: bytes, size: int) -> None:
    """Feed ``data`` in network chunks of ``size`` bytes; chunk i arrives at time i."""
    for i in range(0, len(data), size):
        parser.feed(data[i : i + size], i // size)
    parser.close(len(data) // size + 1)


def test_make_payload_turns_a_prompt_into_each_api_shape():
    assert make_payload("hi", "openai-chat") == {"messages": [{"role": "user", "content": "hi"}]}
    assert make_payload("hi", "anthropic-messages")["messages"][0]["content"] == "hi"
    assert make_payload("hi", "openai-completions") == {"prompt": "hi"}
    given = {"messages": [], "temperature": 0}
    made = make_payload(given, "openai-chat")
    assert made == given and made is not given


@pytest.mark.parametrize(
    ("payload", "api", "field"),
    [
        ({"prompt": "x"}, "openai-chat", "payload"),
        ({"messages": []}, "openai-completions", "payload"),
        (3, "openai-chat", "payload"),
        ("x", "gemini", "api"),
    ],
)
def test_make_payload_rejects_bad_input_naming_the_field(payload, api, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        make_payload(payload, api)


def test_openai_stream_body_asks_for_usage_and_drops_it_without_stream():
    ep = get_endpoint("openai-chat")
    payload = {"messages": [], "stream_options": {"x": 1}}
    body = ep.body(payload, model="m", stream=True, max_tokens=7)
    assert body["stream"] is True and body["model"] == "m" and body["max_tokens"] == 7
    assert body["stream_options"] == {"x": 1, "include_usage": True}
    assert payload == {"messages": [], "stream_options": {"x": 1}}  # not changed
    plain = ep.body(payload, stream=False)
    assert plain["stream"] is False and "stream_options" not in plain and "model" not in plain


def test_chat_keeps_max_completion_tokens_when_the_payload_uses_it():
    ep = get_endpoint("openai-chat")
    body = ep.body({"messages": [], "max_completion_tokens": 50}, max_tokens=9)
    assert body["max_completion_tokens"] == 9 and "max_tokens" not in body
    assert get_endpoint("openai-completions").body({"prompt": "x"}, max_tokens=9)["max_tokens"] == 9


def test_anthropic_body_and_headers():
    ep = get_endpoint("anthropic-messages")
    body = ep.body({"messages": []}, stream=True)
    assert "max_tokens" not in body and "stream_options" not in body  # never guessed
    assert ep.body({"messages": []}, max_tokens=5)["max_tokens"] == 5
    headers = ep.headers("k-123")
    assert headers["x-api-key"] == "k-123" and headers["anthropic-version"]
    assert "Authorization" not in headers
    assert "x-api-key" not in ep.headers(None)


def test_openai_headers_use_bearer_auth():
    ep = get_endpoint("openai-completions")
    assert ep.headers("k-1")["Authorization"] == "Bearer k-1"
    assert "Authorization" not in ep.headers(None)


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("http://h:1", "http://h:1/v1/chat/completions"),
        ("http://h:1/", "http://h:1/v1/chat/completions"),
        ("http://h:1/v1", "http://h:1/v1/chat/completions"),
        ("http://h:1/v1/chat/completions", "http://h:1/v1/chat/completions"),
    ],
)
def test_url_accepts_base_v1_or_full(base, expected):
    assert get_endpoint("openai-chat").url(base) == expected


def test_api_names_all_resolve():
    assert {get_endpoint(a).api for a in API_NAMES} == set(API_NAMES)
    with pytest.raises(ValueError, match=r"^api:"):
        get_endpoint("nope")


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_chat_stream_counts_content_not_the_role_chunk_in_any_split(size):
    p = get_endpoint("openai-chat").stream_parser()
    feed_split(p, CHAT_STREAM, size)
    assert p.error is None and p.done
    assert len(p.times) == 3
    assert (p.prompt_tokens, p.completion_tokens, p.cached_tokens) == (12, 3, 8)
    # the first content event's arrival: the chunk with the blank line that ends the "Hel" event
    event_end = CHAT_STREAM.index(b"\n\n", CHAT_STREAM.index(b'"Hel"')) + 1
    assert p.times[0] == event_end // size


def test_coalesced_events_share_their_chunk_time():
    p = get_endpoint("openai-chat").stream_parser()
    p.feed(CHAT_STREAM, 42)
    assert p.times == [42, 42, 42]


def test_reasoning_and_tool_arguments_count_as_content_empty_and_null_do_not():
    p = get_endpoint("openai-chat").stream_parser()
    data = sse(
        chat_chunk({"role": "assistant", "content": None}),
        chat_chunk({"content": ""}),
        chat_chunk({"reasoning_content": "think"}),
        chat_chunk({"reasoning": "more"}),
        chat_chunk({"refusal": "no"}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
        chat_chunk({"content": 'say "content":"x"'}),  # escaped quotes inside text
        chat_chunk({"content": ""}),
    )
    p.feed(data, 1)
    assert len(p.times) == 5 and p.done


def test_spaced_json_is_parsed_too():
    data = b'data: {"choices": [{"delta": {"content": ""}}]}\n\n'
    data += b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
    data += b'data: {"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]}\n\n'
    p = get_endpoint("openai-chat").stream_parser()
    p.feed(data, 1)
    p.close(2)
    assert len(p.times) == 2 and p.done and p.error is None


def test_crlf_lines_comments_and_a_last_line_without_newline():
    data = (
        b": keep-alive\r\n\r\n"
        b'data:{"choices":[{"text":"a"}]}\r\n\r\n'
        b'data: {"choices":[{"text":"b","finish_reason":"length"}],"usage":{"prompt_tokens":1,'
        b'"completion_tokens":2}}\r\n\r\n'
        b"data: [DONE]"
    )
    p = get_endpoint("openai-completions").stream_parser()
    p.feed(data, 5)
    assert p.done  # finish_reason seen
    p.close(6)
    assert p.times == [5, 5] and p.completion_tokens == 2 and p.cached_tokens is None


def test_stream_without_end_is_not_done():
    p = get_endpoint("openai-chat").stream_parser()
    p.feed(sse(chat_chunk({"content": "a"}), done=False), 1)
    p.close(2)
    assert not p.done and p.error is None


@pytest.mark.parametrize(
    "bad",
    [b"data: {not json}\n\n", b'data: {"choices": [\n\n', b"data: hello\n\n", b"data: [1]\n\n"],
)
def test_malformed_event_is_a_protocol_error_before_or_after_content(bad):
    for prefix in (b"", sse(chat_chunk({"content": "a"}), done=False)):
        p = get_endpoint("openai-chat").stream_parser()
        p.feed(prefix + bad + sse(chat_chunk({"content": "b"})), 1)
        assert p.error_kind == "protocol", bad
        assert len(p.times) == (1 if prefix else 0)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"error": {"message": "slow down", "type": "rate_limit_error"}}, "rate_limited"),
        ({"error": {"message": "boom", "type": "server_error"}}, "server_error"),
        (
            {"object": "error", "message": "bad", "type": "BadRequestError", "code": 400},
            "client_error",
        ),
    ],
)
def test_error_event_mid_stream(error, kind):
    p = get_endpoint("openai-chat").stream_parser()
    p.feed(sse(chat_chunk({"content": "a"}), error, chat_chunk({"content": "b"})), 1)
    assert p.error_kind == kind and p.error and len(p.times) == 1


ANTHROPIC_STREAM = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"m","content":[],"usage":'
    b'{"input_tokens":5,"cache_read_input_tokens":20,"cache_creation_input_tokens":2,'
    b'"output_tokens":1}}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta",'
    b'"thinking":"hmm"}}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b"event: message_delta\n"
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":'
    b'{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


@pytest.mark.parametrize("size", [3, 10_000])
def test_anthropic_stream(size):
    p = get_endpoint("anthropic-messages").stream_parser()
    feed_split(p, ANTHROPIC_STREAM, size)
    assert p.error is None and p.done and len(p.times) == 2
    assert (p.prompt_tokens, p.completion_tokens, p.cached_tokens) == (27, 2, 20)


def test_anthropic_error_event_and_missing_stop():
    p = get_endpoint("anthropic-messages").stream_parser()
    p.feed(
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"}}\n\n',
        1,
    )
    assert p.error_kind == "server_error" and "Overloaded" in p.error
    q = get_endpoint("anthropic-messages").stream_parser()
    q.feed(ANTHROPIC_STREAM.split(b"event: message_stop")[0], 1)
    q.close(2)
    assert not q.done


def test_json_bodies_of_each_api():
    chat = get_endpoint("openai-chat").parse_body(
        json.dumps({"choices": [{"message": {"content": "x"}}], "usage": USAGE}).encode()
    )
    assert chat.content and chat.error is None and chat.cached_tokens == 8
    comp = get_endpoint("openai-completions").parse_body(b'{"choices":[{"text":""}]}')
    assert not comp.content and comp.prompt_tokens is None
    ant = get_endpoint("anthropic-messages").parse_body(
        b'{"content":[{"type":"text","text":"x"}],"usage":{"input_tokens":3,"output_tokens":4}}'
    )
    assert ant.content and (ant.prompt_tokens, ant.completion_tokens) == (3, 4)
    assert ant.cached_tokens is None


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"not json", "protocol"),
        (b"[]", "protocol"),
        (b'{"choices":[]}', "protocol"),
        (b'{"error":{"message":"nope","type":"invalid_request_error"}}', "client_error"),
    ],
)
def test_bad_json_bodies(raw, kind):
    out = get_endpoint("openai-chat").parse_body(raw)
    assert out.error_kind == kind and out.error


def test_error_texts_are_short_one_line_and_secret_free():
    text = "Incorrect API key provided: sk-abcdef123456.\n  More  " + "x" * 500
    out = one_line(text)
    assert "abcdef" not in out and "\n" not in out and len(out) <= 160


def test_template_fast_path_agrees_with_the_general_path():
    texts = ["a", 'say "hi"', "back\\", "", "é ü", "x"]
    events = [chat_chunk({"content": "first"})] + [chat_chunk({"content": t}) for t in texts]
    data = sse(*events)
    p = get_endpoint("openai-chat").stream_parser()
    p.feed(data, 1)
    assert len(p.times) == 1 + sum(1 for t in texts if t) and p.done
    # a line shaped like the template but cut short is still caught
    q = get_endpoint("openai-chat").stream_parser()
    line = sse(chat_chunk({"content": "ok"}), done=False)
    q.feed(line + line[:-12] + b"\n\n", 1)
    assert q.error_kind == "protocol" and len(q.times) == 1
