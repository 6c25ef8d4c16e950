"""CLIP: a two-tower image-text model (model.py); the card of a card-less CLIP / SigLIP directory
(card.py)."""
