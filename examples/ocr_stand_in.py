"""A tiny Florence-2 with random weights, standing in for microsoft/Florence-2-base where only the
Hugging Face Hub has that (this repository's build machines are offline): it runs SIE's whole OCR
path (page rendering, the vision encoder, beam-search decoding, post-processing) and the text it
"reads" is gibberish. Built as transformers' `Florence2ForConditionalGeneration` with its processor
(a byte-level BPE trained on a few words, Florence-2's task and location tokens added), the layout
SIE serves as a card-less directory."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from stand_ins import quiet_save  # the same bar, quieted the same way

NAME = "tiny-florence2"
WORDS = "the a of and to in is for with on disk file image text page library package tool data".split()
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
TAGS = ["<od>", "</od>", "<ocr>", "</ocr>", "<poly>", "</poly>", "<sep>"]
LOCATIONS = [f"<loc_{i}>" for i in range(1000)]
# DaViT in two small stages over 64 x 48 images (the last stage's 8 x 6 patches plus one pooled token)
VISION = dict(in_channels=3, depths=[1, 1], patch_size=[7, 3], patch_stride=[4, 2], patch_padding=[3, 1],
              patch_prenorm=[False, True], embed_dim=[16, 32], num_heads=[2, 4], num_groups=[2, 4], window_size=3,
              projection_dim=32, max_position_embeddings=50, max_temporal_embeddings=100, drop_path_rate=0.0)
IMAGE_TOKENS = 8 * 6 + 1
# Florence-2's published generation config (3 beams, no trigram twice) and its OCR post-processing pattern
GENERATION = dict(bos_token_id=0, eos_token_id=2, pad_token_id=1, decoder_start_token_id=2, early_stopping=True,
                  forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=3, num_beams=3)
POST_PROCESSOR = {"ocr": {"pattern": r"(.+?)<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>"
                                     r"<loc_(\d+)><loc_(\d+)>", "area_threshold": 0.0}, "pure_text": {}}


def missing_library() -> str | None:
    """None when the stand-in can be built here, else one line naming what to install."""
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
        return f"{NAME} is built with transformers, which the server extra installs: pip install -e '.[server]'"
    return None


def _tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator([" ".join(WORDS), "What is the text in the image?"], trainer)
    backend.add_tokens([AddedToken(t, normalized=False) for t in TAGS + LOCATIONS])
    backend.add_special_tokens([AddedToken("<image>", special=True, normalized=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", extra_special_tokens={"image_token": "<image>"})


def tiny_florence2(dest: Path, seed: int = 0) -> Path:
    """Save the stand-in under `dest` and return `dest`."""
    import torch
    from transformers import (
        BartConfig,
        CLIPImageProcessorPil,
        Florence2Config,
        Florence2ForConditionalGeneration,
        Florence2Processor,
        GenerationConfig,
    )

    tokenizer = _tokenizer()
    torch.manual_seed(seed)
    text = BartConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                      max_position_embeddings=128, scale_embedding=False, bos_token_id=0, pad_token_id=1,
                      eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2, tie_word_embeddings=False)
    config = Florence2Config(text_config=text.to_dict(), vision_config=VISION, image_token_id=tokenizer.image_token_id,
                             tie_word_embeddings=False)
    model = Florence2ForConditionalGeneration(config).eval()
    with torch.no_grad():  # wider than transformers' init, so the answer depends on the page
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(torch.randn_like(p) * (0.15 if p.dim() > 1 else 0.5) + centre)
    model.generation_config = GenerationConfig(**GENERATION)
    images = CLIPImageProcessorPil(size={"height": 64, "width": 48}, do_center_crop=False, do_resize=True,
                                   do_rescale=True, do_normalize=True, image_mean=[0.485, 0.456, 0.406],
                                   image_std=[0.229, 0.224, 0.225], image_seq_length=IMAGE_TOKENS)
    with quiet_save():
        model.save_pretrained(dest)
        Florence2Processor(image_processor=images, tokenizer=tokenizer,
                           post_processor_config=POST_PROCESSOR).save_pretrained(dest)
    return dest
