"""The codec conformance suite: the contract of :class:`lore_core.interfaces.Codec` as tests.

Every wire codec subclasses :class:`CodecConformance` and must pass it against golden
transcripts of its API, as the three built-in codecs do (``tests/test_codec_conformance.py``)::

    from lore_core.testing.conformance.codec import CodecConformance, load_golden

    GOLDEN = load_golden(Path(__file__).parent / "data" / "my-api")

    class TestMyCodec(CodecConformance):
        requests = GOLDEN.requests     # [(name, request body)]
        responses = GOLDEN.responses   # [GoldenResponse(name, json body, SSE bytes)]
        # Where this API's error bodies keep the message and the error type.
        error_message_path = ("error", "message")
        error_type_path = ("error", "type")

        @pytest.fixture
        def codec(self):
            return MyCodec()

A golden directory holds ``request-<name>.json`` (a request body as a client sends it) and
pairs ``response-<name>.json`` / ``response-<name>.sse``: the same answer as the API returns
it without and with streaming, the stream ending with the API's terminal event.

What the gateway relies on: ``render`` of a view no layer changed gives back the client's
JSON exactly (unknown fields, roles and item types included) and ``parse`` never raises on
such a body; an assembler rebuilds from the stream what ``parse_response`` reads from the
JSON, whatever the chunking of the bytes (even inside a UTF-8 character), reports ``done``
exactly when the terminal event arrived and changes nothing after it; ``error_body`` is
JSON in the API's own shape; ``render_response`` makes answers that read back as the text.

Needs ``hypothesis`` (a dev dependency): import this module from tests only.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lore_core.interfaces import Codec, EditPolicy, StreamAssembler
from lore_core.model import AssistantMessage
from lore_core.wire.turns import EventSplitter

#: Member names, roles and item types no API defines.
UNKNOWN_KEY = "x_lore_conformance_unknown"
UNKNOWN_TYPE = "x_lore_conformance_type"
UNKNOWN_ROLE = "x_lore_conformance_role"

#: Texts ``render_response`` must carry through JSON and SSE unchanged.
ANSWER_TEXTS = (
    "made by the gateway",
    "",
    'quotes " and \\ backslashes, </script>, \u2028 line separator',
    "multi\nline\r\n\ttext",
    "ünïcödé, 中文, العربية, 🚀👨‍👩‍👧",
    "data: not an event\n\nevent: message_stop\n\n",
)


@attrs.frozen
class GoldenResponse:
    """One answer as the API sends it: the JSON body and the SSE stream."""

    name: str
    json: dict[str, Any]
    sse: bytes

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class Golden:
    requests: list[tuple[str, dict[str, Any]]]
    responses: list[GoldenResponse]


def load_golden(directory: Path) -> Golden:
    """The golden transcripts in ``directory`` (see the module docstring)."""
    requests = [(p.stem, json.loads(p.read_text())) for p in sorted(directory.glob("request-*.json"))]
    responses = []
    for path in sorted(directory.glob("response-*.json")):
        stream = path.with_suffix(".sse")
        assert stream.is_file(), f"{path.name} has no streamed twin {stream.name}"
        responses.append(GoldenResponse(path.stem, json.loads(path.read_text()), stream.read_bytes()))
    return Golden(requests, responses)


def summary(message: AssistantMessage, *, with_id: bool = True) -> dict[str, Any]:
    """What the gateway stores of an answer, as comparable data (the relayed bytes aside:
    blocks without their wire JSON)."""
    out = {
        "blocks": [
            (b.type, b.text, b.tool_name, b.tool_call_id, b.tool_input, b.is_error) for b in message.blocks
        ],
        "text": message.text,
        "usage": attrs.asdict(message.usage),
        "stop_reason": message.stop_reason,
        "model": message.model,
        "complete": message.complete,
        "error": message.error,
    }
    if with_id:
        out["response_id"] = message.response_id
    return out


def sse_events(stream: bytes) -> list[bytes]:
    """A stream cut into its events, each with its terminating blank line."""
    normalised = stream.replace(b"\r\n", b"\n")
    events = [part + b"\n\n" for part in normalised.split(b"\n\n") if part.strip()]
    assert b"".join(events) == normalised, "the golden stream must end with a blank line"
    return events


def split_at(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(data)})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def assemble(codec: Codec, chunks: Sequence[bytes], poll: bool = False) -> StreamAssembler:
    assembler = codec.assembler()
    for chunk in chunks:
        assembler.feed(chunk)
        if poll:
            assembler.result()  # "result may be called at any time"
    return assembler


def with_unknown_members(value: Any, extra: Any = None) -> Any:
    """``value`` with an unknown member in every object, and next to every object in an
    array that has a ``type`` (or ``role``) a copy of it with an unknown type (role):
    what a newer client or API version may send."""
    if isinstance(value, dict):
        out = {k: with_unknown_members(v, extra) for k, v in value.items()}
        out[UNKNOWN_KEY] = copy.deepcopy(extra) if extra is not None else {"n": 1, "list": [None, True, "ü"]}
        return out
    if isinstance(value, list):
        out_list: list[Any] = []
        for item in value:
            out_list.append(with_unknown_members(item, extra))
            if isinstance(item, dict) and isinstance(item.get("type"), str):
                out_list.append({**with_unknown_members(item, extra), "type": UNKNOWN_TYPE})
            if isinstance(item, dict) and isinstance(item.get("role"), str):
                out_list.append({**with_unknown_members(item, extra), "role": UNKNOWN_ROLE})
        return out_list
    return value


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
        ),
        max_leaves=8,
    )


PROPERTY = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    # Each parametrised case runs on a new test object; the examples are derandomized and
    # nothing is stored, so nothing can replay across them.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.differing_executors,
    ],
)


class CodecConformance:
    """Subclass in a ``test_*.py`` module: set ``requests`` and ``responses`` to the API's
    golden cases and provide the ``codec`` fixture."""

    #: (name, body) of golden request bodies.
    requests: ClassVar[Sequence[tuple[str, dict[str, Any]]]] = ()
    #: Golden answers, each as JSON and as a stream.
    responses: ClassVar[Sequence[GoldenResponse]] = ()
    #: Where an error body of this API holds the message, and the error type.
    error_message_path: ClassVar[Sequence[str]] = ("error", "message")
    error_type_path: ClassVar[Sequence[str]] = ("error", "type")
    #: Checks the codec is known to fail, as ``{"test_name" or "test_name[case id]":
    #: reason}``: run as strict xfails, so a fix turns them into failures to remove here.
    known_failures: ClassVar[dict[str, str]] = {}

    @pytest.fixture
    def codec(self) -> Codec:
        raise NotImplementedError("a codec's test class provides the codec fixture")

    # -- parametrisation -------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "golden_request" in metafunc.fixturenames:
            metafunc.parametrize("golden_request", self._params(self.requests, [n for n, _ in self.requests]))
        if "golden_response" in metafunc.fixturenames:
            metafunc.parametrize(
                "golden_response", self._params(self.responses, [r.name for r in self.responses])
            )

    def _params(self, values: Sequence[Any], ids: Sequence[str]) -> list[Any]:
        return [pytest.param(value, id=ident) for value, ident in zip(values, ids, strict=True)]

    @pytest.fixture(autouse=True)
    def _known_failure(self, request: pytest.FixtureRequest) -> None:
        """Mark the checks named in ``known_failures`` as strict xfails."""
        node = request.node
        reason = self.known_failures.get(node.name) or self.known_failures.get(node.originalname)
        if reason is not None:
            node.add_marker(pytest.mark.xfail(reason=reason, strict=True))

    # -- helpers ---------------------------------------------------------------------------

    def roundtrip(self, codec: Codec, body: dict[str, Any]) -> None:
        """Parse a copy of ``body`` and render the unchanged view: the same JSON back."""
        sent = json.dumps(body).encode()
        raw = json.loads(sent)
        view = codec.parse(raw, sent)
        assert raw == body, "parse changed the body it was given"
        assert view.api == codec.api
        rendered = codec.render(view)
        assert rendered == body, "render of an unchanged view is not the client's JSON"
        assert json.loads(json.dumps(rendered)) == body

    def at(self, body: Any, path: Sequence[str]) -> Any:
        for key in path:
            assert isinstance(body, dict) and key in body, f"no {'.'.join(path)} in {body}"
            body = body[key]
        return body

    # -- identity ----------------------------------------------------------------------------

    def test_identity(self, codec: Codec) -> None:
        assert isinstance(codec.api, str) and codec.api
        # A provider's name (declared with lore_register_providers), not a closed list.
        assert isinstance(codec.provider, str) and codec.provider, codec.provider
        paths = list(codec.paths)
        assert paths and all(isinstance(p, str) and p.startswith("/") and p != "/" for p in paths), paths
        assert self.requests, "the suite needs golden request bodies"
        assert self.responses, "the suite needs golden responses"

    # -- requests ----------------------------------------------------------------------------

    def test_render_of_an_unchanged_view_is_the_same_json(
        self, codec: Codec, golden_request: tuple[str, dict[str, Any]]
    ) -> None:
        self.roundtrip(codec, golden_request[1])

    def test_view_reads_model_and_stream(
        self, codec: Codec, golden_request: tuple[str, dict[str, Any]]
    ) -> None:
        body = golden_request[1]
        view = codec.parse(copy.deepcopy(body), json.dumps(body).encode())
        assert view.model == (body["model"] if isinstance(body.get("model"), str) else None)
        assert view.stream is (body.get("stream") is True)

    def test_unknown_fields_roles_and_types_round_trip(
        self, codec: Codec, golden_request: tuple[str, dict[str, Any]]
    ) -> None:
        self.roundtrip(codec, with_unknown_members(golden_request[1]))

    @PROPERTY
    @given(data=st.data())
    def test_any_unknown_members_round_trip(
        self, codec: Codec, golden_request: tuple[str, dict[str, Any]], data: st.DataObject
    ) -> None:
        extra = data.draw(_json_values(), label="unknown member")
        self.roundtrip(codec, with_unknown_members(golden_request[1], extra))

    # -- responses ---------------------------------------------------------------------------

    def test_parse_response_equals_the_assembled_stream(
        self, codec: Codec, golden_response: GoldenResponse
    ) -> None:
        parsed = codec.parse_response(copy.deepcopy(golden_response.json))
        assembled = assemble(codec, [golden_response.sse]).result()
        assert parsed.complete, "a golden answer is complete"
        assert summary(assembled) == summary(parsed)

    def test_the_assembler_is_invariant_under_chunking(
        self, codec: Codec, golden_response: GoldenResponse
    ) -> None:
        stream = golden_response.sse
        whole = assemble(codec, [stream])
        expected = summary(whole.result())
        assert whole.done
        rng = random.Random(f"{codec.api}/{golden_response.name}")
        chunkings = {
            "byte by byte": [stream[i : i + 1] for i in range(len(stream))],
            "by event": sse_events(stream),
            "with empty chunks": [b"", *[stream[i : i + 7] for i in range(0, len(stream), 7)], b""],
        }
        for n in range(20):
            chunkings[f"random {n}"] = split_at(
                stream, [rng.randrange(1, len(stream)) for _ in range(rng.randint(1, 40))]
            )
        for label, chunks in chunkings.items():
            assert b"".join(chunks) == stream
            for poll in (False, True):
                assembler = assemble(codec, chunks, poll=poll)
                assert assembler.done, label
                assert summary(assembler.result()) == expected, f"{label} (polled: {poll})"

    @PROPERTY
    @given(data=st.data())
    def test_any_chunking_gives_the_same_answer(
        self, codec: Codec, golden_response: GoldenResponse, data: st.DataObject
    ) -> None:
        stream = golden_response.sse
        cuts = data.draw(st.lists(st.integers(1, len(stream) - 1), max_size=60), label="cuts")
        assembler = assemble(codec, split_at(stream, cuts))
        assert assembler.done
        assert summary(assembler.result()) == summary(assemble(codec, [stream]).result())

    def test_done_only_at_the_terminal_event(self, codec: Codec, golden_response: GoldenResponse) -> None:
        stream = golden_response.sse
        assembler = codec.assembler()
        for i in range(len(stream) - 1):
            assembler.feed(stream[i : i + 1])
            assert not assembler.done, f"done after {i + 1} of {len(stream)} bytes, before the terminal event"
            assert not assembler.result().complete, f"complete after {i + 1} of {len(stream)} bytes"
        assembler.feed(stream[-1:])
        assert assembler.done, "not done once the terminal event arrived"
        assert assembler.result().complete

    def test_nothing_after_the_terminal_event_changes_the_result(
        self, codec: Codec, golden_response: GoldenResponse
    ) -> None:
        assembler = assemble(codec, [golden_response.sse])
        expected = summary(assembler.result())
        # Whatever follows (a keep-alive comment, the same events again) changes nothing.
        trailers = [b": keep-alive\n\n", *sse_events(golden_response.sse)]
        for i, trailer in enumerate(trailers):
            assembler.feed(trailer)
            assert assembler.done
            assert summary(assembler.result()) == expected, f"changed by trailer {i}: {trailer[:300]!r}"

    def test_assemblers_are_independent(self, codec: Codec, golden_response: GoldenResponse) -> None:
        events = sse_events(golden_response.sse)
        first, second = codec.assembler(), codec.assembler()
        for event in events:
            first.feed(event)
        expected = summary(first.result())
        third = codec.assembler()
        for event in events:
            second.feed(event)
            third.feed(event[: len(event) // 2])
            third.feed(event[len(event) // 2 :])
        assert summary(second.result()) == expected == summary(third.result())
        assert summary(first.result()) == expected
        assert not codec.assembler().done and not codec.assembler().result().complete

    # -- turn editors ------------------------------------------------------------------------

    def test_a_pass_through_stream_editor_returns_the_upstreams_bytes(
        self, codec: Codec, golden_response: GoldenResponse
    ) -> None:
        """An editor that holds no tool and scales nothing gives the client the upstream's
        bytes, whatever the chunking."""
        editor = codec.stream_editor(EditPolicy(hold_tool=None, context_limit=0, usage_share=0.0))
        if editor is None:
            pytest.skip("the codec has no stream editor: streams are relayed byte for byte")
        splitter = EventSplitter()
        out = b""
        for chunk in split_at(golden_response.sse, range(7, len(golden_response.sse), 7)):
            out += b"".join(editor.event(name, data, raw) for name, data, raw in splitter.feed(chunk))
        result = editor.end_round()
        assert not result.recall_calls
        out += editor.finish()
        assert out == golden_response.sse.replace(b"\r\n", b"\n")

    def test_a_pass_through_buffered_editor_changes_nothing(
        self, codec: Codec, golden_response: GoldenResponse
    ) -> None:
        editor = codec.buffered_editor(EditPolicy(hold_tool=None, context_limit=0, usage_share=0.0))
        if editor is None:
            pytest.skip("the codec has no buffered editor: answers are relayed as they came")
        result = editor.add_round(golden_response.json)
        assert not result.recall_calls
        assert not editor.rewrites(golden_response.json)

    # -- answers the gateway makes ---------------------------------------------------------

    @pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 429, 500, 502, 529])
    @pytest.mark.parametrize("error_type", [None, "overloaded_error"])
    def test_error_body_is_json_in_the_apis_shape(
        self, codec: Codec, status: int, error_type: str | None
    ) -> None:
        message = 'the gateway says: "no" - ünïcödé'
        body = codec.error_body(status, message, error_type)
        assert isinstance(body, dict)
        assert json.loads(json.dumps(body)) == body
        assert self.at(body, self.error_message_path) == message
        kind = self.at(body, self.error_type_path)
        if error_type is None:
            assert isinstance(kind, str) and kind, kind
        else:
            assert kind == error_type
        assert codec.parse_response(copy.deepcopy(body)).complete is False, (
            "an error body is no complete answer"
        )

    @pytest.mark.parametrize("model", ["model-7", None])
    @pytest.mark.parametrize("text", ANSWER_TEXTS, ids=[f"text{i}" for i in range(len(ANSWER_TEXTS))])
    def test_render_response_reads_back_as_the_text(self, codec: Codec, text: str, model: str | None) -> None:
        body, content_type = codec.render_response(text, model, False)
        assert content_type.split(";")[0].strip() == "application/json"
        assert isinstance(body, bytes)
        parsed = codec.parse_response(json.loads(body))
        assert parsed.complete and parsed.error is None
        assert parsed.text == text
        if model is not None:
            assert parsed.model == model

        stream, content_type = codec.render_response(text, model, True)
        assert content_type.split(";")[0].strip() == "text/event-stream"
        assert isinstance(stream, bytes)
        for chunks in ([stream], [stream[i : i + 1] for i in range(len(stream))]):
            assembler = assemble(codec, chunks)
            assert assembler.done
            streamed = assembler.result()
            assert streamed.complete and streamed.text == text
            assert summary(streamed, with_id=False) == summary(parsed, with_id=False)
