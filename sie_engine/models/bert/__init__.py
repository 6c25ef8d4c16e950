"""BERT and the models that share its forward: RoBERTa, XLM-R, CamemBERT (model.py), and DistilBERT
under its own checkpoint names (distilbert.py)."""
