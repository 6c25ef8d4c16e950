"""DeBERTa-v2/v3: disentangled relative-position attention (the backbone of most GLiNER models
and of NLI cross-encoders)."""
