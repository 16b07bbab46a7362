"""The rules of one turn's layer choice that need nothing but what is known of the turn
(docs/context.md): what the prompt may use (:func:`usable_tokens`), and whether the turn is
composed afresh, and why (:func:`recompose_need`). The context manager
(:mod:`~lore_core.context.manager`) gathers what they read (the session's state, the
store's distillations and knowledge) and acts on their answers.
"""

from __future__ import annotations

from lore_core.context.compose import Composition
from lore_core.context.economics import CacheState, Layer0Cap
from lore_core.context.pricing import ModelInfo
from lore_core.model import RequestView


def usable_tokens(model: ModelInfo, view: RequestView) -> int:
    """What the prompt may use: the model's input limit, and no more than the window leaves
    beside the output the request asks for."""
    raw = view.raw
    asked = raw.get("max_tokens") or raw.get("max_completion_tokens") or raw.get("max_output_tokens")
    limit = model.max_input_tokens
    if isinstance(asked, int) and asked > 0 and model.context_window - asked > 0:
        limit = min(limit, model.context_window - asked)
    return limit


def recompose_need(
    current: Composition,
    *,
    server_state: bool,
    force_min_layer: int,
    fits: bool,
    size: int,
    cap: Layer0Cap,
    cache: CacheState,
    expired: bool,
) -> tuple[str, str | None]:
    """Whether the turn is composed afresh rather than sent as ``current`` (the pinned
    composition with the new messages appended, or layer 0), and why: ``"forced"`` (the
    session's turns start at a higher layer), ``"overflow"`` (``current`` does not fit: not
    ``fits``), ``"cost"`` (it is past the layer-0 cap at ``size`` corrected tokens, and not
    holding after repeated busts, or the cache expired), ``""`` (kept). The second value is
    the reason ``current`` then reports instead of its own (``None``: its own)."""
    if server_state:
        # The history lives upstream (the provider keeps the conversation): this request carries
        # only the new items, and there is nothing here to compose.
        return "", "server-state"
    if current.layer < force_min_layer:
        return "forced", None
    if not fits:
        return "overflow", None
    if cap.tokens is not None and size > cap.tokens:
        if not cache.holding or expired:
            return "cost", None
        if current.layer == 0:
            return "", "holding"  # after repeated busts: keep growing
    return "", None
