"""Lore store plugin: PostgreSQL."""
