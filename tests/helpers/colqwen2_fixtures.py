"""A tiny random ColQwen2 (ColQwen2ForRetrieval: a Qwen2-VL = vision tower with its patch merger +
Qwen2 decoder, then a 128 -> here 16-wide projection) saved as `save_pretrained` writes it, with its
ColQwen2Processor (a Qwen2 tokenizer over a byte-level BPE vocabulary built here, a
Qwen2VLImageProcessor with small min/max pixels), and transformers' own embeddings and MaxSim
scores as the reference.

    from colqwen2_fixtures import make_tiny_colqwen2, colqwen2_reference
"""

from __future__ import annotations

from pathlib import Path

from colpali_fixtures import retrieval_reference
from image_fixtures import _perturb

TINY_EMBEDDING_DIM = 16
# 4-pixel patches merged 2 x 2: every side a multiple of 8 pixels, 4 to 40 image tokens per page
TINY_PATCH = 4
TINY_MERGE = 2
TINY_MIN_PIXELS = (TINY_PATCH * TINY_MERGE) ** 2 * 4
TINY_MAX_PIXELS = (TINY_PATCH * TINY_MERGE) ** 2 * 40
QWEN2_VL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                     "<|image_pad|>", "<|video_pad|>"]


def tiny_qwen2_tokenizer(extra_merges: tuple[tuple[str, str], ...] = ()):
    """Qwen2Tokenizer (byte-level BPE) over the 256 byte characters, a few merges (and `extra_merges`)
    and Qwen2-VL's special tokens."""
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab: dict[str, int] = {}
    for char in sorted(set(bytes_to_unicode().values())):
        vocab[char] = len(vocab)
    merges = [("t", "h"), ("h", "e"), ("Ġ", "t"), ("Ġt", "he"), ("a", "t"), ("Ġ", "c"), ("Ġc", "at"), *extra_merges]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    for token in QWEN2_VL_SPECIALS:
        vocab[token] = len(vocab)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges)
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN2_VL_SPECIALS[1:]})
    return tokenizer


# Qwen2.5-VL's vision tower (ColQwen2.5): 16-pixel windows are 2 x 2 merge windows, block 1 attends to the whole page
QWEN2_5_VISION = dict(depth=2, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32,
                      patch_size=TINY_PATCH, spatial_merge_size=TINY_MERGE, temporal_patch_size=2,
                      window_size=16, fullatt_block_indexes=[1])


