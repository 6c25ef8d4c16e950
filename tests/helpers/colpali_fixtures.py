"""A tiny random ColPali (ColPaliForRetrieval: PaliGemma = SigLIP vision tower + projector + Gemma
decoder, then a 128 -> here 16-wide projection) saved as `save_pretrained` writes it, with its
ColPaliProcessor (a Gemma tokenizer over a byte-fallback BPE vocabulary built here, a
SiglipImageProcessor), and transformers' own embeddings and MaxSim scores as the reference.

    from colpali_fixtures import make_tiny_colpali, colpali_reference
"""

from __future__ import annotations

import io
from pathlib import Path

from image_fixtures import TINY_IMAGE_SIZE, TINY_PATCH_SIZE, _perturb

TINY_IMAGE_TOKENS = (TINY_IMAGE_SIZE // TINY_PATCH_SIZE) ** 2
TINY_EMBEDDING_DIM = 16


def tiny_gemma_tokenizer():
    """GemmaTokenizer (BPE with byte fallback, spaces as '▁') over the specials, the 256 byte tokens,
    printable ASCII characters and a few merges."""
    from transformers import GemmaTokenizer

    vocab: dict[str, int] = {}
    for token in ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]:
        vocab[token] = len(vocab)
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    for char in ["▁"] + [chr(c) for c in range(33, 127)]:
        vocab.setdefault(char, len(vocab))
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a"), ("c", "a"), ("▁", "c"), ("▁c", "a")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    return GemmaTokenizer(vocab=vocab, merges=merges)


def make_tiny_colpali(dest: Path, seed: int = 0) -> Path:
    """A random ColPaliForRetrieval with its ColPaliProcessor saved in `dest`; returns `dest`."""
    import torch
    from transformers import ColPaliConfig, ColPaliForRetrieval, ColPaliProcessor, PaliGemmaConfig, SiglipImageProcessor

    dest = Path(dest)
    image_processor = SiglipImageProcessor(size={"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE},
                                           image_seq_length=TINY_IMAGE_TOKENS)
    processor = ColPaliProcessor(image_processor=image_processor, tokenizer=tiny_gemma_tokenizer())
    tokenizer = processor.tokenizer
    text = dict(model_type="gemma", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                max_position_embeddings=256, pad_token_id=tokenizer.pad_token_id,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    vision = dict(model_type="siglip_vision_model", hidden_size=24, intermediate_size=29, num_hidden_layers=2,
                  num_attention_heads=4, image_size=TINY_IMAGE_SIZE, patch_size=TINY_PATCH_SIZE,
                  projection_dim=32, vision_use_head=False)
    vlm = PaliGemmaConfig(vision_config=vision, text_config=text, image_token_index=processor.image_token_id,
                          projection_dim=32)
    config = ColPaliConfig(vlm_config=vlm, embedding_dim=TINY_EMBEDDING_DIM)
    torch.manual_seed(seed)
    model = ColPaliForRetrieval(config).eval()
    _perturb(model, seed)
    model.save_pretrained(dest)
    processor.save_pretrained(dest)
    return dest


def colpali_reference(path: Path, images: list[bytes], queries: list[str]):
    """transformers' ColPali embeddings and scores (`retrieval_reference` with ColPaliForRetrieval)."""
    from transformers import ColPaliForRetrieval, ColPaliProcessor

    return retrieval_reference(ColPaliForRetrieval, ColPaliProcessor, path, images, queries)


def retrieval_reference(model_class, processor_class, path: Path, images: list[bytes], queries: list[str]):
    """A ColVision retriever's embeddings in transformers (padding dropped: a list of `[n, D]` float32
    arrays) for the encoded images (decoded to RGB) and the query texts, and the processor's
    score_retrieval of the queries against the images: `model(**processor(...))`, as the model cards
    of ColPali and ColQwen2 run them."""
    import torch
    from PIL import Image

    processor = processor_class.from_pretrained(path)
    model = model_class.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        pages = processor.process_images(images=[Image.open(io.BytesIO(b)).convert("RGB") for b in images])
        page_out = model(**pages).embeddings
        asked = processor.process_queries(text=queries)
        query_out = model(**asked).embeddings
    page_vectors = [e[m.bool()] for e, m in zip(page_out, pages["attention_mask"])]
    query_vectors = [e[m.bool()] for e, m in zip(query_out, asked["attention_mask"])]
    scores = processor.score_retrieval(query_vectors, page_vectors)
    return ([v.numpy() for v in page_vectors], [v.numpy() for v in query_vectors], scores.numpy())
