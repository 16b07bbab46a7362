"""Lore store plugin: DuckDB as the store of record, a LanceDB full-text index beside it."""
