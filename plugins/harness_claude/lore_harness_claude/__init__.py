"""Lore harness plugin for Claude Code."""
