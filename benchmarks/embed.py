"""Throughput of the local embedder (lore-embed-local) against onnxruntime called directly.

Texts per second at batch 1 and batch 32, for ~100-character and ~1,500-character texts,
through three paths over the same model file and tokenizer, in the same run:

* ``plugin``: ``await LocalEmbedder.embed(batch)`` on an event loop, i.e. with the hop to
  the inference thread, length sorting, padding, pooling and the conversion to lists;
* ``direct``: the tokenizer and an ``onnxruntime.InferenceSession`` with onnxruntime's
  default options, called in the benchmark's own thread (tokenise, run, mean-pool,
  normalise): what a caller without the plugin would write;
* ``direct-same-opts``: the same, with the plugin's session options (no memory arena,
  ``threads`` intra-op threads, no spinning), isolating the wrapper's own cost.

Paths are interleaved in rounds so that drift on a shared, noisy machine hits all alike,
and each cell runs for a fixed time, so the whole run is bounded (about
``rounds x 12 x seconds`` plus ~5 s of loading). The target is plugin >= 80% of direct.
This is a benchmark, not a test; run it by hand::

    python benchmarks/embed.py                 # about a minute
    python benchmarks/embed.py --seconds 1     # quicker, noisier
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
from lore_embed_local import EmbedLocalConfig, LocalEmbedder
from tokenizers import Tokenizer

_WORDS = (
    "the gateway stores every message and the model recalls them later through hybrid search "
    "over full text and vectors while a proxy relays streamed responses from the provider "
    "config file plugin session project token batch thread queue latency cache index error "
    "function returns value test passes fails because import module path"
).split()


def make_texts(chars: int, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(_WORDS))
        texts.append(" ".join(words)[:chars])
    return texts


class Direct:
    """onnxruntime and the tokenizer called directly, as a plugin-less caller would."""

    def __init__(
        self, model: str, tokenizer: str, max_tokens: int, options: ort.SessionOptions | None
    ) -> None:
        self.tokenizer = Tokenizer.from_file(tokenizer)
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def timed(run: Callable[[list[str]], Any], texts: list[str], batch: int, seconds: float) -> float:
    """Texts per second embedding ``texts`` in batches of ``batch`` for ~``seconds``."""
    done, i = 0, 0
    start = time.perf_counter()
    while True:
        chunk = [texts[(i + k) % len(texts)] for k in range(batch)]
        run(chunk)
        done += batch
        i += batch
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.5, help="time per cell per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = plugin default)")
    default_budget = EmbedLocalConfig().max_batch_tokens
    parser.add_argument("--max-batch-tokens", type=int, default=default_budget, help="the plugin's budget")
    args = parser.parse_args()

    settings = EmbedLocalConfig(batch_size=32, threads=args.threads, max_batch_tokens=args.max_batch_tokens)
    plugin = LocalEmbedder(settings)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(plugin.load())
    model = str(plugin.settings.model_path or _packaged("model"))
    tokenizer = str(plugin.settings.tokenizer_path or _packaged("tokenizer"))

    same = ort.SessionOptions()
    same.enable_cpu_mem_arena = False
    same.intra_op_num_threads = plugin.threads
    same.inter_op_num_threads = 1
    same.add_session_config_entry("session.intra_op.allow_spinning", "0")
    paths: dict[str, Callable[[list[str]], Any]] = {
        "plugin": lambda texts: loop.run_until_complete(plugin.embed(texts)),
        "direct": Direct(model, tokenizer, plugin.settings.max_tokens, None).embed,
        "direct-same-opts": Direct(model, tokenizer, plugin.settings.max_tokens, same).embed,
    }

    # The paths agree before they are timed.
    sample = make_texts(300, 8, seed=1)
    reference = np.array(loop.run_until_complete(plugin.embed(sample)))
    for name in ("direct", "direct-same-opts"):
        assert np.allclose(paths[name](sample), reference, atol=1e-4), name

    cells = [(chars, batch) for chars in (100, 1500) for batch in (1, 32)]
    texts = {chars: make_texts(chars, 256, seed=chars) for chars in (100, 1500)}
    results: dict[tuple[int, int, str], list[float]] = {}
    for _ in range(args.rounds):
        for chars, batch in cells:
            for name, run in paths.items():
                rate = timed(run, texts[chars], batch, args.seconds)
                results.setdefault((chars, batch, name), []).append(rate)

    print(
        f"lore-embed-local throughput, texts/s (median of {args.rounds} rounds x {args.seconds:g} s); "
        f"{os.cpu_count()} CPUs, {plugin.threads} intra-op threads, maxTokens {settings.max_tokens}, "
        f"maxBatchTokens {settings.max_batch_tokens}, onnxruntime {ort.__version__}, "
        f"Python {platform.python_version()}"
    )
    columns = [("text", 10), ("batch", 5), ("plugin", 9), ("direct", 9), ("same-opts", 9)]
    columns += [("vs direct", 10), ("vs same", 8)]
    header = " ".join(f"{name:>{width}}" for name, width in columns)
    print(header)
    print("-" * len(header))
    for chars, batch in cells:
        p, d, s = (statistics.median(results[(chars, batch, n)]) for n in paths)
        print(
            f"{chars:>7} ch {batch:>5} {p:>9.1f} {d:>9.1f} {s:>9.1f} {p / d:>9.0%} {p / s:>8.0%}"
            f"{'' if p / d >= 0.8 else '  < 80% target'}"
        )
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        # Each plugin call crosses to the inference thread and back: two wake-ups that wait
        # for a free core when the machine is oversubscribed, so batch-1 figures suffer most.
        print(f"note: load average {load:.1f} exceeds the {os.cpu_count()} CPUs; figures are noisy")
    loop.run_until_complete(plugin.close())
    loop.close()


def _packaged(kind: str) -> str:
    from lore_embed_local.model import packaged_model_path, packaged_tokenizer_path

    return str(packaged_model_path() if kind == "model" else packaged_tokenizer_path())


if __name__ == "__main__":
    main()
