"""What a worker call raises: apart from :mod:`lore_core.worker.client` so that code which
only catches them (recall's query expansion, the CLI) does not load the HTTP client."""

from __future__ import annotations

__all__ = ["CircuitOpen", "NoWorker", "WorkerError", "WorkerUnavailable"]


class WorkerUnavailable(Exception):
    """No worker call was attempted: there is no usable worker right now. Callers skip the
    work (or fall back, like the extractive observer) and must not retry in a loop."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NoWorker(WorkerUnavailable):
    """Nothing is configured and no session credentials are known (or no model is)."""


class CircuitOpen(WorkerUnavailable):
    """The worker failed too often; calls fail fast until the cooldown ends."""

    def __init__(self, reason: str, retry_in: float) -> None:
        super().__init__(reason)
        self.retry_in = retry_in


class WorkerError(Exception):
    """A worker call was attempted and failed (after its retries)."""

    def __init__(self, reason: str, status: int | None = None, open_for: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        # Set when the upstream asked for a pause longer than we retry through: the breaker
        # opens for at least this long.
        self.open_for = open_for
