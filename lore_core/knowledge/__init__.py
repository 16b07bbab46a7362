"""Long-term knowledge (tier 3, MISSION sections 3 and 5): the service that writes entries
(people, the curator, imports), the prompt blocks that inject them, and ``.lore.md``."""
