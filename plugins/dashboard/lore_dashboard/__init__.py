"""Lore's web dashboard: see, search and govern the memory in a browser (``/ui``)."""
