"""A tiny random GLM-OCR (GlmOcrForConditionalGeneration: vision tower 2 blocks 32 wide, GLM decoder
2 layers 32 wide with grouped-query attention) saved as `save_pretrained` writes it, with a
Glm46VProcessor (the processor class GLM-OCR's checkpoint names: a byte-level BPE tokenizer with
GLM's special tokens, a Glm46VImageProcessor with small pixel bounds, a chat template of GLM-V's
shape), and SIE's backbone loaded from it.

The weights are drawn wider than transformers' init (std 0.15, norms around 1), as
donut_fixtures.py explains: at init scale a tiny decoder repeats its last token forever.

    from glm_ocr_fixtures import tiny_glm_ocr, load_sie_glm_ocr
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import torch

from arch_fixtures import load_sie_backbone

PATCH, MERGE = 4, 2  # 4-pixel patches merged 2 x 2: sides are multiples of 8 pixels
MIN_PIXELS, MAX_PIXELS = (PATCH * MERGE) ** 2 * 4, (PATCH * MERGE) ** 2 * 40  # 4 to 40 image features a page
# GLM's special tokens (GLM-4.1V's tokenizer); the ids in the tiny vocabulary follow the byte characters
SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
            "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
            "<|end_of_video|>", "<|image|>", "<|video|>"]
# GLM-V's chat template, as GLM-OCR's model card prompts it: one user turn of an image and a task text
CHAT_TEMPLATE = (
    "[gMASK]<sop>{%- for m in messages %}{%- if m.role == 'user' %}{{ '<|user|>\\n' }}"
    "{%- if m.content is string %}{{ m.content }}{%- else %}{%- for item in m.content %}"
    "{%- if item.type == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{%- elif item.type == 'text' %}{{ item.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{%- elif m.role == 'assistant' %}{{ '<|assistant|>\\n' + m.content }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{%- endif %}")
VISION = dict(depth=2, hidden_size=32, num_heads=4, intermediate_size=40, out_hidden_size=32, patch_size=PATCH,
              spatial_merge_size=MERGE, temporal_patch_size=2)
TEXT = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000, "mrope_section": [1, 1, 2],
                             "partial_rotary_factor": 1.0})


def reference_processor(image_processor, tokenizer):
    """transformers' Glm46VProcessor over the image processor and tokenizer: its video processor
    needs torchvision, which SIE does not install, and GLM-OCR reads no video."""
    from transformers.models.glm46v import Glm46VProcessor

    class ImagesOnly(Glm46VProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return ImagesOnly(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                      chat_template=CHAT_TEMPLATE)


def tiny_glm_tokenizer(specials: list[str] = SPECIALS, **named: str):
    """A Qwen2-style byte-level BPE tokenizer (GLM-4's tokenizer is byte-level BPE too) over the 256
    byte characters, a few merges and `specials` (GLM's special tokens; the first is the end of text),
    `named` special tokens as the tokenizer's attributes (e.g. image_token="<|image|>")."""
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab: dict[str, int] = {}
    for char in sorted(set(bytes_to_unicode().values())):
        vocab[char] = len(vocab)
    merges = [("T", "e"), ("Te", "x"), ("Tex", "t"), ("Ġ", "R"), ("e", "c"), ("o", "n")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    for token in specials:
        vocab[token] = len(vocab)
    end = specials[0]
    slow = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token=end, pad_token=end)
    slow.add_special_tokens({"additional_special_tokens": specials[1:]})
    return PreTrainedTokenizerFast(tokenizer_object=slow.backend_tokenizer, eos_token=end, pad_token=end,
                                   additional_special_tokens=specials[1:], **({"extra_special_tokens": named}
                                                                              if named else {}))


def widened(model_class, config, seed: int):
    """`model_class(config)` in eval mode, its weights drawn wider than transformers' init (std 0.15,
    biases 0.5, norms around 1: see the module docstring)."""
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(torch.randn_like(p) * (0.15 if p.dim() > 1 else 0.5) + centre)
    return model


def tiny_glm_ocr(dest: Path, seed: int = 0, generation: dict | None = None):
    """Save a tiny GLM-OCR with its processor under `dest` (`generation`: generation_config.json's
    fields); returns (the transformers model in eval mode, the processor)."""
    from transformers import GenerationConfig, GlmOcrConfig, GlmOcrForConditionalGeneration
    from transformers.models.glm46v import Glm46VImageProcessorPil

    dest = Path(dest)
    tokenizer = tiny_glm_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    vocab = len(tokenizer)
    config = GlmOcrConfig(
        vision_config=VISION,
        text_config={**TEXT, "vocab_size": vocab, "pad_token_id": ids["<|endoftext|>"],
                     "eos_token_id": [ids["<|endoftext|>"], ids["<|user|>"]]},
        image_token_id=ids["<|image|>"], video_token_id=ids["<|video|>"],
        image_start_token_id=ids["<|begin_of_image|>"], image_end_token_id=ids["<|end_of_image|>"],
        video_start_token_id=ids["<|begin_of_video|>"], video_end_token_id=ids["<|end_of_video|>"])
    model = widened(GlmOcrForConditionalGeneration, config, seed)
    model.generation_config = GenerationConfig(**(generation or {
        "eos_token_id": [ids["<|endoftext|>"], ids["<|user|>"]], "pad_token_id": ids["<|endoftext|>"],
        "do_sample": False}))
    model.save_pretrained(dest)
    images = Glm46VImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2,
                                     size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS})
    images.save_pretrained(dest)
    config_path = dest / "preprocessor_config.json"  # the class names GLM-OCR's checkpoint gives
    saved = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**saved, "image_processor_type": "Glm46VImageProcessor",
                                       "processor_class": "Glm46VProcessor"}))
    tokenizer.save_pretrained(dest)
    (dest / "chat_template.jinja").write_text(CHAT_TEMPLATE)  # where GLM-OCR's checkpoint keeps it
    return model, reference_processor(images, tokenizer)


load_sie_glm_ocr = partial(load_sie_backbone, backend=True)  # SIE's GLM-OCR from a saved directory
