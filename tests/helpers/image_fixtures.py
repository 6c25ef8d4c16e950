"""Tiny random image-text checkpoints and test images (no downloads).

    from image_fixtures import make_tiny_clip, make_tiny_siglip, sample_images, hostile_images

    path = make_tiny_clip(tmp_path / "clip")        # CLIPModel + CLIPProcessor, save_pretrained layout
    images = sample_images()                        # {name: encoded bytes}: PNG, JPEG, WebP, grayscale, RGBA
    pil = sample_pil_images()                       # the same pictures as PIL images

`make_tiny_clip` / `make_tiny_siglip` write what `CLIPModel.save_pretrained` and
`CLIPProcessor.save_pretrained` (SigLIP: `SiglipModel`, `SiglipProcessor`) write for a real
checkpoint, with random weights (seeded) and a small byte-level BPE vocabulary built
offline, so `sie-server serve --model NAME=PATH` serves it as it would a Hub download.
`hostile_images()` gives the inputs the server must refuse with a 4xx.
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from pathlib import Path

# image side of the tiny models: 32 x 32 pixels in 8 x 8 patches (16 patches + 1 class token)
TINY_IMAGE_SIZE = 32
TINY_PATCH_SIZE = 8


def _byte_level_vocab(specials: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """CLIP's BPE alphabet (every byte's printable stand-in, with and without the end-of-word
    mark), a few merges and the special tokens last, so the end-of-text token has the highest id
    (CLIP's text tower pools at the highest id, as the original checkpoints' does)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = sorted(set(bytes_to_unicode().values()))
    vocab: dict[str, int] = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    merges = [("t", "h"), ("th", "e</w>"), ("c", "a"), ("ca", "t</w>"), ("d", "o"), ("do", "g</w>")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    for token in specials:
        vocab[token] = len(vocab)
    return vocab, merges


def tiny_clip_tokenizer():
    """A CLIPTokenizer over the byte-level alphabet (516 + merges tokens)."""
    from transformers import CLIPTokenizer

    vocab, merges = _byte_level_vocab(["<|startoftext|>", "<|endoftext|>"])
    return CLIPTokenizer(vocab=vocab, merges=merges)


def make_tiny_clip(dest: Path, seed: int = 0, **vision_overrides) -> Path:
    """A random CLIPModel with its processor saved in `dest` (the Hugging Face layout); returns `dest`."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    dest = Path(dest)
    tokenizer = tiny_clip_tokenizer()
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=77, projection_dim=16,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)
    vision = dict(hidden_size=48, intermediate_size=53, num_hidden_layers=2, num_attention_heads=4,
                  image_size=TINY_IMAGE_SIZE, patch_size=TINY_PATCH_SIZE, projection_dim=16)
    vision.update(vision_overrides)
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    _perturb(model, seed)
    model.save_pretrained(dest)
    size = vision["image_size"]
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size}),
        tokenizer=tokenizer,
    )
    processor.save_pretrained(dest)
    return dest


def tiny_siglip_tokenizer():
    """A fast tokenizer like SigLIP's (no start token, `</s>` appended, padding to 64 with `<pad>`), over the
    same byte-level alphabet (SigLIP's own is a SentencePiece model, which cannot be trained offline here)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab, merges = _byte_level_vocab(["<unk>", "<pad>", "</s>"])
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, end_of_word_suffix="</w>", unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                              use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>",
                                                                                              vocab["</s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="</s>", model_max_length=64)


def tiny_sentencepiece_siglip_tokenizer(directory: Path):
    """SigLIP (1)'s own tokenizer class over a tiny SentencePiece model trained here: what the Hub's
    SigLIP checkpoints ship (spiece.model, no tokenizer.json), so transformers loads it slow, in Python."""
    import sentencepiece
    from transformers import SiglipTokenizer

    corpus = ["the cat sat on the mat", "a dog on the grass", "photos of red shoes and blue hats",
              "Hello, World! It is 5 o'clock."] * 50
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=35, model_type="unigram", pad_id=0, eos_id=1,
        unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>", character_coverage=1.0,
        minloglevel=2)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spiece.model").write_bytes(model.getvalue())
    return SiglipTokenizer(vocab_file=str(directory / "spiece.model"), model_max_length=64)


def make_tiny_siglip(dest: Path, seed: int = 0, sentencepiece: bool = False, **vision_overrides) -> Path:
    """A random SiglipModel with its processor saved in `dest`; returns `dest`. `sentencepiece`: with
    SigLIP's own SentencePiece tokenizer (as the Hub's SigLIP 1 checkpoints) instead of a Rust one."""
    import torch
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    dest = Path(dest)
    tokenizer = tiny_sentencepiece_siglip_tokenizer(dest) if sentencepiece else tiny_siglip_tokenizer()
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64, projection_size=32,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                  image_size=TINY_IMAGE_SIZE, patch_size=TINY_PATCH_SIZE)
    vision.update(vision_overrides)
    torch.manual_seed(seed)
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    _perturb(model, seed)
    model.save_pretrained(dest)
    size = vision["image_size"]
    SiglipImageProcessor(size={"height": size, "width": size}).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def _perturb(model, seed: int) -> None:
    """Random values in every tensor (initialisers leave norms at 1/0, biases and class/probe
    embeddings at 0, which would hide a tensor the forward pass forgot)."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("logit_scale") or name.endswith("logit_bias"):
                continue
            noise = torch.randn(param.shape, generator=generator) * 0.02
            param.add_(noise if param.dim() > 1 or "norm" not in name else noise * 5)


# ---- images ------------------------------------------------------------------
def _picture(width: int, height: int, seed: int):
    """A smooth random RGB picture (compresses like a photo, unlike white noise)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 8), max(2, width // 8), 3), dtype=np.uint8)
    return Image.fromarray(small).resize((width, height), Image.BILINEAR)


def noise_page(width: int, height: int, seed: int):
    """A page of random RGB pixels (every pixel its own: a document model's tiny stand-in reads each)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def sample_pil_images() -> dict[str, object]:
    """Pictures of different sizes and modes, as PIL images: RGB, grayscale (L), RGBA, palette (P)."""
    rgba = _picture(40, 64, 3).convert("RGBA")
    rgba.putalpha(128)
    return {
        "png_rgb": _picture(64, 48, 0),
        "jpeg_rgb": _picture(100, 75, 1),
        "webp_rgb": _picture(33, 90, 2),
        "png_rgba": rgba,
        "png_gray": _picture(50, 50, 4).convert("L"),
        "gif_palette": _picture(24, 30, 5).convert("P"),
    }


FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "gif": "GIF"}


def encode_image(image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def sample_images() -> dict[str, bytes]:
    """`sample_pil_images()` encoded in the format each name starts with (PNG, JPEG, WebP, GIF)."""
    return {name: encode_image(image, FORMATS[name.split("_")[0]]) for name, image in sample_pil_images().items()}


# ---- hostile inputs --------------------------------------------------------------
def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bomb(width: int, height: int) -> bytes:
    """A valid grayscale PNG of `width` x `height` black pixels: 20,000 x 20,000 is 400 MB of
    pixels in about 400 KB of file (zlib squeezes the zero rows ~1000:1)."""
    compressor = zlib.compressobj(9)
    row = b"\x00" * (width + 1)  # filter byte + pixels
    parts = [compressor.compress(row) for _ in range(height)]
    idat = b"".join(parts) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def png_text_bomb(megabytes: int = 64) -> bytes:
    """A small valid PNG whose zTXt chunk decompresses to `megabytes` MB (a zip bomb in a chunk)."""
    small = encode_image(_picture(8, 8, 9), "PNG")
    bomb = _png_chunk(b"zTXt", b"Comment\x00\x00" + zlib.compress(b"\x00" * (megabytes << 20), 9))
    return small[:33] + bomb + small[33:]  # right after the IHDR chunk (8 + 25 bytes)


@functools.lru_cache(maxsize=1)
def hostile_images() -> dict[str, bytes]:
    """Inputs a server must refuse with a 4xx (and go on serving)."""
    png = sample_images()["png_rgb"]
    return {
        "truncated_png": png[: len(png) // 2],
        "huge_png": png_bomb(20_000, 20_000),
        "text_bomb_png": png_text_bomb(),
        "text_named_jpg": b"this is a text file that someone named photo.jpg\n" * 4,
        "empty": b"",
    }


def save_images(directory: Path) -> dict[str, Path]:
    """`sample_images()` written as files (`png_rgb.png`, ...) in `directory`; their paths by name."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, data in sample_images().items():
        path = directory / f"{name}.{name.split('_')[0]}"
        path.write_bytes(data)
        paths[name] = path
    return paths


# ---- the reference -----------------------------------------------------------------
def reference_features(kind: str, path: Path, images: list[bytes], texts: list[str]):
    """transformers' `get_image_features` for the images (decoded to RGB, through the checkpoint's
    own image processor) then `get_text_features` for the texts: `[images + texts, dim]` numpy.
    SigLIP's texts are padded to 64 tokens without an attention mask, as its model card says."""
    import torch
    from PIL import Image
    from transformers import AutoTokenizer, CLIPModel, SiglipModel

    from sie_engine.images import load_image_processor

    model = (CLIPModel if kind == "clip" else SiglipModel).from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    pictures = [Image.open(io.BytesIO(data)).convert("RGB") for data in images]
    pixels = torch.from_numpy(load_image_processor(path)(images=pictures, return_tensors="np")["pixel_values"])
    with torch.no_grad():
        image_features = model.get_image_features(pixel_values=pixels)
        if kind == "siglip":
            ids = tokenizer(texts, padding="max_length", truncation=True, max_length=64, return_tensors="pt").input_ids
            text_features = model.get_text_features(input_ids=ids)
        else:
            text_features = model.get_text_features(**tokenizer(texts, padding=True, return_tensors="pt"))
    return torch.cat([getattr(f, "pooler_output", f) for f in (image_features, text_features)]).numpy()


def assert_cosine(ours, ref, low: float = 0.9999) -> None:
    """Row-wise cosine similarity of two `[n, dim]` arrays at least `low`."""
    import numpy as np

    assert ours.shape == ref.shape
    cosine = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    assert cosine.min() >= low, cosine


__all__ = ["TINY_IMAGE_SIZE", "TINY_PATCH_SIZE", "assert_cosine", "encode_image", "hostile_images", "make_tiny_clip",
           "make_tiny_siglip", "png_bomb", "png_text_bomb", "reference_features", "sample_images", "sample_pil_images",
           "save_images", "tiny_clip_tokenizer", "tiny_sentencepiece_siglip_tokenizer", "tiny_siglip_tokenizer"]
