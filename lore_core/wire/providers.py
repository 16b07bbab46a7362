"""The providers the built-in codecs speak, declared as a third-party plugin declares its own
(``lore_register_providers``, in :mod:`lore_core.builtin.codecs`): the kernel outside
``wire/`` holds no provider name."""

from __future__ import annotations

from lore_core.interfaces import Provider

#: Anthropic: the Messages API (``lore_core/wire/anthropic``).
ANTHROPIC = Provider(
    name="anthropic",
    upstream="https://api.anthropic.com",
    key_header="x-api-key",
    key_prefix="",
    credential_headers=("anthropic-version", "anthropic-beta"),
    request_headers=("anthropic-version", "x-api-key"),
    request_paths=("/messages",),
    model_prefixes=("claude",),
)

#: OpenAI: Chat Completions and Responses (``lore_core/wire/openai_chat``,
#: ``openai_responses``). The default: what local servers and most gateways speak.
OPENAI = Provider(
    name="openai",
    upstream="https://api.openai.com",
    # Azure's key header, organisation and project, ChatGPT sign-in's account (Codex).
    credential_headers=("api-key", "openai-organization", "openai-project", "chatgpt-account-id"),
    default=True,
)

BUILTIN_PROVIDERS = (ANTHROPIC, OPENAI)
