"""The exception that tells callers to fall back to full-text search."""

from __future__ import annotations

try:  # pragma: no cover - depends on the kernel version
    # When the kernel defines a provider-neutral exception, ours is one of it, so the kernel
    # can catch every provider's failure with one except clause.
    from lore_core.interfaces import EmbedderUnavailable as _Base  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _Base = RuntimeError


class EmbedderUnavailable(_Base):  # type: ignore[misc, valid-type]
    """The local model cannot be loaded; ``reason`` says why in one line.

    Raised by every ``embed`` call once loading failed (loading is not retried: the files
    do not appear while the process runs). Callers degrade to full-text search only.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
