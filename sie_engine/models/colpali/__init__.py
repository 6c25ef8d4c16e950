"""ColPali (PaliGemma: SigLIP vision tower, projector, Gemma decoder): multi-vector page images and
queries; the card of a card-less ColPali directory (card.py)."""
