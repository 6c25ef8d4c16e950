"""Cross-encoder heads: sequence classification over a packed (query, document)
pair, giving one relevance score per pair (the `score` task).

Each family declares its checkpoints' layout (`Backbone.sequence_classifier`); two layouts
several families share are built here, as transformers names them:

- `pooler_classifier`, BertForSequenceClassification's: pooler (dense + tanh on [CLS]) then
  `classifier` (models/bert, models/nomic_bert).
- `dense_out_proj_classifier`, RobertaForSequenceClassification's (XLM-R, RoBERTa; bge-reranker):
  `classifier.dense` + tanh on [CLS], then `classifier.out_proj` (models/bert, models/mpnet).

Others are the family's own (models/deberta_v2's ContextPooler, models/modernbert's head).

LLM rerankers of the Qwen3-Reranker kind (`options.score.kind: yes-no`) run a causal LM
on a prompt that asks whether the document answers the query; the score is the
probability of "yes" against "no" at the last token, `softmax([logit_no, logit_yes])[1]`.
Only the two vocabulary rows of the LM head (`lm_head.weight`, or the tied input
embeddings) are kept. The prompt (prefix, template with {instruction} {query} {document},
suffix, default instruction) comes from the card; `tasks/score.py` builds it.

The activation on the logits follows sentence-transformers' `CrossEncoder`: the
one config.json names (`sentence_transformers.activation_fn`, or the older
`sbert_ce_default_activation_function`), else sigmoid for one label and identity
for more. A card may override it with `options.score.activation`
(sigmoid | identity | softmax) and pick the label scored with `options.score.label`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..batch import PackedBatch
from .base import Head
from .common import linear, optional, tensor
from .context import HeadContext
from .pooling import cls_pool, mean_pool

ACTIVATIONS = ("sigmoid", "identity", "softmax")
# sentence-transformers stores the activation as an import path.
_ST_ACTIVATIONS = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.Sigmoid": "sigmoid",
    "torch.nn.Identity": "identity",
}


def default_activation(config: Mapping[str, Any], labels: int) -> str:
    """sentence-transformers' CrossEncoder.get_default_activation_fn, as a name. `labels`: the
    classifier's output size (the checkpoint's truth; transformers 5 omits a default id2label)."""
    path = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function"
    )
    if path is not None:
        if path not in _ST_ACTIVATIONS:
            raise ValueError(f"config.json names activation {path!r}; supported: {sorted(_ST_ACTIVATIONS)}")
        return _ST_ACTIVATIONS[path]
    return "sigmoid" if labels == 1 else "identity"


class SequenceClassifier(nn.Module):
    """hidden `[T, H]` of packed pairs -> logits `[B, num_labels]` (float32).

    `pool`: "cls" or "mean"; `pre`: the layers between pooled state and classifier
    (pooler dense + tanh, or dense + act + norm); `classifier`: `[num_labels, H]`.
    """

    def __init__(self, pool: str, pre: nn.Module, classifier: nn.Linear):
        super().__init__()
        self.pool = pool
        self.pre = pre
        self.classifier = classifier

    def forward(self, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """Logits `[B, num_labels]` float32."""
        if self.pool == "mean":
            pooled = mean_pool(hidden, batch.cu_seqlens, batch.seq_index()).to(hidden.dtype)
        else:
            pooled = cls_pool(hidden, batch.cu_seqlens)
        return self.classifier(self.pre(pooled)).float()


class DenseAct(nn.Module):
    """`[B, H]` -> `[B, H]`: dense, activation, optional norm (the layers before a classifier)."""
    def __init__(self, dense: nn.Linear, act, norm: nn.Module | None = None):
        super().__init__()
        self.dense = dense
        self.act = act
        self.norm = norm if norm is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(x)))


def pooler_classifier(ctx: HeadContext) -> SequenceClassifier:
    """BertForSequenceClassification's layout (NomicBERT's too): the backbone's pooler (`pooler.dense`
    + tanh on [CLS], under the backbone's prefix), then `classifier`."""
    device, dtype, tensors, pooler = ctx.device, ctx.dtype, ctx.checkpoint, f"{ctx.prefix}pooler.dense"
    pre = DenseAct(linear(tensor(tensors, f"{pooler}.weight"), tensor(tensors, f"{pooler}.bias"), device, dtype),
                   torch.tanh)
    classifier = linear(tensor(tensors, "classifier.weight"), optional(tensors, "classifier.bias"), device, dtype)
    return SequenceClassifier("cls", pre, classifier)


def dense_out_proj_classifier(ctx: HeadContext) -> SequenceClassifier:
    """RobertaForSequenceClassification's layout (XLM-R's, MPNet's; bge-reranker): `classifier.dense`
    + tanh on [CLS], then `classifier.out_proj`."""
    device, dtype, tensors = ctx.device, ctx.dtype, ctx.checkpoint
    pre = DenseAct(linear(tensor(tensors, "classifier.dense.weight"), tensor(tensors, "classifier.dense.bias"),
                          device, dtype), torch.tanh)
    classifier = linear(tensor(tensors, "classifier.out_proj.weight"), tensor(tensors, "classifier.out_proj.bias"),
                        device, dtype)
    return SequenceClassifier("cls", pre, classifier)


