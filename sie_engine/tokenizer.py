"""Tokenisation with the model's fast tokenizer.

Runs on a thread pool, never on an event loop (the Rust tokenizer releases the
GIL in `encode_batch`; a lone short text keeps it, `_encodings` says why). Truncation
follows the card's max length; no padding, since batches are packed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .checkpoints import CheckpointLayout, describe
from .errors import UnsupportedTask
from .images import ImagePreprocessor, load_image_processor

# transformers imports its classes lazily, on first attribute access, and that is not thread
# safe: two first loads at once (two models, or two precisions of one) failed 10 times in 12
# with "cannot import name 'AutoTokenizer' from 'transformers'" (issue #19). Every use of
# transformers' loading machinery holds this lock; loads are rare and short, so it costs nothing.
_TRANSFORMERS_LOCK = threading.Lock()

# A lone input of at most this many characters is tokenised with `encode`, which keeps the GIL
# (about 75 us for 256 characters of English with MiniLM's tokenizer on the 2-core box), not
# `encode_batch`, which lets go of it around the work: taking the GIL back from a busy event
# loop costs the tokenising thread a wait of about one loop turn. A one-text query is the
# common request; under 32 one-text clients (issue 27, 2026-12-04) this was 10-15% more
# requests/s and 15% less server CPU per request. Several texts keep `encode_batch`: holding
# the GIL across 16 of them cost the loop more than one wait (589 against 749 requests/s).
HELD_GIL_CHARS = 256


def _encodings(tokenizer, inputs: list, fast: bool, add_special_tokens: bool = True) -> list:
    """The Rust tokenizer's encodings of `inputs` (texts, or (first, second) pairs); `fast`:
    without character offsets where the batch call can skip them."""
    if len(inputs) == 1:
        parts = inputs[0] if isinstance(inputs[0], tuple) else (inputs[0],)
        if sum(map(len, parts)) <= HELD_GIL_CHARS:
            return [tokenizer.encode(*parts, add_special_tokens=add_special_tokens)]
    # encode_batch_fast skips character offsets: about 15% faster when they are not needed (tokenizers
    # >= 0.21 has it; the lookup is of the library's API, not of a SIE capability)
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch) if fast else tokenizer.encode_batch
    return encode(inputs, add_special_tokens=add_special_tokens)


@dataclass
class Tokenized:
    ids: list[np.ndarray]  # int32 token ids per text
    type_ids: list[np.ndarray] | None  # segment ids (pairs only)
    truncated: list[bool]  # True where the text was longer than the window
    offsets: list[list[tuple[int, int]]] | None = None  # character offsets, when asked for
    key_lens: list[int] | None = None  # attention keys per text when limited (query expansion)

    @property
    def num_tokens(self) -> int:
        return sum(len(x) for x in self.ids)


@dataclass
class Concatenated:
    """Several texts as one sequence (late chunking): its ids and each text's `(start, end)` in them."""
    ids: np.ndarray  # int32, special tokens included
    spans: list[tuple[int, int]]
    window: int  # the most tokens the model reads in one sequence (what encode would cut a text to)


def _leading(ids: list[int], body: list[int]) -> int:
    """How many special tokens the post-processor put before `body` in `ids`."""
    for lead in range(len(ids) - len(body) + 1):
        if ids[lead:lead + len(body)] == body:
            return lead
    raise ValueError("the tokenizer's post-processor changed the texts' ids; late chunking cannot place them")


class VocabularyLookup:
    """Vocabulary questions answered by a Rust tokenizer held as `self._tok` (every tokenizer
    SIE uses, whatever its input preparation)."""

    _tok: Any  # tokenizers.Tokenizer
    # The image role of the model's input preparation (ImageTextInputs sets it); None: text items only.
    images: ImagePreprocessor | None = None
    # Ids of the special tokens (TextTokenizer's are its Hugging Face tokenizer's): heads that score the
    # vocabulary (SPLADE) leave them out.
    special_ids: frozenset[int] = frozenset()
    unk_token_id: int | None = None
    # Video items: a family that reads them samples a video's frames into image grids
    # (ImageTextInputs.encode_video)
    reads_video: ClassVar[bool] = False

    def rust_tokenizer(self) -> Any:
        """The Rust tokenizer (`tokenizers.Tokenizer`) that a compat API's tokenize and decode routes
        use; UnsupportedTask for a model without one (it reads images only, or its tokenizer is
        sentencepiece's, as SigLIP's)."""
        if getattr(self, "_tok", None) is None:
            raise UnsupportedTask("this model has no fast (Rust) tokenizer to tokenize or decode with: it reads "
                                  "images only, or tokenises with sentencepiece", field="model")
        return self._tok

    def vocabulary_id(self, token: str) -> int | None:
        """`token`'s id as one vocabulary entry, else the unknown token's, as transformers'
        `convert_tokens_to_ids` answers (None where the vocabulary has neither)."""
        found = self._tok.token_to_id(token)
        return self.unk_token_id if found is None else found

    def plain_ids(self, text: str) -> np.ndarray:
        """A text's ids without special tokens (e.g. to find a symbol's vocabulary entry)."""
        return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def tokens_of(self, ids_per_item: Sequence[np.ndarray]) -> list[list[str]]:
        """The vocabulary token of each id (a sparse vector's labels)."""
        return [[self._tok.id_to_token(int(i)) or f"[{int(i)}]" for i in ids] for ids in ids_per_item]

    def token_id(self, token: str) -> int:
        """The id of one vocabulary token (a marker such as `[unused0]`); raises if the vocabulary lacks it."""
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"token {token!r} is not in the tokenizer's vocabulary")
        return token_id


