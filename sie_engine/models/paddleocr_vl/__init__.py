"""PaddleOCR-VL (PaddlePaddle/PaddleOCR-VL): a SigLIP-style vision encoder over each page at its own
resolution and its projector (vision.py), its image features in the ERNIE-4.5 decoder's prompt
(model.py), generating the page's text; family.py is the registry entry."""
