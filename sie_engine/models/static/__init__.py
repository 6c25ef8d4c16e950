"""Static embedders in model2vec's format: the layout and card of a model2vec directory
(layout.py, torch-free), the token table, its tokenisation and no-attention batch plan (model.py)."""
