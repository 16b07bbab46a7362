"""Conformance suites, one per plugin kind: a plugin's tests subclass its suite."""
