"""A tiny random Idefics3 (Idefics3ForConditionalGeneration: vision tower 2 layers 32 wide over
32-pixel tiles of 4-pixel patches, pixel shuffle by 2: 16 image features a tile; Llama decoder 2
layers 32 wide with grouped-query attention) saved as `save_pretrained` writes it, with an
Idefics3Processor (a byte-level BPE tokenizer with Idefics3's image markers and a few DocTags as
added tokens, an Idefics3ImageProcessor cutting pages of up to 64 pixels into 2 x 2 tiles, SmolVLM's
chat template), and SIE's backbone loaded from it.

The weights are drawn wider than transformers' init (std 0.15, norms around 1), as
donut_fixtures.py explains: at init scale a tiny decoder repeats its last token forever.

    from idefics3_fixtures import tiny_idefics3, load_sie_idefics3
"""

from __future__ import annotations

from pathlib import Path

import torch

from glm_ocr_fixtures import load_sie_glm_ocr as load_sie_idefics3  # the family-generic loader
from glm_ocr_fixtures import tiny_glm_tokenizer

__all__ = ["load_sie_idefics3", "tiny_idefics3", "SPECIALS"]

TILE, PATCH, SCALE = 32, 4, 2
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE ** 2  # 16 features a tile
LONGEST_EDGE = 2 * TILE  # pages resize to at most 64 pixels: up to 2 x 2 tiles and the global view
# the EOS first, Idefics3Processor's markers, then DocTags (the model's markup: added tokens in its vocabulary)
SPECIALS = ["<|end_of_text|>", "<end_of_utterance>", "<image>", "<fake_token_around_image>", "<global-img>",
            *[f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)],
            "<doctag>", "</doctag>", "<text>", "</text>", "<loc_0>", "<loc_1>", "<loc_2>"]
# SmolVLM's chat template (SmolDocling's): "User:<image>Convert this page to docling.<end_of_utterance>\nAssistant:"
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, image_size=TILE,
              patch_size=PATCH)
TEXT = dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 100000.0})


def tiny_idefics3(dest: Path, seed: int = 0):
    """Save a tiny Idefics3 with its processor under `dest`; returns (the transformers model in eval
    mode, the processor)."""
    from transformers import GenerationConfig, Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor

    # the module's class: transformers' top-level name asks for torchvision, which SIE leaves out
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    dest = Path(dest)
    tokenizer = tiny_glm_tokenizer(SPECIALS)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    stop = [ids["<|end_of_text|>"], ids["<end_of_utterance>"]]
    config = Idefics3Config(vision_config=VISION, scale_factor=SCALE, image_token_id=ids["<image>"],
                            pad_token_id=ids["<|end_of_text|>"],
                            text_config={**TEXT, "vocab_size": len(tokenizer), "pad_token_id": ids["<|end_of_text|>"],
                                         "eos_token_id": stop})
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(torch.randn_like(p) * (0.15 if p.dim() > 1 else 0.5) + centre)
    model.generation_config = GenerationConfig(eos_token_id=stop, pad_token_id=ids["<|end_of_text|>"],
                                               do_sample=False)
    model.save_pretrained(dest)
    images = Idefics3ImageProcessorPil(size={"longest_edge": LONGEST_EDGE}, max_image_size={"longest_edge": TILE})
    processor = Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=IMAGE_SEQ_LEN,
                                  chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(dest)
    return model, processor
