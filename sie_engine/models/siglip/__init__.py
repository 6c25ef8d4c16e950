"""SigLIP (model.py) and SigLIP 2 NaFlex (siglip2.py: each image its own patch grid)."""
