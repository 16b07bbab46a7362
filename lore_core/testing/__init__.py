"""Test support shipped with the kernel: a loopback fake upstream, a threaded gateway, pytest
fixtures (registered as the ``lore`` pytest plugin) and conformance suites for plugins."""
