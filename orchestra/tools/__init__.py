"""Perception tools (image, audio, video) and action tools (search, browse, code)."""
