"""The prompt layers of the gradient context manager, one per part of the prompt
(docs/context.md), registered through the same hook third-party layers use.

The context manager (:mod:`lore_core.context.manager`) decides the turn's layer and puts its
plan on ``ctx.composition``; these layers place the parts on the wire-neutral view, top to
bottom, in priority order. At layer 0 none of them touches the view (byte-for-byte
passthrough). At layers 1-4 the first one starts the message list anew from the harness's
preamble and each later one appends its part; the codec of the request's API renders the
result, keeping every field the client sent that the pipeline does not own.

Priorities leave room between them for plugins: 100 system, 200 LTM baseline, 300 LTM
context-bound, 400 distilled prefix, 600 conversation, 700 delta updates (placed into the
conversation), 900 cache breakpoints.
"""

from __future__ import annotations

from typing import Any

from lore_core.context.compose import Composition, prefix_messages
from lore_core.context.framing import escape_delimiters
from lore_core.hookspecs import hookimpl
from lore_core.interfaces import Codec, CompositionContext, PromptLayer
from lore_core.model import TEXT, Block, Message, RequestView


def _plan(ctx: CompositionContext) -> Composition | None:
    plan = ctx.composition
    return plan if isinstance(plan, Composition) and plan.modified else None


class _Layer(PromptLayer):
    name = ""
    priority = 0
    builtin = True

    def compose(self, view: RequestView, ctx: CompositionContext) -> RequestView:
        plan = _plan(ctx)
        if plan is not None:
            self.place(view, plan, ctx.codec)
        return view

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        raise NotImplementedError


class SystemLayer(_Layer):
    """The harness's own system prompt and preamble messages, as the client sent them."""

    name, priority = "system", 100

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        view.messages = list(plan.head)
        view.modified = True


def _ltm_place(view: RequestView, codec: Codec, text: str, label: str) -> None:
    # The text escapes stored text already (lore_core.knowledge.prompt); escaping the whole
    # again is a no-op for it and covers a pin an older version persisted (F9: an entry
    # holding "</lore-knowledge>" must not close the block).
    codec.add_system_text(view, f"<lore-{label}>\n{escape_delimiters(text)}\n</lore-{label}>")


class LtmBaselineLayer(_Layer):
    """Preferences, entities and the catalogue of project knowledge: frozen per session."""

    name, priority = "ltm-baseline", 200

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        if plan.ltm_baseline:
            _ltm_place(view, codec, plan.ltm_baseline, "knowledge")


class LtmContextLayer(_Layer):
    """Knowledge entries relevant to this session: pinned at first render."""

    name, priority = "ltm-context", 300

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        if plan.ltm_context:
            _ltm_place(view, codec, plan.ltm_context, "context")


class DistilledPrefixLayer(_Layer):
    """Meta-distillations and observation logs as a synthetic user/assistant pair, framed
    as reference data (:data:`lore_core.context.compose.PREFIX_HEADER`)."""

    name, priority = "distilled-prefix", 400

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        view.messages.extend(prefix_messages(plan.prefix))


class DeltaLayer(_Layer):
    """Knowledge that changed after the pin: each delta right after the request message it
    was first placed after, so every later turn has it at the same place. It runs after
    the conversation layer because it inserts into the conversation. A delta whose message
    is not in the window as it was sent (dropped or stripped by a compressed layer) goes
    at the window's start, right after the distilled prefix."""

    name, priority = "delta-updates", 700

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        if not plan.deltas:
            return
        start = len(view.messages) - len(plan.conversation)
        placed: dict[int, list[Message]] = {}
        for anchor, message in plan.deltas:
            at = next((i for i, m in enumerate(view.messages) if m is anchor), None)
            placed.setdefault(start - 1 if at is None else at, []).append(message)
        for at in sorted(placed, reverse=True):
            view.messages[at + 1 : at + 1] = placed[at]


class ConversationLayer(_Layer):
    """The raw window (with stripped tool outputs at layers 2-3)."""

    name, priority = "conversation", 600

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        view.messages.extend(plan.conversation)
        if codec.starts_with_user:
            _start_with_user(view)


def _start_with_user(view: RequestView) -> None:
    """A raw window that starts right after the preamble with an assistant message (nothing
    distilled before it) gets a one-line user placeholder, for APIs that want the first
    message to be the user's."""
    msgs = [m for m in view.messages if m.role in ("user", "assistant")]
    if msgs and msgs[0].role == "assistant":
        index = view.messages.index(msgs[0])
        view.messages.insert(
            index,
            Message(role="user", blocks=[Block(TEXT, text="[earlier messages omitted]")], synthetic=True),
        )


class CacheBreakpointLayer(_Layer):
    """Where the provider should cache the prompt, as the request's codec marks it
    (:meth:`lore_core.interfaces.Codec.place_cache_breakpoints`; providers that cache by
    prefix need no marks)."""

    name, priority = "cache-breakpoints", 900

    def place(self, view: RequestView, plan: Composition, codec: Codec) -> None:
        codec.place_cache_breakpoints(view, plan)


LAYERS = (
    SystemLayer(),
    LtmBaselineLayer(),
    LtmContextLayer(),
    DistilledPrefixLayer(),
    ConversationLayer(),
    DeltaLayer(),
    CacheBreakpointLayer(),
)


@hookimpl
def lore_register_prompt_layers(register: Any) -> None:
    for layer in LAYERS:
        register(layer)
