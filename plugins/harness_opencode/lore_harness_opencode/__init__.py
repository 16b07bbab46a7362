"""Lore harness plugin for OpenCode."""
