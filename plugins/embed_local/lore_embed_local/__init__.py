"""On-device embeddings for Lore: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime.

Importing this package is cheap: the model, numpy, onnxruntime and tokenizers load on the
first embedding.
"""

from lore_embed_local.config import EmbedLocalConfig
from lore_embed_local.embedder import LocalEmbedder
from lore_embed_local.errors import EmbedderUnavailable
from lore_embed_local.model import DIMENSIONS, MODEL_ID

__all__ = ["DIMENSIONS", "MODEL_ID", "EmbedLocalConfig", "EmbedderUnavailable", "LocalEmbedder"]
