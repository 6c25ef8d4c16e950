"""Florence-2 generation: SIE's decode loop against transformers' `generate` on the same random weights.

A Florence-2 whose BART has Florence-2-base's decoder (6 layers, d_model 768, 12 heads, ffn 3,072, its
vocabulary of 51,289, the LM head tied) and a small DaViT (128 x 96 images: 193 image tokens, plus the
prompt's, as the encoder's memory): no real weights install offline, so the tokens mean nothing, but both
sides decode the same ones (checked). Florence-2's published decoding: 3 beams stopping early, `<s>` forced
first, no trigram twice.

- transformers: `generate` over batches of `--batch` images (its docs' batched use), given the same
  encoder states; a batch runs until its longest sequence ends;
- SIE: one `DecodeLoop` over all the images, a sequence leaving the batch the step it ends.

Only generation is timed (the tower and encoder run once for both, outside the clock).

    python bench/bench_florence2_generate.py [--images 16] [--batch 4] [--max-new-tokens 32] [--beams 3]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
from common import generation_arguments, print_generation_comparison, until_stop  # noqa: E402

from florence2_fixtures import load_sie_florence2, tiny_florence2  # noqa: E402
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings  # noqa: E402

# 128 x 96 pixels: 32 x 24 patches after the stride-4 stage, 16 x 12 after the stride-2 one (193 tokens)
IMAGE = (128, 96)
VISION = dict(embed_dim=[32, 768], num_heads=[2, 12], num_groups=[2, 12], projection_dim=768)
TEXT = dict(vocab_size=51289, tie_word_embeddings=True, d_model=768, encoder_layers=2, decoder_layers=6,
            encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
            max_position_embeddings=256)


def main() -> None:
    args = generation_arguments("images", 16, 4, 32, 3)
    root = Path(tempfile.mkdtemp())
    reference, processor = tiny_florence2(root, text=TEXT, **VISION)
    model, _, _ = load_sie_florence2(root)
    torch.manual_seed(3)
    pixels = torch.randn(args.images, 3, *IMAGE)
    prompt = processor(text="<OD>", images=Image.new("RGB", (IMAGE[1], IMAGE[0]))).input_ids[0]
    prompt = [i for i in prompt if i != processor.tokenizer.image_token_id]
    eos = [2]
    with torch.no_grad():
        memory = model.encode(model.encode_images(pixels), [prompt] * args.images)
        states = torch.stack(memory)

    from transformers.modeling_outputs import BaseModelOutput

    generate = dict(max_new_tokens=args.max_new_tokens, num_beams=args.beams, eos_token_id=eos)
    t0 = time.perf_counter()
    ref_tokens: list[list[int]] = []
    with torch.no_grad():
        for start in range(0, args.images, args.batch):
            batch = states[start:start + args.batch]
            out = reference.generate(encoder_outputs=BaseModelOutput(last_hidden_state=batch),
                                     decoder_input_ids=torch.full((len(batch), 1), 2), **generate)
            for row in out[:, 1:].tolist():
                ref_tokens.append(until_stop(row, eos))
    hf_s = time.perf_counter() - t0

    generation = json.loads((root / "generation_config.json").read_text())
    settings = GenerationSettings.from_generation_config(generation, **generate)
    loop = DecodeLoop(model, torch.device("cpu"), torch.float32, max_rows=args.batch * args.beams)
    t0 = time.perf_counter()
    results = loop.run([GenerationRequest(m, [2], settings) for m in memory])
    sie_s = time.perf_counter() - t0

    setup = (f"images {args.images}, batch rows {args.batch * args.beams}, beams {args.beams}, max_new_tokens "
             f"{args.max_new_tokens}, memory {states.shape[1]} positions")
    print_generation_comparison(setup, [r.tokens for r in results], ref_tokens, hf_s, sie_s)


if __name__ == "__main__":
    main()
