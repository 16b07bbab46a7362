"""The gradient context manager's engine: token counts, model prices, and the cost rules.

The modules here are pure and cheap to import: :mod:`tiktoken` is loaded only when the first
token is counted, so ``import lore_core`` and the gateway start fast.
"""
