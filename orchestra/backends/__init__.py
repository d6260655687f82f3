"""Sub-agent backends: the Backend seam and registry, skill vectors, cost/latency models, selection."""
