"""NomicBERT (nomic-embed-text): rotary positions, SwiGLU; its card reads Nomic's `n_positions`."""
