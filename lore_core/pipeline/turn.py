"""The one object a request carries through the pipeline's phases."""

from __future__ import annotations

from typing import Any

import attrs

from lore_core.http.access import MemoryAccess
from lore_core.interfaces import Codec, CompositionContext, Harness, RequestContext
from lore_core.model import Exchange, RequestView

#: (the decoded body text, where each top-level member's value lies in it)
Spans = tuple[str, dict[str, tuple[int, int]]]


@attrs.define(eq=False)
class Turn:
    """One model request, from its bytes to the exchange the relay finishes.

    Filled in phase by phase: :mod:`~lore_core.pipeline.parse` sets the request fields,
    identification the harness, session and project, :mod:`~lore_core.pipeline.compose` the
    view that goes upstream and its bytes, :mod:`~lore_core.pipeline.send` the exchange."""

    codec: Codec
    path: str
    method: str
    query: str
    #: Lower-cased headers, for reading.
    headers: dict[str, str]
    #: The headers exactly as the client sent them (what travels upstream).
    client_headers: list[tuple[str, str]]
    #: The body as sent (still in its content-encoding), and parsed.
    body: bytes
    raw: dict[str, Any]
    spans: Spans | None
    #: The client's view of the request, as parsed.
    view: RequestView
    ctx: RequestContext | None = None
    harness: Harness | None = None
    session_id: str = ""
    project: str = ""
    #: Whether the request may reach memory (:mod:`lore_core.pipeline.ownership`); until
    #: decided, it may not.
    access: MemoryAccess = attrs.field(factory=lambda: MemoryAccess(False, "not decided yet"))
    #: The client's view with earlier recalls put back (what composition starts from).
    client_view: RequestView | None = None
    #: The upstream base URL and the full URL this request goes to.
    base: str = ""
    url: str = ""
    # -- one attempt (composed again after an overflow) --------------------------------------
    composing: CompositionContext | None = None
    #: The view that goes upstream, and its bytes and headers.
    sent: RequestView | None = None
    out_body: bytes = b""
    out_headers: list[tuple[str, str]] = attrs.field(factory=list)
    #: The gateway owns a recall tool in this request.
    recall_on: bool = False
    exchange: Exchange | None = None

    @property
    def harness_name(self) -> str:
        return self.harness.name if self.harness is not None else ""

    def new_exchange(self, upstream: str) -> Exchange:
        assert self.sent is not None
        return Exchange(
            api=self.codec.api,
            path=self.path,
            request=self.sent,
            harness=self.harness_name,
            session_id=self.session_id,
            project=self.project,
            upstream=upstream,
            composed=self.composing,
            server_state=self.codec.continues_server_state(self.sent),
        )
