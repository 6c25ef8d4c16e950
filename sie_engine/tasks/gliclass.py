"""Zero-shot classification with GLiClass: the `extract` task on a card whose outputs
include `gliclass` (tasks/extract.py picks it).

Each item is one sequence holding all its labels and its text, built as gliclass'
`UniEncoderZeroShotClassificationPipeline` builds it: `<<LABEL>>a<<LABEL>>b<<SEP>>`
then the text (`prompt_first`), or the text then that prompt, tokenised whole with the
checkpoint's tokenizer (its prompt tokens included). A text too long for the window is
cut, never a label: with the labels first the end of the sequence goes, exactly as the
pipeline truncates; with the text first, the end of the text (the pipeline would cut
the labels there). The head (heads/gliclass.py) gives each label's logit; the scores are

- multi-label (the card's default, as gliclass' pipeline): sigmoid of each logit;
- single-label: softmax of the logits over the item's labels (they sum to 1).

Labels come back best first; `threshold` and `top_k` cut the list as for NLI models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import validation as v
from ..card import ModelCard
from ..errors import InvalidRequest, ModelLoadFailed
from ..models.gliclass.checkpoint import LABEL_TOKEN, SEP_TOKEN, GliclassConfig, load_gliclass_config
from ..models.gliclass.head import GLICLASS, GliclassOptions, LabelSpans
from ..types import ExtractResult
from ..weights import resolve_weights
from ..work import WorkItem
from .common import check_labels, longest_first
from .context import Call, TaskContext
from .extract import ExtractMode
from .zeroshot import Ranking, classified

OUTPUTS = frozenset({GLICLASS})

_configs: dict[tuple, GliclassConfig] = {}


def gliclass_config(card: ModelCard) -> GliclassConfig:
    """The card's GLiClass settings, read once per card (the tokenizer pool calls this)."""
    key = (card.id, card.weights)
    config = _configs.get(key)
    if config is None:
        try:
            config = _configs[key] = load_gliclass_config(resolve_weights(card))
        except ValueError as exc:
            raise ModelLoadFailed(card.id, "unsupported_architecture", str(exc)) from exc
    return config


@dataclass
class Prepared:
    ids: list[np.ndarray]
    spans: list[LabelSpans]

    @property
    def num_tokens(self) -> int:
        return sum(len(x) for x in self.ids)


def prepare(tokenizer, card: ModelCard, texts: list[str], labels: list[str]) -> Prepared:
    """On the tokenizer pool: each item's sequence and its labels' token spans."""
    config = gliclass_config(card)
    for i, label in enumerate(labels):
        if LABEL_TOKEN in label or SEP_TOKEN in label:
            raise InvalidRequest(f"labels[{i}] contains the model's prompt token {LABEL_TOKEN} or {SEP_TOKEN}",
                                 field=f"labels[{i}]")
    prompt = "".join(LABEL_TOKEN + label for label in labels) + SEP_TOKEN
    strings = [prompt + text if config.prompt_first else text + prompt for text in texts]
    encoded = tokenizer.encode(strings)  # truncated to the window as the pipeline truncates
    ids = list(encoded.ids)
    if not config.prompt_first and any(encoded.truncated):
        whole = tokenizer.encode_whole([s for s, cut in zip(strings, encoded.truncated) if cut])
        rows = iter(whole)
        ids = [_cut_text(next(rows), tokenizer, config, len(labels)) if cut else seq
               for seq, cut in zip(ids, encoded.truncated)]
    spans = [label_spans(seq, tokenizer, config, len(labels)) for seq in ids]
    return Prepared(ids, spans)


def _prompt_too_long(tokenizer, count: int) -> InvalidRequest:
    return InvalidRequest(f"the {count} labels leave no room for the text in the model's {tokenizer.max_length}-token "
                          "window (all labels share one sequence with it): send fewer or shorter labels",
                          field="labels")


