"""Model prices and limits: the shipped table (``models.json``) plus ``.lore.json`` overrides.

A model name is matched by its longest prefix in the table (``claude-sonnet-4-5-20250929``
matches ``claude-sonnet-4-5``). A model that matches nothing gets the table's ``default``: the
prices of Claude Opus 4 (as high as any but premium reasoning models) and a 128K window, so
that an unknown model makes the context manager compress early and the cost tracker over-
rather than under-report.

Every entry may leave fields out; a missing field comes from the longest *shorter* prefix that
has an entry, down to the default. The ``models`` section of ``.lore.json`` adds prefixes or
overrides single fields of shipped ones (the prefix ``""`` overrides the default).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import attrs

from lore_core.config import ConfigError, ModelConfig, _camel, structure_section
from lore_core.model import Usage

PER_MTOK = 1_000_000

_FIELDS = tuple(field.name for field in attrs.fields(ModelConfig))
# Fields every resolved model must have (``cache_write_hour`` may be null: no 1-hour TTL).
_REQUIRED = tuple(name for name in _FIELDS if name != "cache_write_hour")


@attrs.frozen
class ModelInfo:
    """Resolved prices (USD per million tokens) and limits of one model."""

    #: The table entry that matched (``""``: the default).
    prefix: str
    input: float
    output: float
    cache_read: float
    cache_write: float
    #: ``None`` where the provider has no 1-hour cache TTL.
    cache_write_hour: float | None
    context_window: int
    max_input_tokens: int
    max_output_tokens: int
    cache_ttl_seconds: int

    @property
    def input_per_token(self) -> float:
        return self.input / PER_MTOK

    @property
    def cache_read_per_token(self) -> float:
        return self.cache_read / PER_MTOK

    @property
    def cache_write_per_token(self) -> float:
        return self.cache_write / PER_MTOK

    def cost(self, usage: Usage, cache_write_hour_tokens: int = 0) -> float:
        """USD of one response's usage. ``cache_write_hour_tokens`` is the part of
        ``usage.cache_write_tokens`` written with the 1-hour TTL (billed at its own price)."""
        hour = min(max(cache_write_hour_tokens, 0), usage.cache_write_tokens)
        hour_price = self.cache_write if self.cache_write_hour is None else self.cache_write_hour
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + (usage.cache_write_tokens - hour) * self.cache_write
            + hour * hour_price
        ) / PER_MTOK


def normalise_model_name(model: str) -> str:
    """The name as the table spells it: lower case, without a router's ``vendor/`` prefix or
    a cloud's ``us.anthropic.`` prefix, and Claude version dots as dashes
    (``anthropic/claude-opus-4.5`` -> ``claude-opus-4-5``)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    if "anthropic." in name:
        name = name.split("anthropic.", 1)[1]
    if name.startswith("claude"):
        name = re.sub(r"(?<=\d)\.(?=\d)", "-", name)
    return name


# A partial entry: only the fields it sets (field name -> value).
Partial = dict[str, Any]


def _partial_from_json(raw: Any, where: str) -> Partial:
    config = structure_section(raw, ModelConfig, where)
    # In the shipped table an explicit null means "none" (no 1-hour TTL), not "inherit":
    # keep every key the entry spells out.
    present = set(raw)
    # getattr: ModelConfig's attrs fields, by name.
    return {name: getattr(config, name) for name in _FIELDS if _camel(name) in present}


def _partial_from_config(config: ModelConfig) -> Partial:
    # getattr: ModelConfig's attrs fields, by name.
    return {name: value for name in _FIELDS if (value := getattr(config, name)) is not None}


@functools.cache
def shipped_table() -> tuple[Partial, dict[str, Partial]]:
    """The default entry and the per-prefix entries of the packaged ``models.json``."""
    text = resources.files("lore_core.context").joinpath("models.json").read_text(encoding="utf-8")
    data = json.loads(text)
    default = _partial_from_json(data["default"], "models.json: default")
    missing = [name for name in _FIELDS if name not in default]
    if missing:
        raise ConfigError(f"models.json: default: missing {', '.join(_camel(n) for n in missing)}")
    entries = {
        prefix.lower(): _partial_from_json(raw, f"models.json: models.{prefix}")
        for prefix, raw in data["models"].items()
    }
    return default, entries


class PriceTable:
    """Looks up :class:`ModelInfo` by model name: longest prefix, field-wise inheritance."""

    def __init__(self, overrides: Mapping[str, ModelConfig] | None = None) -> None:
        default, shipped = shipped_table()
        self._default = default
        self._shipped = shipped
        self._overrides = {prefix.lower(): _partial_from_config(c) for prefix, c in (overrides or {}).items()}
        # Longest first, so the first match is the longest one.
        self._prefixes = sorted((set(self._shipped) | set(self._overrides)) - {""}, key=len, reverse=True)
        self._cache: dict[str, ModelInfo] = {}

    @classmethod
    def from_config(cls, config: Any) -> PriceTable:
        """The table for a :class:`~lore_core.config.LoreConfig` (its ``models`` section)."""
        return cls(config.models)

    def match(self, model: str | None) -> str:
        """The prefix that ``model`` resolves to (``""`` for the default)."""
        name = normalise_model_name(model or "")
        for prefix in self._prefixes:
            if name.startswith(prefix):
                return prefix
        return ""

    def _fields(self, prefix: str) -> Partial:
        """All fields for an entry: its own, then the longest shorter prefix's, ... then the
        default's (an override of a prefix beats the shipped entry of that prefix)."""
        if prefix == "":
            return {**self._default, **self._overrides.get("", {})}
        shorter = next((p for p in self._prefixes if len(p) < len(prefix) and prefix.startswith(p)), "")
        return {**self._fields(shorter), **self._shipped.get(prefix, {}), **self._overrides.get(prefix, {})}

    def lookup(self, model: str | None) -> ModelInfo:
        """Prices and limits for ``model`` (the default for ``None`` or an unknown name)."""
        prefix = self.match(model)
        info = self._cache.get(prefix)
        if info is None:
            fields = self._fields(prefix)
            missing = [_camel(name) for name in _REQUIRED if fields.get(name) is None]
            if missing:
                raise ConfigError(f"models.{prefix}: {', '.join(missing)} cannot be null")
            # Any: the required fields were checked for None just above.
            values: dict[str, Any] = {name: fields.get(name) for name in _FIELDS}
            info = ModelInfo(prefix=prefix, **values)
            self._cache[prefix] = info
        return info
