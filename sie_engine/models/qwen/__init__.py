"""Qwen2, Qwen3 and Mistral decoders as embedders and rerankers: one forward pass, three families
(model.py); a card-less Qwen directory pools at the last token (card.py)."""