def _cut_text(seq: np.ndarray, tokenizer, config: GliclassConfig, count: int) -> np.ndarray:
    """Text first: drop the end of the text (not the labels after it) to fit the window."""
    first_label = int(np.flatnonzero(seq == config.class_token_index)[-count])
    lead = 0
    while lead < len(seq) and int(seq[lead]) in tokenizer.special_ids:
        lead += 1
    keep = first_label - (len(seq) - tokenizer.max_length)
    if keep <= lead:
        raise _prompt_too_long(tokenizer, count)
    return np.concatenate([seq[:keep], seq[first_label:]])


def label_spans(seq: np.ndarray, tokenizer, config: GliclassConfig, count: int) -> LabelSpans:
    """Each label's token span: its <<LABEL>> token (or the one after it), or with `class_token_pooling:
    average` everything from it to the next label's, the last one's to the end (as gliclass)."""
    marks = np.flatnonzero(seq == config.class_token_index)
    if len(marks) < count:  # labels first and cut by the window
        raise _prompt_too_long(tokenizer, count)
    marks = marks[:count] if config.prompt_first else marks[-count:]
    if config.prompt_first:  # the text must keep at least one token after <<SEP>>
        sep = tokenizer.token_id(SEP_TOKEN)
        after = np.flatnonzero(seq[marks[-1]:] == sep)
        trail = 0
        while trail < len(seq) and int(seq[len(seq) - 1 - trail]) in tokenizer.special_ids:
            trail += 1
        if not len(after) or marks[-1] + after[0] + 1 >= len(seq) - trail:
            raise _prompt_too_long(tokenizer, count)
    skip = 0 if config.embed_class_token else 1
    if config.class_token_pooling == "average":
        ends: np.ndarray = np.append(marks[1:], len(seq))
        return LabelSpans(marks + skip, ends)
    return LabelSpans(marks + skip, marks + skip + 1)


def scores(logits: np.ndarray, multi_label: bool) -> np.ndarray:
    """`[N, M]` logits -> scores as gliclass' pipeline: sigmoid (multi-label) or softmax over the labels."""
    logits = logits.astype(np.float64)
    if multi_label:
        return 1.0 / (1.0 + np.exp(-logits))
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts = v.parse_items(fields["items"], engine.limits)
    labels = check_labels(fields["labels"], engine.limits)
    try:
        options = GliclassOptions.of(card)
    except ValueError as exc:  # as the model's load reports it (the head's builder checks the same)
        raise ModelLoadFailed(card.id, "invalid_weights", str(exc)) from None
    if len(labels) > options.max_labels:
        raise InvalidRequest(f"labels holds {len(labels)} labels; model {card.id!r} takes at most {options.max_labels} "
                             "(all share one sequence with the text): for more, retrieve the likeliest candidates "
                             "first (examples/taxonomy.py)", field="labels")
    ranking = Ranking.of(fields, default_multi_label=options.multi_label)
    prepared, tokenize_s = await engine.with_tokenizer(card, prepare, card, texts, labels)
    request = engine.new_request(call, "extract", len(texts))
    work: list[WorkItem[LabelSpans]] = [
        WorkItem(request, i, prepared.ids[i], outputs=OUTPUTS, extra=prepared.spans[i])
        for i in longest_first(prepared.ids)]
    results = await engine.run_items(card, "extract", work, request)
    logits = np.asarray([r[GLICLASS] for r in results], dtype=np.float32).reshape(len(texts), len(labels))
    items = [classified(item_id, labels, row, ranking)
             for item_id, row in zip(ids, scores(logits, ranking.multi_label))]
    return ExtractResult(card.id, items, prepared.num_tokens, engine.timings(request, call.started, tokenize_s))


MODE = ExtractMode(
    kind="a GLiClass classifier", family="GLiClass classifier", labels="candidate classes",
    fields=frozenset({"threshold", "multi_label", "top_k"}), answers=frozenset({"classifications"}), run=run,
    example="knowledgator/gliclass-base-v1.0",
)
