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

    def decompress_at_most(self, data: bytes, size: int | None) -> bytes:
        """The output of ``data``, stopping once it reaches ``size`` bytes (None: all)."""
        if size is None:
            return self._d.process(data)
        return self._d.process(data, output_buffer_limit=size)

    def can_accept_more_data(self) -> bool:
        """False while output of the input given is still held (past an output limit)."""
        return bool(self._d.can_accept_more_data())

    def flush(self) -> bytes:
        return b""  # brotli's decompressor buffers nothing past what process() returned

    @property
    def eof(self) -> bool:
        return bool(self._d.is_finished())


_ZLIB_DECODER = type(zlib.decompressobj())


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


def decoder_for(content_encoding: str | None, limit: int | None = None) -> Decoder:
    """An incremental decoder for a stream; with ``limit``, one whose whole output stops
    there (:class:`BoundedDecoder`: a bomb raises :class:`BodyTooLarge` before its output
    is built)."""
    names = [n.strip().lower() for n in (content_encoding or "").split(",") if n.strip()]
    stages = [_one(n) for n in reversed(names)] or [_Identity()]
    if limit is not None:
        stages = [BoundedDecoder(stage, limit) for stage in stages]
    return stages[0] if len(stages) == 1 else _Chain(stages)


class BoundedDecoder:
    """An incremental decoder whose output, summed over its calls, may not pass ``limit``
    bytes: :class:`BodyTooLarge` then. Each call to the decoder it wraps is made to give at
    most about what is left (zlib's ``max_length``, brotli's output limit, zstd fed in
    pieces of ``limit // ZSTD_MAX_RATIO`` bytes), so a few KiB that would decode to
    gigabytes never are."""

    def __init__(self, decoder: Decoder, limit: int) -> None:
        self._decoder = decoder
        self.limit = limit
        self.produced = 0

    def _count(self, out: bytes) -> bytes:
        self.produced += len(out)
        if self.produced > self.limit:
            raise BodyTooLarge(self.limit)
        return out

    def _room(self) -> int:
        return self.limit - self.produced + 1  # one byte more says "too large"

    def decompress(self, data: bytes) -> bytes:
        decoder = self._decoder
        parts: list[bytes] = []
        if isinstance(decoder, _Identity):
            return data
        if isinstance(decoder, _Brotli):
            parts.append(self._count(decoder.decompress_at_most(data, self._room())))
            while not decoder.eof and not decoder.can_accept_more_data():
                parts.append(self._count(decoder.decompress_at_most(b"", self._room())))
            return b"".join(parts)
        if isinstance(decoder, _ZLIB_DECODER):
            while data:
                parts.append(self._count(decoder.decompress(data, self._room())))
                data = decoder.unconsumed_tail
            return b"".join(parts)
        # zstd (and any other): in pieces small enough that one cannot pass the limit far.
        step = max(_ZSTD_MIN_PIECE, self.limit // ZSTD_MAX_RATIO)
        for start in range(0, len(data), step):
            parts.append(self._count(decoder.decompress(data[start : start + step])))
        return b"".join(parts)

    def flush(self) -> bytes:
        return self._count(self._decoder.flush())

    @property
    def eof(self) -> bool:
        return self._decoder.eof


class BodyTooLarge(ValueError):
    """A body decodes to more than the limit it was decoded with."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the body decodes to more than {limit} bytes")
        self.limit = limit


#: zstd's largest expansion: a 4-byte RLE block regenerates 128 KiB. Feeding the decoder
#: ``limit // ZSTD_MAX_RATIO`` bytes at a time (python-zstandard's decompressobj takes no
#: output limit) keeps each call's output near the limit.
ZSTD_MAX_RATIO = 32 * 1024
_ZSTD_MIN_PIECE = 64


def decode_body(body: bytes, content_encoding: str | None, limit: int | None = None) -> bytes:
    """Decode a whole body; raises ``ValueError`` (or a subclass) when it is not valid, and
    :class:`BodyTooLarge` as soon as it (or any stage of a chained encoding) expands past
    ``limit`` bytes: a few KiB of gzip can expand to gigabytes, so the limit is applied while
    decoding, never to the result."""
    names = [n.strip().lower() for n in (content_encoding or "").split(",") if n.strip()]
    data = body
    for name in reversed(names):  # ``gzip, br``: gzip was applied first, so undone last
        data = _decode_one(data, name, content_encoding or "", limit)
    return data


def _decode_one(data: bytes, name: str, content_encoding: str, limit: int | None) -> bytes:
    if name in ("", "identity"):
        return data
    if name not in ("gzip", "x-gzip", "deflate", "br", "zstd"):
        raise UnsupportedEncoding(f"unsupported content-encoding {name!r}")
    # One byte more than the limit is enough to know the body is too large.
    cap = limit + 1 if limit is not None else None
    try:
        if name == "br":
            brotli_decoder = _Brotli()
            out, complete = brotli_decoder.decompress_at_most(data, cap), brotli_decoder.eof
        elif name == "zstd":
            out, complete = _zstd_at_most(data, limit)
        else:
            zlib_decoder = zlib.decompressobj(zlib.MAX_WBITS if name == "deflate" else 16 + zlib.MAX_WBITS)
            out, complete = zlib_decoder.decompress(data, cap or 0), zlib_decoder.eof  # 0: no limit
    except BodyTooLarge:
        raise
    except Exception as exc:
        raise ValueError(f"body is not valid {content_encoding}: {exc}") from None
    if limit is not None and len(out) > limit:
        raise BodyTooLarge(limit)
    # The decoders return what they could of a stream cut short (a gzip body without its
    # trailer decodes to the whole JSON): a whole body must be a whole stream.
    if not complete:
        raise ValueError(f"body is not valid {content_encoding}: the compressed data ends early")
    return out


def _zstd_at_most(data: bytes, limit: int | None) -> tuple[bytes, bool]:
    """(the decoded first frame, whether it ended); :class:`BodyTooLarge` past ``limit``."""
    decoder = zstandard.ZstdDecompressor().decompressobj()
    if limit is None:
        return decoder.decompress(data), decoder.eof
    step = max(_ZSTD_MIN_PIECE, limit // ZSTD_MAX_RATIO)
    parts, size = [], 0
    for start in range(0, len(data), step):
        part = decoder.decompress(data[start : start + step])
        size += len(part)
        if size > limit:
            raise BodyTooLarge(limit)
        parts.append(part)
        if decoder.eof:
            break  # what follows the frame is ignored, as a single decompress() call does
    return b"".join(parts), decoder.eof
