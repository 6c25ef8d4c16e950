"""Grounding DINO (IDEA-Research/grounding-dino-*): open-vocabulary detection from a text prompt,
served through `extract`."""
