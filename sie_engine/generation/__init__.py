"""Autoregressive generation: encoder-decoder models (Donut, Florence-2) and decoder-only
vision-language ones (LightOnOCR), one loop, search and cache for both (loop.py's protocols).

- `settings.py`: what one request asks of the decoder (max_new_tokens, beams, stop tokens), read
  from a checkpoint's generation_config.json the way transformers reads it;
- `processors.py`: the logits processors those settings switch on, equal to transformers';
- `search.py`: greedy and beam search per request, transformers' `_sample` / `_beam_search` math;
- `cache.py`: the running batch's KV cache (self-attention grows a position per step,
  cross-attention keys/values computed once per sequence);
- `loop.py`: continuous batching at step granularity: requests join the running batch at the next
  step and leave it the step they finish.
"""

from .loop import DecodeLoop, DecoderOnlyLM, EncoderDecoderLM, GenerationRequest, GenerationResult
from .settings import GenerationSettings

__all__ = ["DecodeLoop", "DecoderOnlyLM", "EncoderDecoderLM", "GenerationRequest", "GenerationResult",
           "GenerationSettings"]
