"""Tier 1, storage: the records (:mod:`~lore_core.storage.records`), message identity
(:mod:`~lore_core.storage.identity`), secret masking (:mod:`~lore_core.storage.masking`), an
exchange turned into records (:mod:`~lore_core.storage.convert`), the writer
(:mod:`~lore_core.storage.writer`), the crash journal, amnesia ranges and what a harness puts
into a conversation that is not conversation (:mod:`~lore_core.storage.housekeeping`), and
files only for their owner (:mod:`~lore_core.storage.private`)."""
