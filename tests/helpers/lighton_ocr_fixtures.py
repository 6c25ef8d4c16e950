"""A tiny LightOnOCR (Pixtral 2 layers + Qwen3 2 layers, 32 wide, grouped-query attention) with
random weights, saved as a `LightOnOcrForConditionalGeneration` checkpoint, and the transformers
reference on the same weights.

The weights are drawn wider than transformers' init (std 0.15, norms around 1) and the LM head is
untied (the tied layout is tested apart): with init-scale weights a tiny decoder repeats one token
forever, and every page would read the same, which tests nothing.
"""

from __future__ import annotations

from pathlib import Path

import torch

from arch_fixtures import load_sie_backbone

VOCAB = 64
IMAGE_TOKEN = 10
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, head_dim=8,
              patch_size=4, image_size=64, hidden_act="silu", rope_theta=10000.0)
TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rope_theta=1_000_000.0,
            tie_word_embeddings=False)


def tiny_lighton_ocr(dest: Path, seed: int = 0, tie: bool = False, vision: dict | None = None,
                     text: dict | None = None):
    """Save a tiny LightOnOCR under `dest` (`vision` / `text`: config fields laid over the defaults);
    returns the transformers model (eval mode)."""
    from transformers import LightOnOcrConfig, LightOnOcrForConditionalGeneration

    torch.manual_seed(seed)
    config = LightOnOcrConfig(vision_config={**VISION, **(vision or {}), "model_type": "pixtral"},
                              text_config={**TEXT, **(text or {}), "model_type": "qwen3", "tie_word_embeddings": tie},
                              image_token_id=IMAGE_TOKEN, spatial_merge_size=2, tie_word_embeddings=tie)
    model = LightOnOcrForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(torch.randn_like(p) * (0.15 if p.dim() > 1 else 0.5) + centre)
    if tie:
        model.tie_weights()
    model.save_pretrained(dest)
    return model


load_sie_lighton_ocr = load_sie_backbone  # SIE's LightOnOCR backbone from a saved directory


# A word-level vocabulary of the tiny decoder's 64 ids: Qwen's chat and vision specials (the image
# token at IMAGE_TOKEN, as the config says), then words the tiny model emits as a page's text.
SPECIALS = ["<|endoftext|>", "<unk>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|vision_pad|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|image_pad|>"]
WORDS = ["user", "assistant", "system", "#", "##", "|", "-", "*", "**", "Total", "Invoice", "Date", "Name", "Item",
         "Price", "1", "2", "3", "4", "5", "10.00", "12.50", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k",
         "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "OCR", "page", "text", "end", "."]
# Qwen's chat layout (LightOnOCR's checkpoints are Qwen3-based): a user turn with the page's image
# token and any text, then the assistant's turn opened
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}"
                 "{% else %}{% for c in m.content %}{% if c.type == 'image' %}<|image_pad|>{% elif c.type == 'text' %}"
                 "{{ c.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LONGEST_EDGE = 40


def tiny_lighton_ocr_processor(dest: Path, longest_edge: int = LONGEST_EDGE, patch_size: int = VISION["patch_size"]):
    """Save a LightOnOcrProcessor (Pixtral's PIL image processor: pages within `longest_edge` px,
    multiples of the patch; the word-level tokenizer and its chat template) under `dest`; returns it."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import LightOnOcrProcessor, PixtralImageProcessorPil, PreTrainedTokenizerFast

    tokens = SPECIALS + WORDS
    assert len(tokens) == VOCAB and tokens[IMAGE_TOKEN] == "<|image_pad|>"
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<unk>",
        extra_special_tokens={"image_token": "<|image_pad|>", "image_break_token": "<|vision_pad|>",
                              "image_end_token": "<|vision_end|>"})
    tokenizer.chat_template = CHAT_TEMPLATE
    images = PixtralImageProcessorPil(size={"longest_edge": longest_edge}, patch_size=patch_size)
    processor = LightOnOcrProcessor(image_processor=images, tokenizer=tokenizer, patch_size=patch_size,
                                    spatial_merge_size=2, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(dest)
    return processor
