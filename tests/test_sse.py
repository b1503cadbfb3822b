"""Server-sent events by the spec: the decoder, and its fast path proved equal to the plain one."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmlat._apis import get_endpoint
from llmlat._apis.sse import SSEDecoder


class Collect(SSEDecoder):
    __slots__ = ("events",)

    def __init__(self, *, fast):
        super().__init__(fast=fast)
        self.events = []

    def on_event(self, data, event):
        self.events.append((data, event))


def decode(chunks, *, fast=True):
    decoder = Collect(fast=fast)
    for chunk in chunks:
        decoder.decode(chunk)
    return decoder.events


def test_multi_line_data_endings_comments_and_ignored_fields():
    stream = (
        b"\xef\xbb\xbf: a comment\r\n"
        b"retry: 100\rid: 7\n"
        b"event: delta\r\ndata: first\r\ndata:second\r\n\r\n"  # CRLF
        b"data: one\rdata\r\r"  # CR alone; a bare "data" field adds an empty line
        b"data: x\n\n"
        b"event: ping\n\n"  # no data: nothing dispatched, the name is dropped
        b"data: after\n\n"
        b"data: cut off by the end"
    )
    expected = [
        (b"first\nsecond", b"delta"),
        (b"one\n", None),
        (b"x", None),
        (b"after", None),
    ]
    for size in (1, 2, 3, 5, len(stream)):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert decode(chunks) == expected, size
        assert decode(chunks, fast=False) == expected, size


def test_an_empty_event_name_set_in_an_earlier_read_still_names_the_event():
    chunks = [b"event:\n", b"data: a\n\n", b"data: b\n\n"]
    assert decode(chunks) == decode(chunks, fast=False) == [(b"a", b""), (b"b", None)]


def test_a_crlf_split_between_reads_is_one_line_ending():
    assert decode([b"data: a\r", b"\n\r", b"\n"]) == [(b"a", None)]
    assert decode([b"data: a\r", b"\r"]) == [(b"a", None)]  # two CR endings: a blank line


# the alphabet of tricky streams: field names, separators, every line ending, comments
_PIECES = st.sampled_from(
    [b"data", b"data:", b"data: ", b"event:", b"id: 1", b"retry: 5", b":", b"x", b"{}", b" ",
     b"\n", b"\r", b"\r\n", b"\n\n", b"\xef\xbb\xbf", b"[DONE]", b"da", b"ta: y"]
)  # fmt: skip
# well-formed one-line events, the fast path's food (values with spaces and colons at the ends)
_EVENTS = st.builds(
    lambda value: b"data: " + value + b"\n\n",
    st.lists(st.sampled_from([b" ", b"x", b":", b"{}", b"\t"]), max_size=4).map(b"".join),
)


@settings(max_examples=500, deadline=None)
@given(
    segments=st.lists(st.one_of(_EVENTS, _EVENTS, _PIECES), max_size=30),
    cut_at_segments=st.lists(st.booleans(), max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_the_fast_path_gives_the_events_of_the_plain_path_on_any_stream_and_split(
    segments, cut_at_segments, cuts
):
    stream = b"".join(segments)
    ends = [sum(map(len, segments[: i + 1])) for i in range(len(segments))]
    chosen = {end for end, cut in zip(ends, cut_at_segments, strict=False) if cut}
    bounds = sorted({0, len(stream), *chosen, *(c for c in cuts if c < len(stream))})
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode(chunks) == decode(chunks, fast=False) == decode([stream], fast=False)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(max_size=8), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
)
def test_llm_shaped_streams_count_the_same_content_whatever_the_split(texts, cuts):
    events = [{"choices": [{"delta": {"content": t}}]} for t in texts]
    stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    stream += b"data: [DONE]\n\n"
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    parser = get_endpoint("openai-chat").stream_parser()
    for a, b in itertools.pairwise(bounds):
        parser.feed(stream[a:b], a)
    assert parser.ended and parser.error is None
    assert len(parser.times) == sum(1 for t in texts if t)


# events of OpenAI and Anthropic streams, good and bad, for the parsers' fast and plain paths
_API_EVENTS = {
    "openai-chat": [
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"a b"},"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"delta":{"reasoning_content":"r"}}]}\n\n',
        b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n',
        b'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n',
        b'data: {"choices":[{"delta":{"content":"a"}}]\n\n',  # cut JSON
        b'data: {"choices":"x"}\n\n',  # an unexpected shape
        b"data: [DONE]\n\n",
        b": keep-alive\n\n",
        b'data: {"choices":\ndata: [{"delta":{"content":"two lines"}}]}\n\n',
    ],
    "anthropic-messages": [
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":'
        b'{"input_tokens":5,"output_tokens":1}}}\n\n',
        b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}\n\n',
        b'event: ping\ndata: {"type":"ping"}\n\n',
        b'data: {"type":"message_delta","usage":{"output_tokens":7}}\n\n',
        b'data: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n',
        b'data: {"type":"content_block_delta"}\n\n',  # no delta: an unexpected shape
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ],
}
_PARSED = ("times", "prompt_tokens", "completion_tokens", "cached_tokens", "done", "ended")


@settings(max_examples=300, deadline=None)
@given(
    api=st.sampled_from(sorted(_API_EVENTS)),
    picks=st.lists(st.integers(min_value=0, max_value=99), max_size=25),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8),
)
def test_the_parsers_fast_path_gives_what_the_plain_one_does_on_any_stream_and_split(
    api, picks, cuts
):
    events = _API_EVENTS[api]
    # mostly content, as real streams are, with anything else now and then
    stream = b"".join(events[p % len(events)] if p % 3 else events[1] for p in picks)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    kind = type(get_endpoint(api).stream_parser())
    fast, plain = kind(), kind(fast=False)
    for parser in (fast, plain):
        for i, (a, b) in enumerate(itertools.pairwise(bounds)):
            if parser.feed(stream[a:b], i):
                break
    assert [getattr(fast, k) for k in _PARSED] == [getattr(plain, k) for k in _PARSED]
    assert (fast.error_kind, fast.error) == (plain.error_kind, plain.error)


@pytest.mark.parametrize(
    "bad",
    [
        b'data: {"choices":[{"delta":{"content":"\xff\xfe"}}]}\n\n',  # invalid UTF-8
        b'data: {"choices":[{"delta":{"content":"a"}}]\n\n',  # cut JSON, content-shaped
        b'data: {"choices":[{"delta":{"content":"a"}}]}}\n\n',  # trailing garbage
    ],
)
def test_malformed_events_after_content_are_protocol_errors_not_content(bad):
    good = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    parser = get_endpoint("openai-chat").stream_parser()
    assert parser.feed(good * 3 + bad + good, 1)  # True: stop reading
    assert parser.error_kind == "protocol" and len(parser.times) == 3


def test_the_read_ends_at_the_end_of_message_and_later_bytes_are_ignored():
    parser = get_endpoint("openai-chat").stream_parser()
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    assert not parser.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n', 1)
    assert parser.feed(usage + b"data: [DONE]\n\ndata: {not json}\n\n", 2)
    assert parser.done and parser.ended and parser.error is None
    assert parser.completion_tokens == 1
    anthropic = get_endpoint("anthropic-messages").stream_parser()
    assert anthropic.feed(b'event: message_stop\ndata: {"type":"message_stop"}\n\n', 3)
    assert anthropic.done and anthropic.ended


def test_an_endless_line_is_a_protocol_error():
    parser = get_endpoint("openai-chat").stream_parser()
    chunk = b"data: " + b"x" * (1 << 20)
    for _ in range(9):
        if parser.feed(chunk, 1):
            break
    assert parser.error_kind == "protocol" and "longer than" in parser.error
