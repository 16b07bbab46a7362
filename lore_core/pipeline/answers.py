"""Responses the gateway makes itself: JSON, and errors in the wire API's own shape."""

from __future__ import annotations

import json
from typing import Any

from quart import Response

from lore_core.interfaces import Codec


class ClientError(Exception):
    """A request the gateway refuses, answered in the API's own error shape: a 4xx for a
    client mistake, a 502 when nothing says where it goes (no upstream for its provider)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_response(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload), status=status, content_type="application/json")


def error_response(codec: Codec | None, status: int, message: str) -> Response:
    """An error in the wire API's own shape (a provider's codec's, for a request no codec
    owns: :meth:`Registry.codec_of_provider`); without one, the common ``{"error": {...}}``."""
    if codec is not None:
        return json_response(status, codec.error_body(status, message))
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return json_response(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})
