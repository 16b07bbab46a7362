"""Core features registered through the same hooks as third-party plugins."""