class TextTokenizer(VocabularyLookup):
    _whole: Any = None  # the untruncated copy of the Rust tokenizer, made on first use (_untruncated)

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        """The tokenizer of a checkpoint (its layout, or its directory). `trust_remote_code`: let a
        checkpoint's own tokenizer code run; only a card that opts in sets it (SIE's forward passes
        never run checkpoint code)."""
        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        root = layout.root
        with _TRANSFORMERS_LOCK:  # AutoTokenizer also imports the tokenizer's own class lazily
            from transformers import AutoTokenizer

            hf = AutoTokenizer.from_pretrained(str(layout.tokenizer_source), use_fast=True,
                                               trust_remote_code=trust_remote_code)
        if layout.bos_eos:  # as GLiNER loads its tokenizer: bos/eos on where the tokenizer has them
            for flag, token_id in (("add_bos_token", hf.bos_token_id), ("add_eos_token", hf.eos_token_id)):
                # transformers' own tokenizer classes differ in whether they have the flag (third-party API)
                if hasattr(hf, flag) and token_id is not None:
                    setattr(hf, flag, True)
        if layout.extra_tokens:
            hf.add_tokens(list(layout.extra_tokens), special_tokens=True)
        if not hf.is_fast:
            raise ValueError(f"{root}: SIE needs a fast (Rust) tokenizer")
        if layout.lowercase:
            _lowercase_first(hf.backend_tokenizer)
        self.hf = hf
        self.max_length = max_length
        self._tok = hf.backend_tokenizer
        self._tok.no_padding()
        self._tok.enable_truncation(max_length)
        self.pad_token_id = hf.pad_token_id
        self.cls_token_id = hf.cls_token_id
        self.sep_token_id = hf.sep_token_id
        self.special_ids = frozenset(hf.all_special_ids)
        self.unk_token_id = hf.unk_token_id
        # BERT-style models take segment ids for sentence pairs; RoBERTa-style ones do not
        # (their tokenizers leave token_type_ids out of model_input_names).
        self.uses_type_ids = "token_type_ids" in (hf.model_input_names or ())

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = True,
               with_offsets: bool = False) -> Tokenized:
        encodings = _encodings(self._tok, list(texts), fast=not with_offsets, add_special_tokens=add_special_tokens)
        return Tokenized(
            ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings],
            type_ids=None,
            truncated=[bool(e.overflowing) for e in encodings],
            offsets=[e.offsets for e in encodings] if with_offsets else None,
        )

    def encode_pairs(self, firsts: Sequence[str], seconds: Sequence[str]) -> Tokenized:
        """Sentence pairs (query, document); truncation takes from the longer side first."""
        encodings = _encodings(self._tok, list(zip(firsts, seconds)), fast=False)
        return Tokenized(
            ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings],
            type_ids=[np.asarray(e.type_ids, dtype=np.int32) for e in encodings] if self.uses_type_ids else None,
            truncated=[bool(e.overflowing) for e in encodings],
        )

    def encode_marked(self, texts: Sequence[str], *, marker: str | None = None, length: int | None = None,
                      expand: bool = False, attend_to_expansion: bool = False) -> Tokenized:
        """ColBERT-style input: `marker`'s id inserted after the first token ([CLS]); each text cut
        to `length` tokens (default: the window) keeping its final special token; with `expand`,
        padded to `length` with the mask token (query augmentation). The expansion tokens are
        queries but not keys of attention unless `attend_to_expansion` (colbert-ir's
        `attend_to_mask_tokens`, PyLate's `attend_to_expansion_tokens`, both off by default)."""
        base = self.encode(texts)
        length = min(length or self.max_length, self.max_length)
        marker_id = self.token_id(marker) if marker is not None else None
        mask_id = self.hf.mask_token_id
        if expand and mask_id is None:
            raise ValueError("query expansion needs a tokenizer with a mask token")
        ids, truncated, key_lens = [], [], []
        for seq, was_truncated in zip(base.ids, base.truncated):
            if marker_id is not None:
                seq = np.concatenate([seq[:1], np.asarray([marker_id], dtype=np.int32), seq[1:]])
            if len(seq) > length:
                seq = np.concatenate([seq[: length - 1], seq[-1:]])  # keep [SEP]
                was_truncated = True
            key_lens.append(len(seq))
            if expand and len(seq) < length:
                seq = np.concatenate([seq, np.full(length - len(seq), mask_id, dtype=np.int32)])
            ids.append(seq)
            truncated.append(was_truncated)
        limit = expand and not attend_to_expansion
        return Tokenized(ids=ids, type_ids=None, truncated=truncated, key_lens=key_lens if limit else None)

    def encode_wrapped(self, texts: Sequence[str], *, prefix: str, suffix: str) -> Tokenized:
        """`prefix + text + suffix` as ids, each part tokenised on its own without special tokens
        (how Qwen3-Reranker builds its prompt); a long text is cut from the right so the whole
        fits the window and the suffix (the question to the model) is never lost."""
        whole = self._untruncated()  # the prompt's own parts are never cut
        head = np.asarray(whole.encode(prefix, add_special_tokens=False).ids, dtype=np.int32)
        tail = np.asarray(whole.encode(suffix, add_special_tokens=False).ids, dtype=np.int32)
        budget = self.max_length - len(head) - len(tail)
        if budget <= 0:
            raise ValueError(f"the prompt's prefix and suffix take {len(head) + len(tail)} tokens, the whole window")
        ids, truncated = [], []
        for encoding in self._tok.encode_batch(list(texts), add_special_tokens=False):
            body = np.asarray(encoding.ids[:budget], dtype=np.int32)
            ids.append(np.concatenate([head, body, tail]))
            truncated.append(bool(encoding.overflowing) or len(encoding.ids) > budget)
        return Tokenized(ids=ids, type_ids=None, truncated=truncated)

    def encode_wrapped_parts(self, items: Sequence[Sequence[str]], *, prefix: Sequence[str], suffix: Sequence[str],
                             first_share: float | None = None) -> Tokenized:
        """`prefix + item + suffix` as ids where every part is tokenised on its own, without special
        tokens, and the ids concatenated: how mxbai-rerank v2 builds its prompt (a byte-level BPE
        merges across a joint string, e.g. "?\n", so joining the parts first would change the ids).
        The item's first part is cut to `first_share` of the budget (the query's share), then the
        item from the right (the document) so the whole fits the window; the prefix and suffix are
        never cut."""
        whole = self._untruncated()

        def ids_of(parts: Sequence[str]) -> list[int]:
            return [i for part in parts for i in whole.encode(part, add_special_tokens=False).ids]

        head, tail = ids_of(prefix), ids_of(suffix)
        budget = self.max_length - len(head) - len(tail)
        if budget <= 0:
            raise ValueError(f"the prompt's prefix and suffix take {len(head) + len(tail)} tokens, the whole window")
        ids, truncated = [], []
        for parts in items:
            first, rest = ids_of(parts[:1]), ids_of(parts[1:])
            cut = False
            if first_share is not None and len(first) > int(budget * first_share):
                first, cut = first[:int(budget * first_share)], True
            body = first + rest
            ids.append(np.asarray(head + body[:budget] + tail, dtype=np.int32))
            truncated.append(cut or len(body) > budget)
        return Tokenized(ids=ids, type_ids=None, truncated=truncated)

    def encode_concatenated(self, texts: Sequence[str], *, prefix: str = "", suffix: str = "") -> Concatenated:
        """`prefix`, the texts and `suffix` as one sequence between the model's special tokens, each
        part tokenised on its own without special tokens (a text's ids are what it has alone), and
        where each text's ids lie (late chunking). Never cut: the caller checks the window."""
        from tokenizers import Encoding

        whole = self._untruncated()
        parts = [prefix, *texts, suffix]
        encodings = whole.encode_batch(parts, add_special_tokens=False)
        body = Encoding.merge(encodings, growing_offsets=True)
        ids = whole.post_process(body).ids
        lead = _leading(ids, body.ids)
        spans, start = [], lead + len(encodings[0].ids)
        for encoding in encodings[1:-1]:
            spans.append((start, start + len(encoding.ids)))
            start += len(encoding.ids)
        return Concatenated(np.asarray(ids, dtype=np.int32), spans, self.max_length)

    def prompt_length(self, prompt: str) -> int:
        """The tokens a prompt takes at the start of a text, as sentence-transformers measures it for
        `include_prompt: false` (and GritLM for its instruction): the prompt tokenised alone, with
        special tokens, less a trailing special token (an EOS or SEP the tokenizer appends)."""
        ids = self._untruncated().encode(prompt).ids
        return len(ids) - 1 if ids and ids[-1] in self.special_ids else len(ids)

    def encode_whole(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Ids with special tokens and no truncation (a task that decides itself what to cut)."""
        return [np.asarray(e.ids, dtype=np.int32) for e in self._untruncated().encode_batch(list(texts))]

    def _untruncated(self):
        """A copy of the Rust tokenizer without truncation (made once; the shared one keeps
        its window, and changing its settings per call would race between threads)."""
        if self._whole is None:
            from tokenizers import Tokenizer

            whole = Tokenizer.from_str(self._tok.to_str())
            whole.no_truncation()
            whole.no_padding()
            self._whole = whole
        return self._whole


class ImageTextInputs(TextTokenizer):
    """Input preparation of an image-text model: the checkpoint's tokenizer for texts (this class,
    as TextTokenizer) and, as `images`, its image processor for images (`image_role`, built from
    the family's typed config: `image_size`, `num_patches`, plus `class_tokens`)."""

    class_tokens = 1  # CLIP's; SigLIP's subclass has none
    image_role: ClassVar[type[ImagePreprocessor]] = ImagePreprocessor
    images: ImagePreprocessor

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        self.load_text(layout, max_length, trust_remote_code)
        self.images = self.image_preprocessor(load_image_processor(layout.root), self.read_config(layout.config))

    def image_preprocessor(self, processor: Any, config: Any) -> ImagePreprocessor:
        """The image role over the checkpoint's processor: a fixed-size tower's patches plus class
        tokens (a family whose processor decides each image's size counts from the processor)."""
        return self.image_role(processor, config.image_size, config.num_patches + self.class_tokens)

    def load_text(self, layout: CheckpointLayout, max_length: int, trust_remote_code: bool) -> None:
        """The text side (TextTokenizer's; a family whose checkpoints ship a slow tokenizer overrides it)."""
        TextTokenizer.__init__(self, layout, max_length, trust_remote_code=trust_remote_code)

    @staticmethod
    def read_config(config: Any) -> Any:
        """The family's typed config (with `image_size` and `num_patches`)."""
        raise NotImplementedError

    # Image items run inside a prompt of their own (`image_prompts`), which may hold the item's text
    # beside its image (Qwen3-VL-Embedding's chat); False: an image item is its pixels alone.
    image_prompted: ClassVar[bool] = False
    # where `image_prompted`: an image as the model's prompts write it (Qwen3-VL's vision tokens)
    image_content: ClassVar[str] = ""

    def image_prompts(self, texts: Sequence[str | None], wrap: Callable[[list[str]], list[str]],
                      pixels: Sequence[np.ndarray], fields: Sequence[str],
                      contents: Sequence[str | None] | None = None) -> tuple[list[np.ndarray], list[int]]:
        """Each image item's prompt ids (its text, or None, where the family puts it beside the image,
        through the card's template: `wrap`) and the positions it runs (only where `image_prompted`);
        `contents`: an item's own content in place of `image_content` (a video's, None for an image)."""
        raise NotImplementedError(f"{type(self).__name__} gives image items no prompt of their own")

    def encode_video(self, value: Any, field: str, limits: Any) -> tuple[tuple[np.ndarray, ...], str]:
        """A video item -> (its frames' grids, in order, and its content in the item's prompt)."""
        raise NotImplementedError(f"{type(self).__name__} reads no video")


def _lowercase_first(tokenizer: Any) -> None:
    """Lowercase before the tokenizer's own normalisation, as sentence-transformers applies
    `do_lower_case`: a normaliser, so offsets still point into the original text, and added tokens
    stored unnormalised (PyLate's "[Q] ") still match. Lowercasing twice changes nothing, so a
    tokenizer that lowercases already is left as it would tokenise."""
    from tokenizers.normalizers import Lowercase
    from tokenizers.normalizers import Sequence as NormalizerSequence

    own = tokenizer.normalizer
    tokenizer.normalizer = NormalizerSequence([Lowercase()] + ([own] if own is not None else []))
