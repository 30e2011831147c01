"""Wrappers for external simulators; each imports its library lazily."""