def build_classifier(ctx: HeadContext) -> SequenceClassifier:
    """The classification head of a `*ForSequenceClassification` checkpoint, in the layout its
    family declares (`Backbone.sequence_classifier`)."""
    architectures = ctx.hf_config.get("architectures") or []
    arch = next((a for a in architectures if a.endswith("ForSequenceClassification")), None)
    if arch is None:
        raise ValueError(
            f"card {ctx.card.id}: its outputs ({', '.join(ctx.card.outputs)}) need a *ForSequenceClassification "
            f"checkpoint; config.json names {architectures}"
        )
    head = ctx.backbone.sequence_classifier(ctx)
    if head is None:
        raise ValueError(f"card {ctx.card.id}: {arch}'s classification head is not implemented "
                         f"({type(ctx.backbone).__name__} declares no sequence classifier)")
    return head.eval()


def to_scores(logits: torch.Tensor, activation: str, label: int) -> torch.Tensor:
    """`[B, num_labels]` float32 logits -> `[B]` scores."""
    if activation == "softmax":
        return torch.softmax(logits, dim=-1)[:, label]
    if activation == "sigmoid":
        return torch.sigmoid(logits[:, label])
    return logits[:, label]


class YesNoHead(Head):
    """hidden `[T, H]` -> a score `[B]` from the last token of each sequence: P(yes) against no
    (Qwen3-Reranker's), or with `difference` the logit of yes minus the logit of no (mxbai-rerank
    v2's raw score, whose sigmoid is that probability).

    `rows`: `[2, H]` LM-head rows of the "no" and "yes" tokens (in that order)."""

    def __init__(self, rows: torch.Tensor, difference: bool = False):
        super().__init__()
        self.rows = nn.Parameter(rows, requires_grad=False)
        self.difference = difference

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[float]:
        last = hidden.index_select(0, batch.cu_seqlens[1:].long() - 1)  # [B, H]
        logits = (last @ self.rows.T).float()  # [B, 2]: no, yes
        if self.difference:
            return (logits[:, 1] - logits[:, 0]).cpu().tolist()
        return torch.softmax(logits, dim=-1)[:, 1].cpu().tolist()


YES_NO_DEFAULTS = {
    # Qwen3-Reranker's prompt, from its model card
    "prefix": "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
              "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n",
    "suffix": "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "template": "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
    "instruction": "Given a web search query, retrieve relevant passages that answer the query",
    "yes_token": "yes",
    "no_token": "no",
}


# What a yes/no card's `activation` may say: the probability of yes against no, or the raw logit difference.
YES_NO_ACTIVATIONS = ("softmax", "identity")


def yes_no_options(card) -> dict:
    """The card's yes/no prompt settings over Qwen3-Reranker's defaults. `prefix`, `suffix` and
    `template` are each a string or a list of parts tokenised on their own (mxbai-rerank v2's
    layout); `instruction_format` wraps a non-empty instruction before it fills `{instruction}`;
    `query_share` caps the template's first part (the query) at that share of the window."""
    options = dict(YES_NO_DEFAULTS)
    options.update((card.options or {}).get("score") or {})
    return options


class ScoreHead(Head):
    """A cross-encoder's `score` head: the classifier's logits through the activation, at one label."""

    def __init__(self, classifier: SequenceClassifier, activation: str, label: int):
        super().__init__()
        self.classifier = classifier
        self.activation = activation
        self.label = label

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[float]:
        return to_scores(self.classifier(hidden, batch), self.activation, self.label).cpu().tolist()


def build_yes_no_head(ctx: HeadContext) -> YesNoHead:
    options = yes_no_options(ctx.card)
    token_ids = [ctx.tokenizer.token_id(options["no_token"]), ctx.tokenizer.token_id(options["yes_token"])]
    weight = optional(ctx.checkpoint, "lm_head.weight")
    if weight is None:  # tied to the input embeddings
        table = ctx.backbone.input_embeddings()
        if table is None:
            raise ValueError(f"card {ctx.card.id}: options.score.kind yes-no needs `lm_head.weight` or input "
                             f"embeddings to tie it to, which {type(ctx.backbone).__name__} does not expose")
        weight = table.weight
    for key in ("prefix", "suffix", "template"):  # a string, or its parts
        value = options[key]
        if not isinstance(value, str) and not (isinstance(value, list) and all(isinstance(p, str) for p in value)):
            raise ValueError(f"card {ctx.card.id}: options.score.{key} must be a string or a list of strings")
    share = options.get("query_share")
    if share is not None and not (isinstance(share, (int, float)) and 0 < share <= 1):
        raise ValueError(f"card {ctx.card.id}: options.score.query_share {share!r} must be in (0, 1]")
    activation = options.get("activation", "softmax")
    if activation not in YES_NO_ACTIVATIONS:
        raise ValueError(f"card {ctx.card.id}: options.score.activation {activation!r} is not one of "
                         f"{YES_NO_ACTIVATIONS} for kind yes-no")
    rows = weight.detach()[token_ids].to(device=ctx.device, dtype=ctx.dtype)
    return YesNoHead(rows, difference=activation == "identity").eval()


def build_score_head(ctx: HeadContext) -> dict[str, nn.Module]:
    options = ctx.options("score")
    if options.get("kind") == "yes-no":
        return {"score": build_yes_no_head(ctx)}
    head = build_classifier(ctx)
    labels = head.classifier.out_features
    activation = options.get("activation") or default_activation(ctx.hf_config, labels)
    if activation not in ACTIVATIONS:
        raise ValueError(f"card {ctx.card.id}: options.score.activation {activation!r} not one of {ACTIVATIONS}")
    label = int(options.get("label", 0 if labels == 1 else labels - 1))
    if not 0 <= label < labels:
        raise ValueError(f"card {ctx.card.id}: options.score.label {label} out of range for {labels} labels")
    return {"score": ScoreHead(head, activation, label).eval()}
