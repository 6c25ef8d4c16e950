"""A tiny Donut (DonutSwin 2 stages + MBart 2 layers, 32 wide) with random weights, saved as a
`VisionEncoderDecoderModel` checkpoint, and the transformers reference on the same weights.

The weights are drawn wider than transformers' init (std 0.15, norms around 1) and the LM head is
untied: with init-scale weights a tiny decoder repeats its last token forever, and greedy and beam
search then agree on everything, which tests nothing.
"""

from __future__ import annotations

from pathlib import Path

import torch

from arch_fixtures import load_sie_backbone

ENCODER = dict(image_size=[64, 48], patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4)
DECODER = dict(vocab_size=40, d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64,
               max_position_embeddings=64, is_decoder=True, add_cross_attention=True, scale_embedding=True,
               tie_word_embeddings=False)


def tiny_donut(dest: Path, seed: int = 0, decoder: dict | None = None, **encoder):
    """Save a tiny Donut under `dest` (`encoder` / `decoder`: config fields laid over the defaults);
    returns the transformers model (eval mode)."""
    from transformers import DonutSwinConfig, MBartConfig, VisionEncoderDecoderConfig, VisionEncoderDecoderModel

    torch.manual_seed(seed)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(DonutSwinConfig(**{**ENCODER, **encoder}),
                                                                     MBartConfig(**{**DECODER, **(decoder or {})}))
    model = VisionEncoderDecoderModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(torch.randn_like(p) * (0.15 if p.dim() > 1 else 0.5) + centre)
    model.save_pretrained(dest)
    return model


load_sie_donut = load_sie_backbone  # SIE's Donut backbone from a saved directory


# A word-level vocabulary of the tiny decoder's 40 ids: the four specials at Donut's ids (<s> 0,
# <pad> 1, </s> 2, <unk> 3), the task and field tags Donut's fine-tunes add as tokens, and words.
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
TAGS = ["<s_cord-v2>", "<s_menu>", "</s_menu>", "<s_nm>", "</s_nm>", "<s_price>", "</s_price>", "<sep/>",
        "<s_docvqa>", "<s_question>", "</s_question>", "<s_answer>", "</s_answer>", "<s_rvlcdip>", "<s_class>",
        "</s_class>", "<letter/>", "<invoice/>"]
WORDS = ["coffee", "tea", "cake", "1", "2", "3.50", "what", "is", "the", "total", "?", "a", "b", "c", "d", "e",
         "f", "g"]
IMAGE_SIZE = {"height": 64, "width": 48}


def tiny_donut_processor(dest: Path):
    """Save a DonutProcessor (PIL image processor for 64x48 pages, long axis aligned; the word-level
    tokenizer) under `dest`; returns it."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import DonutImageProcessorPil, DonutProcessor, PreTrainedTokenizerFast

    tokens = SPECIALS + TAGS + WORDS
    assert len(tokens) == DECODER["vocab_size"]
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", unk_token="<unk>")
    images = DonutImageProcessorPil(size=IMAGE_SIZE, do_align_long_axis=True, do_thumbnail=True, do_pad=True)
    processor = DonutProcessor(image_processor=images, tokenizer=tokenizer)
    processor.save_pretrained(dest)
    return processor
