"""Wire APIs: one package per provider API (codec, stream assembler, turn editor, tool and
usage shapes), and what they share: SSE framing, content encodings, spliceable JSON bodies and
lenient field readers (:mod:`~lore_core.wire.fields`)."""
