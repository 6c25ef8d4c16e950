"""Donut generation: SIE's decode loop against transformers' `generate` on the same random weights.

A Donut with a decoder of Donut-base's depth at half its width (4 MBart layers, d_model 512, vocab
8,000) and a small Swin encoder (128 x 96 pages, 192 memory positions projected to 512): no real
weights install offline, so the tokens mean nothing, but both sides decode the same ones (checked).
Requests end at different lengths (two stop tokens), as real pages do.

- transformers: `generate` over batches of `--batch` pages (its docs' batched use), greedy or beam;
  a batch runs until its longest sequence ends;
- SIE: one `DecodeLoop` over all the pages, a sequence leaving the batch the step it ends.

Only generation is timed (the encoder runs once for both, outside the clock).

    python bench/bench_donut_generate.py [--pages 32] [--batch 8] [--max-new-tokens 48] [--beams 1]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
from common import generation_arguments, print_generation_comparison, until_stop  # noqa: E402

from donut_fixtures import load_sie_donut, tiny_donut  # noqa: E402
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings  # noqa: E402

ENCODER = dict(image_size=[128, 96], patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4)
DECODER = dict(vocab_size=8000, d_model=512, decoder_layers=4, decoder_attention_heads=8, decoder_ffn_dim=2048,
               max_position_embeddings=256)


def main() -> None:
    args = generation_arguments("pages", 32, 8, 48, 1)
    root = Path(tempfile.mkdtemp())
    reference = tiny_donut(root, decoder=DECODER, **ENCODER)
    model, _, _ = load_sie_donut(root)
    torch.manual_seed(3)
    pixels = torch.randn(args.pages, 3, 128, 96)
    prompt = [0, 5]
    eos = [2, 7]
    with torch.no_grad():
        memory = model.encode_images(pixels)
        encoder_states = reference.encoder(pixel_values=pixels).last_hidden_state

    from transformers.modeling_outputs import BaseModelOutput

    t0 = time.perf_counter()
    ref_tokens: list[list[int]] = []
    with torch.no_grad():
        for start in range(0, args.pages, args.batch):
            states = encoder_states[start:start + args.batch]
            out = reference.generate(encoder_outputs=BaseModelOutput(last_hidden_state=states),
                                     decoder_input_ids=torch.tensor([prompt] * len(states)),
                                     max_new_tokens=args.max_new_tokens, num_beams=args.beams, eos_token_id=eos,
                                     early_stopping=args.beams > 1)
            for row in out[:, len(prompt):].tolist():
                ref_tokens.append(until_stop(row, eos))
    hf_s = time.perf_counter() - t0

    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, num_beams=args.beams,
                                  early_stopping=args.beams > 1, eos_token_ids=tuple(eos), pad_token_id=1,
                                  forced_eos_token_id=(2,))
    loop = DecodeLoop(model, torch.device("cpu"), torch.float32, max_rows=args.batch * args.beams)
    t0 = time.perf_counter()
    results = loop.run([GenerationRequest(memory[i], prompt, settings) for i in range(args.pages)])
    sie_s = time.perf_counter() - t0

    setup = (f"pages {args.pages}, batch rows {args.batch * args.beams}, beams {args.beams}, max_new_tokens "
             f"{args.max_new_tokens}")
    print_generation_comparison(setup, [r.tokens for r in results], ref_tokens, hf_s, sie_s)


if __name__ == "__main__":
    main()
