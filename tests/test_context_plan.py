"""The re-composition rule (lore_core/context/plan.py) on its own: what makes a turn composed
afresh, in which order the reasons are asked, and what a kept composition reports."""

from __future__ import annotations

from lore_core.context.compose import Composition
from lore_core.context.economics import CacheState, Layer0Cap
from lore_core.context.plan import recompose_need

NO_CAP = Layer0Cap(None, "disabled")
CAP = Layer0Cap(1_000, "cost")


def need(
    layer: int = 0,
    *,
    server_state: bool = False,
    force_min_layer: int = 0,
    fits: bool = True,
    size: int = 500,
    cap: Layer0Cap = NO_CAP,
    holding: bool = False,
    expired: bool = False,
) -> tuple[str, str | None]:
    return recompose_need(
        Composition(layer),
        server_state=server_state,
        force_min_layer=force_min_layer,
        fits=fits,
        size=size,
        cap=cap,
        cache=CacheState(holding=holding),
        expired=expired,
    )


def test_a_prompt_that_fits_under_the_cap_is_kept() -> None:
    assert need() == ("", None)
    assert need(2, force_min_layer=2, cap=CAP, size=999) == ("", None)


def test_each_reason_to_compose_afresh() -> None:
    assert need(0, force_min_layer=1) == ("forced", None)
    assert need(0, fits=False) == ("overflow", None)
    assert need(0, cap=CAP, size=1_001) == ("cost", None)


def test_a_forced_layer_comes_before_an_overflow_and_an_overflow_before_the_cost() -> None:
    assert need(0, force_min_layer=2, fits=False, cap=CAP, size=5_000) == ("forced", None)
    assert need(0, fits=False, cap=CAP, size=5_000) == ("overflow", None)


def test_holding_after_busts_keeps_growing_past_the_cap_unless_the_cache_expired() -> None:
    assert need(0, cap=CAP, size=1_001, holding=True) == ("", "holding")
    assert need(2, cap=CAP, size=1_001, holding=True) == ("", None)  # a pinned layer keeps its reason
    assert need(0, cap=CAP, size=1_001, holding=True, expired=True) == ("cost", None)
    # Holding never keeps a prompt that does not fit.
    assert need(0, fits=False, cap=CAP, size=1_001, holding=True) == ("overflow", None)


def test_a_conversation_the_provider_keeps_is_never_composed_here() -> None:
    assert need(0, server_state=True, force_min_layer=3, fits=False, cap=CAP, size=9_999) == (
        "",
        "server-state",
    )
