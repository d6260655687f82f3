"""Data synthesis: seed tasks, anchors, rewrites, verification, decision samples."""
