"""Content-Encoding: decode request bodies and, incrementally, response streams."""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli
import zstandard


class UnsupportedEncoding(ValueError):
    pass


class Decoder(Protocol):
    def decompress(self, data: bytes) -> bytes: ...


class _Identity:
    def decompress(self, data: bytes) -> bytes:
        return data


class _Brotli:
    def __init__(self) -> None:
        self._d = brotli.Decompressor()

    def decompress(self, data: bytes) -> bytes:
        return self._d.process(data)


class _Chain:
    """``Content-Encoding: gzip, br`` means gzip first, then br: undo them in reverse."""

    def __init__(self, decoders: list[Decoder]) -> None:
        self._decoders = decoders

    def decompress(self, data: bytes) -> bytes:
        for decoder in self._decoders:
            data = decoder.decompress(data)
        return data


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
        return decoder.decompress(body)
    except UnsupportedEncoding:
        raise
    except Exception as exc:
        raise ValueError(f"body is not valid {content_encoding}: {exc}") from None
