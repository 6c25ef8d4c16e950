"""ColQwen2 (Qwen2-VL: a vision tower at each page's own resolution, its patch merger, the Qwen2
decoder; ColQwen2.5 over Qwen2.5-VL): multi-vector page images and queries (model.py, inputs.py, head.py); the card of a
card-less ColQwen2 directory (card.py)."""
