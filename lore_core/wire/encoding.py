"""Content-Encoding: decode request bodies and, incrementally, response streams."""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli
import zstandard


class UnsupportedEncoding(ValueError):
    pass


class Decoder(Protocol):
    """An incremental decoder (zlib's and zstandard's decompress objects are ones)."""

    def decompress(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes:
        """What is still buffered once the input has ended."""
        ...

    @property
    def eof(self) -> bool: ...


class _Identity:
    eof = True

    def decompress(self, data: bytes) -> bytes:
        return data

    def flush(self) -> bytes:
        return b""


class _Brotli:
    def __init__(self) -> None:
        self._d = brotli.Decompressor()

    def decompress(self, data: bytes) -> bytes:
        return self._d.process(data)

    def flush(self) -> bytes:
        return b""  # brotli's decompressor buffers nothing past what process() returned

    @property
    def eof(self) -> bool:
        return bool(self._d.is_finished())


class _Chain:
    """``Content-Encoding: gzip, br`` means gzip first, then br: undo them in reverse."""

    def __init__(self, decoders: list[Decoder]) -> None:
        self._decoders = decoders

    def decompress(self, data: bytes) -> bytes:
        for decoder in self._decoders:
            data = decoder.decompress(data)
        return data

    def flush(self) -> bytes:
        data = b""
        for decoder in self._decoders:
            data = (decoder.decompress(data) if data else b"") + decoder.flush()
        return data

    @property
    def eof(self) -> bool:
        return all(d.eof for d in self._decoders)


def _one(name: str) -> Decoder:
    if name in ("", "identity"):
        return _Identity()
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
        return zlib.decompressobj()
    if name == "br":
        return _Brotli()
    if name == "zstd":
        return zstandard.ZstdDecompressor().decompressobj()
    raise UnsupportedEncoding(f"unsupported content-encoding {name!r}")


def decoder_for(content_encoding: str | None) -> Decoder:
    names = [n.strip().lower() for n in (content_encoding or "").split(",") if n.strip()]
    if len(names) <= 1:
        return _one(names[0] if names else "")
    return _Chain([_one(n) for n in reversed(names)])


def decode_body(body: bytes, content_encoding: str | None) -> bytes:
    """Decode a whole body; raises ``ValueError`` (or a subclass) when it is not valid."""
    if not content_encoding or content_encoding.strip().lower() == "identity":
        return body
    try:
        decoder = decoder_for(content_encoding)
        if isinstance(decoder, _Identity):
            return body
        data = decoder.decompress(body)
    except UnsupportedEncoding:
        raise
    except Exception as exc:
        raise ValueError(f"body is not valid {content_encoding}: {exc}") from None
    # The decoders return what they could of a stream cut short (a gzip body without its
    # trailer decodes to the whole JSON): a whole body must be a whole stream.
    if not decoder.eof:
        raise ValueError(f"body is not valid {content_encoding}: the compressed data ends early")
    return data
