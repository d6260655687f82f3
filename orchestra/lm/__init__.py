"""Chat models: the ChatClient seam, its OpenAI-compatible and transformers clients, their factory."""