def make_tiny_colqwen2(dest: Path, seed: int = 0, qwen2_5: bool = False) -> Path:
    """A random ColQwen2ForRetrieval (with `qwen2_5`, over a Qwen2.5-VL: ColQwen2.5) with its
    ColQwen2Processor saved in `dest`; returns `dest`."""
    import torch
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor, Qwen2_5_VLConfig, Qwen2VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    dest = Path(dest)
    tokenizer = tiny_qwen2_tokenizer()
    image_processor = Qwen2VLImageProcessorPil(min_pixels=TINY_MIN_PIXELS, max_pixels=TINY_MAX_PIXELS,
                                               patch_size=TINY_PATCH, merge_size=TINY_MERGE, temporal_patch_size=2)
    processor = ColQwen2Processor(image_processor=image_processor, tokenizer=tokenizer)
    ids = tokenizer.convert_tokens_to_ids
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 1, 1]},
                pad_token_id=tokenizer.pad_token_id, bos_token_id=ids("<|endoftext|>"),
                eos_token_id=ids("<|im_end|>"))
    vision = dict(depth=2, embed_dim=16, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=TINY_PATCH,
                  spatial_merge_size=TINY_MERGE, temporal_patch_size=2)
    vlm = (Qwen2_5_VLConfig if qwen2_5 else Qwen2VLConfig)(
        text_config=text, vision_config=QWEN2_5_VISION if qwen2_5 else vision, image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"))
    config = ColQwen2Config(vlm_config=vlm, embedding_dim=TINY_EMBEDDING_DIM)
    torch.manual_seed(seed)
    model = ColQwen2ForRetrieval(config).eval()
    _perturb(model, seed)
    model.save_pretrained(dest)
    processor.save_pretrained(dest)
    return dest


def colqwen2_reference(path: Path, images: list[bytes], queries: list[str]):
    """transformers' ColQwen2 embeddings (padding dropped) of the images and query texts and
    ColQwen2Processor.score_retrieval's scores (colpali_fixtures.retrieval_reference)."""
    from transformers import ColQwen2ForRetrieval, ColQwen2Processor

    return retrieval_reference(ColQwen2ForRetrieval, ColQwen2Processor, path, images, queries)


def colqwen2_mrope_pages(path: Path, images: list[bytes]):
    """transformers' ColQwen2 page embeddings (padding dropped) under the 3D positions
    `get_rope_index` computes for them (colpali-engine's ColQwen2.forward passes those), rather than
    the 1D ones ColQwen2ForRetrieval falls back to."""
    import io

    import torch
    from PIL import Image
    from transformers import ColQwen2ForRetrieval, ColQwen2Processor

    processor = ColQwen2Processor.from_pretrained(path)
    model = ColQwen2ForRetrieval.from_pretrained(path, dtype=torch.float32).eval()
    pages = processor.process_images(images=[Image.open(io.BytesIO(b)).convert("RGB") for b in images])
    image_tokens = (pages["input_ids"] == model.config.vlm_config.image_token_id).int()
    positions, _ = model.vlm.get_rope_index(pages["input_ids"], image_tokens, image_grid_thw=pages["image_grid_thw"],
                                            attention_mask=pages["attention_mask"])
    with torch.no_grad():
        out = model(**pages, position_ids=positions).embeddings
    return [e[m.bool()].numpy() for e, m in zip(out, pages["attention_mask"])]


# colpali-engine's LoRA targets as vidore's ColQwen2 / ColQwen2.5 adapters name them (its training configs)
COLPALI_ENGINE_TARGETS = ("(.*(model).*(down_proj|gate_proj|up_proj|k_proj|q_proj|v_proj|o_proj).*$"
                          "|.*(custom_text_proj).*$)")
# what colpali-engine's base and adapter repositories carry of the processor (no processor_config.json)
PROCESSOR_FILES = ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _colpali_engine_name(name: str) -> str:
    """ColQwen2ForRetrieval's tensor name as colpali-engine's ColQwen2 / ColQwen2_5 saves it (the inverse
    of transformers' convert_colqwen2_weights_to_hf.py renames)."""
    for ours, theirs in (("embedding_proj_layer.", "custom_text_proj."), ("vlm.language_model.", "model."),
                         ("vlm.model.language_model.", "model."), ("vlm.visual.", "visual."),
                         ("vlm.model.visual.", "visual."), ("vlm.lm_head.", "lm_head.")):
        if name.startswith(ours):
            return theirs + name[len(ours):]
    raise ValueError(f"unexpected ColQwen2ForRetrieval tensor {name}")


def make_tiny_colpali_engine(dest: Path, seed: int = 0, qwen2_5: bool = True, modules_to_save: bool = False):
    """A tiny colpali-engine ColQwen2.5 (or ColQwen2) base in its own layout, a PEFT LoRA adapter on it made
    by peft with colpali-engine's targets (and, with `modules_to_save`, the projection saved whole), and
    the reference: the base with peft's `merge_and_unload` applied, as ColQwen2ForRetrieval (transformers'
    conversion). Returns (base directory, adapter directory, reference directory)."""
    import json
    import shutil

    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file
    from torch import nn
    from transformers import ColQwen2ForRetrieval

    dest = Path(dest)
    hf = make_tiny_colqwen2(dest / "hf", seed=seed, qwen2_5=qwen2_5)
    model = ColQwen2ForRetrieval.from_pretrained(hf, dtype=torch.float32).eval()
    base, adapter, reference = dest / "base", dest / "adapter", dest / "merged"
    base.mkdir(parents=True)
    state = {_colpali_engine_name(k): v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(base / "model.safetensors"))
    vlm = model.config.vlm_config.to_dict()
    vlm["architectures"] = ["ColQwen2_5" if qwen2_5 else "ColQwen2"]
    (base / "config.json").write_text(json.dumps(vlm))

    class ColpaliEngineNames(nn.Module):  # the module names colpali-engine's ColQwen2_5 gives the same parts
        def __init__(self):
            super().__init__()
            self.model, self.visual = model.vlm.language_model, model.vlm.visual
            self.custom_text_proj = model.embedding_proj_layer

    config = LoraConfig(r=4, lora_alpha=8, target_modules=COLPALI_ENGINE_TARGETS, init_lora_weights=False,
                        modules_to_save=["custom_text_proj"] if modules_to_save else None,
                        exclude_modules=["custom_text_proj"] if modules_to_save else None)
    torch.manual_seed(seed + 1)
    peft_model = get_peft_model(ColpaliEngineNames(), config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(0.2)  # deltas of a trained adapter's size, not a random matrix's
            if "modules_to_save" in name:
                param.add_(torch.randn_like(param) * 0.1)  # the saved copy differs from the base's
    peft_model.save_pretrained(adapter)
    settings = json.loads((adapter / "adapter_config.json").read_text())
    settings["base_model_name_or_path"] = str(base)
    (adapter / "adapter_config.json").write_text(json.dumps(settings))
    # merged in place into the modules `model` shares; a modules_to_save copy replaces its module, so the
    # unloaded parts go back into `model` by name
    unloaded = peft_model.merge_and_unload()
    model.vlm.language_model, model.vlm.visual = unloaded.model, unloaded.visual
    model.embedding_proj_layer = unloaded.custom_text_proj
    model.save_pretrained(reference)
    from transformers import ColQwen2Processor

    image_processor = ColQwen2Processor.from_pretrained(hf).image_processor
    for directory in (base, adapter, reference):
        for name in PROCESSOR_FILES + (("processor_config.json",) if directory == reference else ()):
            if (hf / name).is_file():
                shutil.copy(hf / name, directory / name)
        if directory != reference:  # colpali-engine (transformers 4) saved the image processor on its own
            image_processor.save_pretrained(directory)
    return base, adapter, reference


def colpali_engine_queries(path: Path, queries: list[str]):
    """ColQwen2ForRetrieval's (transformers') query embeddings of colpali-engine's query texts: "Query: " +
    the text + 10 pad tokens, no "\\n" (colpali-engine's process_queries), without special tokens."""
    import torch
    from transformers import AutoTokenizer, ColQwen2ForRetrieval

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = ColQwen2ForRetrieval.from_pretrained(path, dtype=torch.float32).eval()
    out = []
    for query in queries:
        text = f"Query: {query}{tokenizer.pad_token * 10}"
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out.append(model(input_ids=ids, attention_mask=torch.ones_like(ids)).embeddings[0].numpy())
    return out
