"""The gradient context manager: token counts, model prices, the cost rules, the layer engine
(:mod:`~lore_core.context.compose`), the rules of a turn's layer choice
(:mod:`~lore_core.context.plan`), the per-session state (:mod:`~lore_core.context.sessions`)
and the manager the gateway holds (:mod:`~lore_core.context.manager`).

The modules here are cheap to import: :mod:`tiktoken` is loaded only when the first token is
counted, so ``import lore_core`` and the gateway start fast.
"""
