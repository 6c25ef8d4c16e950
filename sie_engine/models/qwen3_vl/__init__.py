"""Qwen3-VL (vision tower with DeepStack mergers, Qwen3 decoder under interleaved M-RoPE):
Qwen3-VL-Embedding's dense vectors of texts and images and Qwen3-VL-Reranker's yes/no scores
(model.py, inputs.py, family.py)."""
