"""A tiny random PaddleOCR-VL (PaddleOCRVLForConditionalGeneration: SigLIP-style vision encoder 2 layers
32 wide, ERNIE-4.5 decoder 2 layers 32 wide with grouped-query attention, tied LM head) saved as
`save_pretrained` writes it, with a PaddleOCRVLProcessor (a byte-level BPE tokenizer with
PaddleOCR-VL's special tokens, a PaddleOCRVLImageProcessor with small pixel bounds, a chat template
of PaddleOCR-VL's shape), and SIE's backbone loaded from it.

The weights are drawn wider than transformers' init (std 0.15, norms around 1), as
donut_fixtures.py explains: at init scale a tiny decoder repeats its last token forever.

    from paddleocr_vl_fixtures import tiny_paddleocr_vl, load_sie_paddleocr_vl
"""

from __future__ import annotations

from pathlib import Path

from glm_ocr_fixtures import load_sie_glm_ocr, tiny_glm_tokenizer, widened

PATCH, MERGE = 4, 2  # 4-pixel patches merged 2 x 2: sides are multiples of 8 pixels
MIN_PIXELS, MAX_PIXELS = (PATCH * MERGE) ** 2 * 4, (PATCH * MERGE) ** 2 * 40  # 4 to 40 image features a page
IMAGE_TOKEN = "<|IMAGE_PLACEHOLDER|>"
# PaddleOCR-VL's special tokens (ERNIE-4.5's); the first ends a sequence
SPECIALS = ["</s>", "<s>", "<|begin_of_sentence|>", "<|end_of_sentence|>", "<|IMAGE_START|>", "<|IMAGE_END|>",
            IMAGE_TOKEN, "<|video_pad|>"]
# PaddleOCR-VL's chat template's shape: the page then the task's text in one user turn, "Assistant: " after
CHAT_TEMPLATE = (
    "{{- '<|begin_of_sentence|>' -}}{%- for m in messages -%}{%- if m.role == 'user' -%}{{- 'User: ' -}}"
    "{%- for item in m.content -%}{%- if item.type == 'image' -%}"
    "{{- '<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' -}}{%- endif -%}{%- endfor -%}"
    "{%- for item in m.content -%}{%- if item.type == 'text' -%}{{- item.text -}}{%- endif -%}{%- endfor -%}"
    "{{- '\\n' -}}{%- elif m.role == 'assistant' -%}{{- 'Assistant: ' + m.content + '</s>' -}}{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%}")
VISION = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4, image_size=6 * PATCH,
              patch_size=PATCH, spatial_merge_size=MERGE)
TEXT = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 500000, "mrope_section": [1, 1, 2]})


def tiny_paddleocr_vl(dest: Path, seed: int = 0, generation: dict | None = None):
    """Save a tiny PaddleOCR-VL with its processor under `dest` (`generation`: generation_config.json's
    fields); returns (the transformers model in eval mode, the processor)."""
    from transformers import GenerationConfig, PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration
    from transformers.models.paddleocr_vl import PaddleOCRVLImageProcessorPil, PaddleOCRVLProcessor

    dest = Path(dest)
    tokenizer = tiny_glm_tokenizer(SPECIALS, image_token=IMAGE_TOKEN)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    config = PaddleOCRVLConfig(
        vision_config=VISION,
        text_config={**TEXT, "vocab_size": len(tokenizer), "pad_token_id": ids["</s>"], "bos_token_id": ids["<s>"],
                     "eos_token_id": ids["</s>"]},
        image_token_id=ids[IMAGE_TOKEN], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|IMAGE_START|>"], vision_end_token_id=ids["<|IMAGE_END|>"])
    model = widened(PaddleOCRVLForConditionalGeneration, config, seed)
    model.generation_config = GenerationConfig(**(generation or {
        "eos_token_id": ids["</s>"], "pad_token_id": ids["</s>"], "do_sample": False}))
    model.save_pretrained(dest)
    images = PaddleOCRVLImageProcessorPil(patch_size=PATCH, merge_size=MERGE,
                                          size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS})
    processor = PaddleOCRVLProcessor(image_processor=images, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(dest)
    (dest / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return model, processor


load_sie_paddleocr_vl = load_sie_glm_ocr  # the same loader: its family from config.json
