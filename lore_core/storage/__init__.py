"""Tier 1, storage: records and identity (:mod:`~lore_core.storage.records`), the writer
(:mod:`~lore_core.storage.writer`), the crash journal, amnesia ranges and what a harness puts
into a conversation that is not conversation (:mod:`~lore_core.storage.housekeeping`), and
files only for their owner (:mod:`~lore_core.storage.private`)."""
