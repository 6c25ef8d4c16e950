"""Gemma 3 text decoders (EmbeddingGemma)."""
