"""Lore harness plugin for Codex CLI."""
