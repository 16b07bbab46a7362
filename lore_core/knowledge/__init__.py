"""Long-term knowledge (tier 3, docs/knowledge.md): the service that writes entries
(people, the curator, imports), the prompt blocks that inject them, and ``.lore.md``."""
