"""MPNet: BERT's blocks with a relative position bias."""
