"""Core tests use the ``lore`` pytest plugin's fixtures (fake upstream, threaded gateway)."""
