"""A tiny random Qwen3-VL (`Qwen3VLForConditionalGeneration`: vision tower with its patch merger and
DeepStack mergers + Qwen3 decoder + LM head, as Qwen3-VL-Embedding and Qwen3-VL-Reranker ship it)
saved as `save_pretrained` writes it, with a Qwen2 tokenizer over a byte-level BPE vocabulary built
here ("yes" and "no" single tokens, for the reranker) and the Qwen3-VL image processor settings
(16-pixel patches, 2 x 2 merge, mean and std 0.5), and the published scripts' recipes over
transformers' `Qwen3VLModel` as the reference.

The recipes are QwenLM/Qwen3-VL-Embedding's `src/models/qwen3_vl_embedding.py` (`Qwen3VLEmbedder`:
`format_model_input` builds a chat of a system instruction, default "Represent the user's input.",
and a user turn of the images then the texts; `apply_chat_template(add_generation_prompt=True)`;
the hidden state of the last token, L2-normalised) and `src/models/qwen3_vl_reranker.py`
(`Qwen3VLReranker`: its judging system prompt, a user turn "<Instruct>: ...<Query>:..." +
"\\n<Document>:...", sigmoid of the last hidden state times lm_head's yes row minus its no row).
Both resize images (qwen_vl_utils) to multiples of 32 pixels between 4 and 1800 such tokens of
32 x 32 pixels and pass `do_resize=False`; the tiny images here stay within those bounds, which
the processor's own resize at the same bounds applies equally.

    from qwen3_vl_fixtures import make_tiny_qwen3_vl, embedding_reference, reranker_reference
"""

from __future__ import annotations

import io
from pathlib import Path

from colqwen2_fixtures import tiny_qwen2_tokenizer
from image_fixtures import _perturb

PATCH = 16
MERGE = 2
MIN_PIXELS = 4 * (PATCH * MERGE) ** 2  # the scripts' MIN_PIXELS and MAX_PIXELS
MAX_PIXELS = 1800 * (PATCH * MERGE) ** 2
EMBED_INSTRUCTION = "Represent the user's input."
RERANK_SYSTEM = ("Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
                 "Note that the answer can only be \"yes\" or \"no\".")
RERANK_INSTRUCTION = "Given a search query, retrieve relevant candidates that answer the query."
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"  # the chat template's rendering of an image


def make_tiny_qwen3_vl(dest: Path, seed: int = 0, tied: bool = False, positions: int = 512) -> Path:
    """A random Qwen3VLForConditionalGeneration with its tokenizer and image processor in `dest`
    (`tied`: its LM head is the input embeddings, saved once, as `tie_word_embeddings` checkpoints are;
    `positions`: its window, max_position_embeddings)."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    dest = Path(dest)
    tokenizer = tiny_qwen2_tokenizer(extra_merges=(("y", "e"), ("ye", "s"), ("n", "o")))
    ids = tokenizer.convert_tokens_to_ids
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=positions,
                rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 1, 1],
                                 "mrope_interleaved": True},
                pad_token_id=tokenizer.pad_token_id)
    # a 4 x 4 learned position grid (resampled to every image's own), DeepStack after both blocks
    vision = dict(depth=2, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32,
                  patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=2, num_position_embeddings=16,
                  deepstack_visual_indexes=[0, 1], hidden_act="gelu_pytorch_tanh")
    config = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                           video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                           vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=tied)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).eval()
    _perturb(model, seed)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2, min_pixels=MIN_PIXELS,
                             max_pixels=MAX_PIXELS, image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(dest)
    return dest


def chat(system: str, user: list) -> str:
    """The Qwen3-VL chat template's text of a system turn and a user turn (strings and images, in
    order, nothing between them) with the generation prompt."""
    content = "".join(IMAGE if not isinstance(part, str) else part for part in user)
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


def expand_images(processor, prompt: str, pictures: list[bytes]) -> tuple[str, dict]:
    """The prompt with each `<|image_pad|>` expanded to its image's features (in order, as
    Qwen3VLProcessor does) and the model's image inputs; no pictures: the prompt as it is."""
    if not pictures:
        return prompt, {}
    from PIL import Image

    pixels = processor(images=[Image.open(io.BytesIO(b)).convert("RGB") for b in pictures], return_tensors="pt")
    counts = (pixels["image_grid_thw"].prod(-1) // MERGE ** 2).tolist()
    pieces = prompt.split("<|image_pad|>")
    prompt = pieces[0] + "".join("<|image_pad|>" * n + rest for n, rest in zip(counts, pieces[1:], strict=True))
    return prompt, dict(pixel_values=pixels["pixel_values"], image_grid_thw=pixels["image_grid_thw"])


def run_recipe(path: Path, prompts: list[str], images: list[list[bytes]]):
    """transformers' Qwen3VLForConditionalGeneration over each prompt alone (its `<|image_pad|>`
    expanded to its image's features, as Qwen3VLProcessor does) -> (the model, each last hidden state)."""
    import torch
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(path)
    processor = Qwen2VLImageProcessorPil.from_pretrained(path)
    model = Qwen3VLForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    image_id = model.config.image_token_id
    last = []
    for prompt, pictures in zip(prompts, images):
        prompt, kwargs = expand_images(processor, prompt, pictures)
        input_ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        kwargs["mm_token_type_ids"] = (input_ids == image_id).int()
        with torch.no_grad():
            hidden = model.model(input_ids=input_ids, **kwargs).last_hidden_state[0]
        last.append(hidden[-1])
    return model, tokenizer, last


def embedding_reference(path: Path, items: list[dict], instruction: str | None = None):
    """`Qwen3VLEmbedder.process` over `{text?, image?}` items: each item's normalised embedding."""
    import torch

    prompts = [chat(instruction or EMBED_INSTRUCTION, ([item["image"]] if "image" in item else [])
                    + ([item["text"]] if "text" in item else [])) for item in items]
    _, _, last = run_recipe(path, prompts, [[item["image"]] if "image" in item else [] for item in items])
    return [torch.nn.functional.normalize(h, dim=-1).numpy() for h in last]


def reranker_prompt(query: list, document: list, instruction: str | None = None) -> str:
    """`Qwen3VLReranker.format_mm_instruction`'s chat: each side's prefix, then its images, then its texts."""
    return chat(RERANK_SYSTEM, [f"<Instruct>: {instruction or RERANK_INSTRUCTION}", "<Query>:", *query,
                                "\n<Document>:", *document])


def reranker_reference(path: Path, pairs: list[tuple[list, list]], instruction: str | None = None) -> list[float]:
    """`Qwen3VLReranker.process`'s scores of (query parts, document parts) pairs (a part: a text, or
    image bytes): sigmoid(last hidden . (lm_head[yes] - lm_head[no]))."""
    import torch

    prompts = [reranker_prompt(q, d, instruction) for q, d in pairs]
    images = [[part for part in q + d if not isinstance(part, str)] for q, d in pairs]
    model, tokenizer, last = run_recipe(path, prompts, images)
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    row = model.lm_head.weight[yes] - model.lm_head.weight[no]
    with torch.no_grad():
        return [float(torch.sigmoid(h @ row)) for h in last]
