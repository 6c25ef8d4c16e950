"""A tiny Florence-2 (DaViT 2 stages + BART 2+2 layers, 32 wide) with random weights, saved as a
`Florence2ForConditionalGeneration` checkpoint, its processor (PIL CLIP image processor for 64x48
images, a byte-level BPE tokenizer with Florence-2's added tokens), and SIE's model on the same files.

The weights are drawn wider than transformers' init (std 0.15, queries and keys 0.5, norms around 1)
and the LM head is untied, as for the tiny Donut: at init scale a tiny decoder repeats one token forever, and greedy
and beam search then agree on everything, which tests nothing. The location tokens are numerous
(1,000 of the vocabulary's ids), so the random decoder emits them often: post-processing has boxes
to parse.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from arch_fixtures import load_sie_backbone

# DaViT: stage 0 a 7x7 stride-4 conv, stage 1 a 3x3 stride-2 conv with a norm before it; windows of
# 3 patches, so a 64x48 image (16x12 then 8x6 patches) pads its windows in stage 1.
VISION = dict(in_channels=3, depths=[1, 1], patch_size=[7, 3], patch_stride=[4, 2], patch_padding=[3, 1],
              patch_prenorm=[False, True], embed_dim=[16, 32], num_heads=[2, 4], num_groups=[2, 4], window_size=3,
              projection_dim=32, max_position_embeddings=50, max_temporal_embeddings=100, drop_path_rate=0.0)
IMAGE_SIZE = {"height": 64, "width": 48}
IMAGE_TOKENS = 8 * 6 + 1  # the last stage's patches plus the spatially pooled one

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
WORDS = ["the", "a", "car", "red", "blue", "sign", "text", "tree", "person", "dog", "it", "image", "What", "is",
         "in", "Locate", "objects", "with", "category", "name", "region", "phrases", "caption", ":", "?", "."]
# Florence-2's tokenizer adds these after BART's vocabulary (a subset of its task and grounding tags)
TAGS = ["<od>", "</od>", "<ocr>", "</ocr>", "<poly>", "</poly>", "<sep>", "<ground>", "<obj>", "<bbox>"]
LOCATIONS = [f"<loc_{i}>" for i in range(1000)]


def _tokenizer():
    """A byte-level BPE (BART's kind) trained on a few sentences, Florence-2's added tokens after it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    corpus = [" ".join(WORDS), "What is the text in the image?", "Locate the objects with category name in the image.",
              "a red car and a blue sign", "Locate the phrases in the caption: a dog in the tree"]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(corpus, trainer)
    backend.add_tokens([AddedToken(t, normalized=False) for t in TAGS + LOCATIONS])
    backend.add_special_tokens([AddedToken("<image>", special=True, normalized=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", extra_special_tokens={"image_token": "<image>"})


def tiny_florence2(dest: Path, seed: int = 0, text: dict | None = None, **vision):
    """Save a tiny Florence-2 and its processor under `dest` (`text` / `vision`: config fields laid
    over the defaults); returns (transformers model in eval mode, processor)."""
    from transformers import (
        BartConfig,
        CLIPImageProcessorPil,
        Florence2Config,
        Florence2ForConditionalGeneration,
        Florence2Processor,
        GenerationConfig,
    )

    tokenizer = _tokenizer()
    vocab = len(tokenizer)
    torch.manual_seed(seed)
    text_config = BartConfig(**{**dict(vocab_size=vocab, d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=128, scale_embedding=False,
                                       bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
                                       forced_eos_token_id=2, tie_word_embeddings=False), **(text or {})})
    config = Florence2Config(text_config=text_config.to_dict(), vision_config={**VISION, **vision},
                             image_token_id=tokenizer.image_token_id,
                             tie_word_embeddings=text_config.tie_word_embeddings)
    model = Florence2ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            # sharper attention (queries and keys wider) makes the answer depend on the image and the prompt
            std = 0.5 if any(part in name for part in ("q_proj", "k_proj", "qkv")) else 0.15
            p.copy_(torch.randn_like(p) * (std if p.dim() > 1 else 0.5) + centre)
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(dest)
    images = CLIPImageProcessorPil(size=IMAGE_SIZE, do_center_crop=False, do_resize=True, do_rescale=True,
                                   do_normalize=True, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
                                   image_seq_length=IMAGE_TOKENS)
    processor = Florence2Processor(image_processor=images, tokenizer=tokenizer,
                                   post_processor_config=POST_PROCESSOR_CONFIG)
    processor.save_pretrained(dest)
    return model, processor


# Florence-2's published generation_config.json (microsoft/Florence-2-*): 3 beams stopping early, <s>
# forced first, no trigram twice
GENERATION = dict(bos_token_id=0, eos_token_id=2, pad_token_id=1, decoder_start_token_id=2, early_stopping=True,
                  forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=3, num_beams=3)

# What transformers' conversion script writes into Florence-2's processor_config.json (abridged
# banned list; the keys it reads are the tasks', and it reads PATTERN / AREA_THRESHOLD in capitals)
POST_PROCESSOR_CONFIG = {
    "ocr": {"pattern": r"(.+?)<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>",
            "area_threshold": 0.0},
    "phrase_grounding": {"banned_grounding_tokens": ["it", "the image", "image", "the", "a"]},
    "pure_text": {}, "description_with_bboxes": {}, "description_with_polygons": {}, "polygons": {}, "bboxes": {},
    "description_with_bboxes_or_polygons": {},
}


load_sie_florence2 = load_sie_backbone  # SIE's Florence-2 from a saved directory


# The inverse of transformers' convert_florence2_original_pytorch_to_hf tables (vision_conv_embeddings,
# vision_spatial_block, vision_channel_block, multi_modal_projector, language_model): transformers' names
# back to the original remote-code checkpoints' (microsoft/Florence-2-*).
_TO_ORIGINAL = [
    (r"^model\.vision_tower\.convs\.(\d+)\.conv\.", r"vision_tower.convs.\1.proj."),
    (r"^model\.vision_tower\.", "vision_tower."),
    (r"\.(spatial|channel)_block\.conv(\d)\.", r".\1_block.conv\2.fn.dw."),
    (r"\.spatial_block\.window_attn\.", ".spatial_block.window_attn.fn."),
    (r"\.spatial_block\.norm1\.", ".spatial_block.window_attn.norm."),
    (r"\.channel_block\.channel_attn\.", ".channel_block.channel_attn.fn."),
    (r"\.channel_block\.norm1\.", ".channel_block.channel_attn.norm."),
    (r"\.(spatial|channel)_block\.norm2\.", r".\1_block.ffn.norm."),
    (r"\.(spatial|channel)_block\.ffn\.fc", r".\1_block.ffn.fn.net.fc"),
    (r"^model\.multi_modal_projector\.image_position_embed\.", "image_pos_embed."),
    (r"^model\.multi_modal_projector\.", ""),
    (r"^model\.language_model\.", "language_model.model."),
    (r"^lm_head\.", "language_model.lm_head."),
]


def to_original_layout(native: Path, dest: Path) -> None:
    """Rewrite a transformers-layout Florence-2 directory as the original remote-code layout: config.json's
    `dim_embed` vision config and `florence2_language` text config, the original tensor names, the
    projection as a raw `[vision, projection]` matrix, a zero `final_logits_bias`."""
    import re
    import shutil

    from safetensors.torch import load_file, save_file

    tensors = {}
    for name, tensor in load_file(str(native / "model.safetensors")).items():
        for pattern, repl in _TO_ORIGINAL:
            name = re.sub(pattern, repl, name)
        tensors[name] = tensor.t().contiguous() if name == "image_projection.weight" else tensor
    tensors["image_projection"] = tensors.pop("image_projection.weight")
    vocab = tensors["language_model.model.shared.weight"].shape[0]
    tensors["language_model.final_logits_bias"] = torch.zeros(1, vocab)
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((native / "config.json").read_text())
    vision = config["vision_config"]
    config["vision_config"] = {
        "model_type": "davit", "dim_embed": vision["embed_dim"], "image_pos_embed": {
            "type": "learned_abs_2d", "max_pos_embeddings": vision["max_position_embeddings"]},
        "visual_temporal_embedding": {"type": "COSINE", "max_temporal_embeddings": vision["max_temporal_embeddings"]},
        "image_feature_source": ["spatial_avg_pool", "temporal_avg_pool"],
        **{k: vision[k] for k in ("depths", "num_heads", "num_groups", "window_size", "patch_size", "patch_stride",
                                  "patch_padding", "patch_prenorm", "projection_dim")}}
    config["text_config"]["model_type"] = "florence2_language"
    config["projection_dim"] = vision["projection_dim"]
    (dest / "config.json").write_text(json.dumps(config))
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "processor_config.json"):
        shutil.copy(native / name, dest / name)
