"""The store contract on DuckDB, one module per tier (:class:`lore_core.interfaces.Tier`):
the core (``messages``), ``distillations``, ``vectors``, ``knowledge`` (with teams),
``entities`` and the event log (``events``). Each is a class over the one
:class:`~lore_store_duckdb.database.Database`; :class:`~lore_store_duckdb.store.DuckDBStore`
derives from them all.
"""
