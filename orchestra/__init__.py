"""Orchestra: omni-modal agent orchestration library (never imports dagster)."""
