"""The built-in jinaai/jina-colbert-v2 card, loaded from the card alone on a tiny random stand-in in
the checkpoint's own layout (Jina's XLM-RoBERTa with rotary positions under `roberta.`, config.json
`model_type: xlm-roberta` + `position_embedding_type: rotary`, colbert-ir's `linear.weight`, an
XLM-R-style SentencePiece tokenizer with the [QueryMarker] / [DocumentMarker] tokens), against PyLate's
procedure as Jina's README runs it (query_prefix [QueryMarker], document_prefix [DocumentMarker],
attend_to_expansion_tokens=True; PyLate's defaults otherwise: query_length 32, [MASK]-style expansion
with the tokenizer's mask token, the skiplist `convert_tokens_to_ids(string.punctuation)` on
documents), written out over transformers' JinaEmbeddingsV3Model on the same weights. pylate itself is
not installed here; its ColBERT.tokenize and the skiplist are restated in `reference` below.

Tolerances: token vectors within 1e-5, MaxSim scores within 1e-4 (float32).
"""

from __future__ import annotations

import dataclasses
import string

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from jina_checkpoints import jina_layout, tiny_config
from sie_engine import Catalog, Engine, WeightsSource

CARD = Catalog.builtin().get("jinaai/jina-colbert-v2")
DIM = 16
QUERY = "how do I install python packages?"
DOCS = ["pip installs Python packages (from PyPI), fast!", "A library for PNG images: read, write; convert.",
        "Tools for Debian packages -- dpkg, apt & more."]


def xlmr_style_tokenizer(dest):
    """Unigram pieces behind XLM-R's Metaspace (a word-start piece before every word), `<s> ... </s>`,
    `<mask>`, and Jina's two markers as added tokens; trained on dev documents."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import XLMRobertaTokenizerFast

    from dev_corpus import load_docs

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tokenizer.train_from_iterator([doc["text"] for doc in load_docs(400)], trainers.UnigramTrainer(
        vocab_size=1500, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], unk_token="<unk>"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in ("<s>", "</s>")])
    tokenizer.add_special_tokens([AddedToken("[QueryMarker]"), AddedToken("[DocumentMarker]")])
    hf = XLMRobertaTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                 cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    hf.save_pretrained(str(dest))
    return hf


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """(the checkpoint directory in Jina's layout, transformers' model, its tokenizer, the projection)."""
    from transformers import JinaEmbeddingsV3Model

    port = tmp_path_factory.mktemp("port")
    tokenizer = xlmr_style_tokenizer(port)
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=8194, pad_token_id=tokenizer.pad_token_id)
    model = JinaEmbeddingsV3Model(config, add_pooling_layer=False).eval()
    model.save_pretrained(str(port))
    root = jina_layout(port, tmp_path_factory.mktemp("jina-colbert"))
    linear = torch.randn(DIM, 32) * 0.2  # colbert-ir's projection, no bias, beside the backbone
    save_file({**load_file(str(root / "model.safetensors")), "linear.weight": linear}, str(root / "model.safetensors"))
    return root, model, tokenizer, linear


@pytest.fixture(scope="module")
def engine(stand_in):
    card = dataclasses.replace(CARD, weights=WeightsSource(path=str(stand_in[0])), dtype="float32")
    with Engine(Catalog([card]), device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def reference(stand_in):
    """encode(text, is_query) -> the token vectors PyLate keeps."""
    _, model, tokenizer, linear = stand_in
    options = CARD.options["multivector"]
    length = options["query_length"]
    skiplist = set(tokenizer.convert_tokens_to_ids(list(string.punctuation)))

    def encode(text: str, is_query: bool) -> np.ndarray:
        marker = tokenizer.convert_tokens_to_ids("[QueryMarker]" if is_query else "[DocumentMarker]")
        window = (length if is_query else CARD.max_seq_len) - 1  # one position left for the marker
        ids = tokenizer(text, truncation=True, max_length=window)["input_ids"]
        if is_query:  # padded to the window with the mask token, which every token attends to
            ids = ids + [tokenizer.mask_token_id] * (window - len(ids))
        ids = ids[:1] + [marker] + ids[1:]
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        vectors = F.normalize(hidden.last_hidden_state[0] @ linear.T, dim=-1).numpy()
        keep = np.ones(len(ids), dtype=bool) if is_query else np.asarray([i not in skiplist for i in ids])
        return vectors[keep]

    return encode


def test_the_tokenizer_tells_the_two_skiplist_lookups_apart(stand_in):
    """XLM-R's pieces: a symbol encoded alone starts with the word-start piece, so colbert-ir's lookup
    (its first id) would drop every word start; PyLate's reads the vocabulary entry."""
    tokenizer = stand_in[2]
    encoded_first = {tokenizer.encode(c, add_special_tokens=False)[0] for c in string.punctuation}
    assert encoded_first != set(tokenizer.convert_tokens_to_ids(list(string.punctuation)))


def test_queries_and_documents_equal_pylates_procedure(engine, reference):
    query = engine.encode_sync(CARD.id, [QUERY], is_query=True).items[0].multivector
    assert query.shape == (CARD.options["multivector"]["query_length"], DIM)
    np.testing.assert_allclose(query, reference(QUERY, True), atol=1e-5, rtol=0)
    for text, item in zip(DOCS, engine.encode_sync(CARD.id, DOCS).items):
        expected = reference(text, False)
        assert item.multivector.shape == expected.shape  # the punctuation pieces dropped
        np.testing.assert_allclose(item.multivector, expected, atol=1e-5, rtol=0)


def test_score_is_maxsim_over_those_vectors(engine, reference):
    q = reference(QUERY, True)
    expected = [float((q @ reference(d, False).T).max(axis=1).sum()) for d in DOCS]
    got = {s.index: s.score for s in engine.score_sync(CARD.id, QUERY, DOCS).scores}
    np.testing.assert_allclose([got[i] for i in range(len(DOCS))], expected, atol=1e-4, rtol=0)
