"""The kernel's test embedder passes the embedder conformance suite, so the kernel tests that
use it exercise the recall code with an embedder that keeps the contract."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lore_core.testing.builders import TopicEmbedder
from lore_core.testing.conformance.embedder import EmbedderConformance


class TestTopicEmbedder(EmbedderConformance):
    # The model knows three topics and their synonyms, nothing else.
    similarity_cases = (
        ("deploy the release", "the rollout will ship", "postgres migration error"),
        ("the database migration", "postgres sql", "crashed and broken"),
        ("it crashed with an error", "broken failure", "ship the deployment"),
    )

    @pytest.fixture
    def make_embedder(self) -> Callable[[], TopicEmbedder]:
        return TopicEmbedder
