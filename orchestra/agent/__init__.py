"""The orchestrator core: decision formats, references, dependency graph, scheduler, memory and state."""
