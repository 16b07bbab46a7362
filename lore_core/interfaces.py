"""The interfaces plugins implement. The kernel owns them; plugins own the behaviour.

Objects implementing these are handed to the kernel through the registration hooks in
:mod:`lore_core.hookspecs`. They are plain classes (``typing.Protocol`` is used for
documentation and type checking, not for runtime checks).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from lore_core.config import LoreConfig
    from lore_core.model import AssistantMessage, RequestView


# ---------------------------------------------------------------------------------------------
# Wire codecs
# ---------------------------------------------------------------------------------------------


class StreamAssembler(Protocol):
    """Rebuilds the full assistant message beside a relayed stream.

    ``feed`` receives decoded body bytes exactly as they arrive (chunk boundaries anywhere,
    even inside an SSE event); ``result`` may be called at any time and returns what was
    assembled so far, with ``complete`` set only once the API's terminal event was seen.
    """

    def feed(self, chunk: bytes) -> None: ...

    def result(self) -> AssistantMessage: ...


class Codec(Protocol):
    """One provider wire API (e.g. ``"anthropic-messages"``)."""

    #: Unique API name.
    api: str
    #: Which family of upstream serves it: ``"anthropic"`` or ``"openai"``.
    provider: str
    #: Path suffixes this codec owns, e.g. ``("/v1/messages",)``; a prefix before them (a
    #: base URL such as ``/anthropic``) is allowed.
    paths: Sequence[str]

    def parse(self, raw: dict[str, Any], body: bytes) -> RequestView:
        """Parse a request body into a view. Must accept unknown fields and item types."""

    def render(self, view: RequestView) -> dict[str, Any]:
        """Render a view back into wire JSON, keeping every field of ``view.raw`` that the
        pipeline did not change."""

    def parse_response(self, raw: dict[str, Any]) -> AssistantMessage:
        """Parse a non-streamed JSON response body."""

    def assembler(self) -> StreamAssembler:
        """A fresh assembler for one streamed response."""

    def error_body(self, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
        """An error body in this API's own shape."""


# ---------------------------------------------------------------------------------------------
# Harnesses
# ---------------------------------------------------------------------------------------------


@attrs.define
class RequestContext:
    """What a harness sees of an incoming request (headers lower-cased)."""

    path: str
    headers: Mapping[str, str]
    view: RequestView | None
    gateway_cwd: str = attrs.field(factory=os.getcwd)


@attrs.define
class LaunchPlan:
    """How to start a client wired to the gateway: argv, extra environment, files to write."""

    argv: list[str]
    env: dict[str, str] = attrs.field(factory=dict)
    # Temporary config files the launcher writes before starting (path -> content) and
    # removes afterwards.
    files: dict[str, str] = attrs.field(factory=dict)


class Harness(Protocol):
    """Knowledge of one coding client."""

    #: Name used by ``lore run <name>`` and stored with every session.
    name: str

    def recognise(self, ctx: RequestContext) -> int:
        """How surely this request came from this client: 0 = not at all, higher = surer."""

    def session_id(self, ctx: RequestContext) -> str | None:
        """The client's session id, or ``None`` to fall back to a content fingerprint."""

    def project(self, ctx: RequestContext) -> str | None:
        """The project (an absolute directory) the request works on, or ``None``."""

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        """How ``lore run <name> args...`` starts the client pointed at ``gateway_url``."""


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


class Store(Protocol):
    """A storage backend. The full contract is written down by the conformance suite in
    :mod:`lore_core.testing.store_conformance`; this lists the lifecycle every backend has."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def health(self) -> dict[str, Any]:
        """``{"ok": bool, "detail": str, ...}`` for ``/health`` and ``lore status``."""


StoreFactory = Callable[["LoreConfig"], Store]


# ---------------------------------------------------------------------------------------------
# Embeddings
# ---------------------------------------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into unit-length vectors. ``embed`` must not block the event loop."""

    name: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def health(self) -> dict[str, Any]: ...


EmbedderFactory = Callable[["LoreConfig"], Embedder]


# ---------------------------------------------------------------------------------------------
# Prompt composition
# ---------------------------------------------------------------------------------------------


@attrs.define
class CompositionContext:
    """Per-request facts a prompt layer may use."""

    session_id: str
    project: str
    harness: str
    codec: Codec


class PromptLayer(Protocol):
    """One step of prompt composition, run in ascending ``priority`` order."""

    name: str
    priority: int

    def compose(self, view: RequestView, ctx: CompositionContext) -> RequestView:
        """Return the view (possibly changed, with ``modified`` set)."""


# ---------------------------------------------------------------------------------------------
# Curation
# ---------------------------------------------------------------------------------------------


class Curator(Protocol):
    """A background job turning stored exchanges into derived memory."""

    name: str
    kind: str

    async def run(self, session_id: str, context: Any) -> None: ...
