"""LightOnOCR: Pixtral vision tower, patch merger and projector, Qwen3 decoder (model.py)."""
