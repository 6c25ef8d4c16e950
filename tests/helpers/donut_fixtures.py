"""A tiny Donut (DonutSwin 2 stages + MBart 2 layers, 32 wide) with random weights, saved as a
`VisionEncoderDecoderModel` checkpoint, and the transformers reference on the same weights.

The weights are drawn wider than transformers' init (std 0.15, norms around 1) and the LM head is
untied: with init-scale weights a tiny decoder repeats its last token forever, and greedy and beam
search then agree on everything, which tests nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

ENCODER = dict(image_size=[64, 48], patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4)
DECODER = dict(vocab_size=40, d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64,
               max_position_embeddings=64, is_decoder=True, add_cross_attention=True, scale_embedding=True,
               tie_word_embeddings=False)


def tiny_donut(dest: Path, seed: int = 0, **encoder):
    """Save a tiny Donut under `dest`; returns the transformers model (eval mode)."""
    from transformers import DonutSwinConfig, MBartConfig, VisionEncoderDecoderConfig, VisionEncoderDecoderModel

    torch.manual_seed(seed)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(DonutSwinConfig(**{**ENCODER, **encoder}),
                                                                     MBartConfig(**DECODER))
    model = VisionEncoderDecoderModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(torch.randn_like(p) * (0.15 if p.dim() > 1 else 0.5) + centre)
    model.save_pretrained(dest)
    return model


def load_sie_donut(root: Path):
    """SIE's Donut backbone from the directory, through the family and the declarative loader."""
    from safetensors.torch import load_file

    from sie_engine.layers.weights import load_checkpoint
    from sie_engine.models import family_for

    config = json.loads((Path(root) / "config.json").read_text())
    family = family_for(config)
    model = family.model_class(family.config_from_hf(config)).eval()
    tensors = load_file(str(Path(root) / "model.safetensors"))
    report = load_checkpoint(model, tensors, model.weight_spec)
    return model, tensors, report
