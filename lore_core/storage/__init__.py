"""Tier 1, storage: what every backend stores, by the kernel's rules, and what writes it.

* :mod:`~lore_core.storage.records`: the records of the temporal store and their merge rules;
* :mod:`~lore_core.storage.identity`: message ids (the hash chain) and the branches they make;
* :mod:`~lore_core.storage.masking`: secrets masked before anything is stored;
* :mod:`~lore_core.storage.convert`: an exchange turned into records;
* :mod:`~lore_core.storage.passages`: items cut into the passages search indexes;
* :mod:`~lore_core.storage.toolcalls`: tool calls and their outputs as text;
* :mod:`~lore_core.storage.tags`: the event tags of passage headers;
* :mod:`~lore_core.storage.facets`: which texts of a passage get vectors;
* :mod:`~lore_core.storage.housekeeping`: what a harness puts into a conversation that is not
  conversation;
* :mod:`~lore_core.storage.writer`: finished exchanges to the store, in batches, off the hot path;
* :mod:`~lore_core.storage.journal`: the write-ahead journal of what clients were answered;
* :mod:`~lore_core.storage.amnesia`: ``/lore:amnesia`` ranges;
* :mod:`~lore_core.storage.forget`: ``lore forget``, a session removed for good;
* :mod:`~lore_core.storage.copy`: a whole memory copied between stores;
* :mod:`~lore_core.storage.history_import`: a client's own history imported as sessions;
* :mod:`~lore_core.storage.knowledge`, :mod:`~lore_core.storage.entities`,
  :mod:`~lore_core.storage.events`: the records of long-term knowledge, entities and the event log;
* :mod:`~lore_core.storage.private`: files only for their owner.
"""
