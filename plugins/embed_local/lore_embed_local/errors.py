"""The exception that tells callers to fall back to full-text search."""

from __future__ import annotations

from lore_core.interfaces import EmbedderUnavailable as _KernelEmbedderUnavailable


class EmbedderUnavailable(_KernelEmbedderUnavailable):
    """The local model cannot be loaded; ``reason`` says why in one line.

    One of the kernel's provider-neutral exception, so the kernel catches every provider's
    failure with one except clause. Raised by every ``embed`` call once loading failed
    (loading is not retried: the files do not appear while the process runs). Callers
    degrade to full-text search only.
    """
