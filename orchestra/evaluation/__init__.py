"""Evaluation: the OmniGAIA-compatible harness, the protocol's scorer, the papers' tables."""
