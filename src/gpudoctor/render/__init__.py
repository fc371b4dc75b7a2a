"""Renderers: turn a Report (and the facts, for the header) into text or JSON. Formatting only."""
