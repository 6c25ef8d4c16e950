"""A tiny random OWLv2 detector (no downloads) and its transformers reference.

    from owlv2_fixtures import make_tiny_owlv2, reference_detector

    path = make_tiny_owlv2(tmp_path / "owlv2")   # Owlv2ForObjectDetection + Owlv2Processor, save_pretrained layout
    model, processor = reference_detector(path)

The tokenizer is image_fixtures' byte-level CLIP vocabulary with OWLv2's conventions (`!` pads,
16 positions, `padding="max_length"` in the processor); the vision tower takes 32 x 32 pixels
in 8 x 8 patches (16 patches + the class token).
"""

from __future__ import annotations

from pathlib import Path

from image_fixtures import TINY_IMAGE_SIZE, TINY_PATCH_SIZE, _perturb, tiny_clip_tokenizer

TINY_OWL_POSITIONS = 16  # OWLv2's text positions (its processor pads every label to 16 tokens)


def make_tiny_owlv2(dest: Path, seed: int = 0) -> Path:
    """A random Owlv2ForObjectDetection with its processor saved in `dest`; returns `dest`."""
    import torch
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    dest = Path(dest)
    tokenizer = tiny_clip_tokenizer()
    tokenizer.pad_token = "!"  # OWLv2's checkpoints pad with "!" (id 0): the model reads id 0 first as "no query"
    tokenizer.model_max_length = TINY_OWL_POSITIONS
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=TINY_OWL_POSITIONS,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    vision = dict(hidden_size=48, intermediate_size=53, num_hidden_layers=2, num_attention_heads=4,
                  image_size=TINY_IMAGE_SIZE, patch_size=TINY_PATCH_SIZE)
    # projection_dim = the text width: the class head compares patches projected to it with the queries
    config = Owlv2Config(text_config=text, vision_config=vision, projection_dim=32)
    torch.manual_seed(seed)
    model = Owlv2ForObjectDetection(config).eval()
    with torch.no_grad():  # transformers draws the heads' weights at std 1: saturated scores, collapsed boxes
        for name, param in model.named_parameters():
            if name.startswith(("class_head.", "box_head.", "objectness_head.")) and param.dim() > 1:
                param.normal_(0.0, 0.1)
    _perturb(model, seed)
    model.save_pretrained(dest)
    image_processor = Owlv2ImageProcessor(size={"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE})
    Owlv2Processor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(dest)
    return dest


def reference_detector(path: Path):
    """transformers' model and processor (its PIL image processor: SIE's machines have no torchvision)."""
    from transformers import CLIPTokenizer, Owlv2ForObjectDetection, Owlv2ImageProcessorPil, Owlv2Processor

    model = Owlv2ForObjectDetection.from_pretrained(path).eval()
    image_processor = Owlv2ImageProcessorPil(size={"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE})
    processor = Owlv2Processor(image_processor=image_processor, tokenizer=CLIPTokenizer.from_pretrained(path))
    return model, processor
