"""GLM-OCR (zai-org/GLM-OCR): a CogViT vision tower over each page at its own resolution (vision.py),
its image features in the GLM decoder's prompt (model.py), generating the page's text; family.py is
the registry entry."""
