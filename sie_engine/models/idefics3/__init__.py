"""Idefics3 (granite-docling, SmolDocling): a SigLIP vision tower over each page's tiles
(vision.py), the pixel-shuffle connector and the Llama decoder (model.py), generating the page's
DocTags; family.py is the registry entry."""
