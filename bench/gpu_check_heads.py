"""GPU check of the score / sparse / multivector heads against transformers, on CUDA.

Small random models are saved in the Hugging Face layout and loaded through SIE
(`build_runner`, as the engine does) in float32, float16 and bfloat16 with the CUDA
attention backend SIE selects; each head's output on a packed batch (sequences of 5 to
511 tokens) is compared with a float32 reference written with transformers on the same
GPU over a padded batch:

- cross-encoders: BertForSequenceClassification, XLMRobertaForSequenceClassification,
  ModernBertForSequenceClassification -> sigmoid(logit);
- LLM reranker (Qwen3ForCausalLM, yes/no) -> softmax([no, yes])[1] at the last token;
- SPLADE (BertForMaskedLM) -> max over tokens of log(1 + relu(logits)), special ids dropped;
- ColBERT (BertModel + linear) token vectors and MaxSim scores;
- BGE-M3 (XLM-R + sparse_linear.pt + colbert_linear.pt): dense CLS, sparse, colbert vectors.

A row passes when the largest difference is within the dtype's tolerance (absolute on
scores in [0, 1] and on unit vectors; relative to the largest reference value on sparse
weights). Every check runs even when an earlier one fails; the exit code is 1 if any failed.

Usage: python bench/gpu_check_heads.py [--device cpu]   (cpu: a dry run where no GPU is).
Needs torch and transformers (>= 5); no model downloads.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import word_tokenizer  # noqa: E402

from sie_engine.card import ModelCard, WeightsSource  # noqa: E402
from sie_engine.runner import build_runner  # noqa: E402
from sie_engine.tokenizer import TextTokenizer  # noqa: E402
from sie_engine.work import WorkItem  # noqa: E402

SCORE = frozenset({"score"})  # the head a score work item asks for
VOCAB = 4096
SPECIAL = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "[unused0]": 5, "[unused1]": 6,
           "yes": 7, "no": 8}
LENGTHS = (5, 17, 64, 129, 300, 511)
TOL = {torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def word_level_tokenizer(directory: Path) -> TextTokenizer:
    """A real fast tokenizer for build_runner; the check feeds token ids directly."""
    vocab = {**SPECIAL, **{f"w{i}": i for i in range(len(SPECIAL), VOCAB)}}
    return word_tokenizer.word_level_tokenizer(directory, vocab, max(LENGTHS) + 1, pad_token="[PAD]",
                                               cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def random_ids(rng, n: int, *, cls: bool = True, marker: int | None = None, unk_every: int = 0) -> np.ndarray:
    body = rng.integers(len(SPECIAL), VOCAB, size=n - 2 - (marker is not None)).astype(np.int32)
    if unk_every:
        body[::unk_every] = SPECIAL["[UNK]"]  # the ColBERT check's skiplist token
    head = [SPECIAL["[CLS]"]] + ([marker] if marker is not None else [])
    return np.concatenate([np.asarray(head, dtype=np.int32), body, np.asarray([SPECIAL["[SEP]"]], dtype=np.int32)])


def padded(ids: list[np.ndarray], device) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(x) for x in ids)
    input_ids = torch.zeros((len(ids), longest), dtype=torch.long, device=device)
    mask = torch.zeros((len(ids), longest), dtype=torch.long, device=device)
    for i, x in enumerate(ids):
        input_ids[i, :len(x)] = torch.from_numpy(x.astype(np.int64))
        mask[i, :len(x)] = 1
    return input_ids, mask


def runner_for(root: Path, tokenizer, device, dtype: str, **card):
    card = ModelCard(id="check", weights=WeightsSource(path=str(root)), dtype=dtype, max_seq_len=max(LENGTHS) + 1,
                     max_batch_tokens=8192, **card)
    return build_runner(card, root, device, tokenizer=tokenizer)


def save(model, root: Path, tokenizer_dir: Path) -> Path:
    model.save_pretrained(root)
    for f in tokenizer_dir.iterdir():
        (root / f.name).write_bytes(f.read_bytes())
    return root


# ---- checks: each returns (max difference, note) for one dtype --------------------------
def check_cross_encoder(kind, work, tokenizer_dir, tokenizer, device, dtype):
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        ModernBertConfig,
        ModernBertForSequenceClassification,
        XLMRobertaConfig,
        XLMRobertaForSequenceClassification,
    )

    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                  num_labels=1)
    if kind == "bert":
        model = BertForSequenceClassification(BertConfig(max_position_embeddings=520, **common))
    elif kind == "xlmr":
        model = XLMRobertaForSequenceClassification(XLMRobertaConfig(max_position_embeddings=520, type_vocab_size=1,
                                                                      pad_token_id=1, **common))
    else:
        model = ModernBertForSequenceClassification(ModernBertConfig(
            max_position_embeddings=1024, local_attention=64, global_attn_every_n_layers=2, pad_token_id=0,
            cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3, classifier_pooling="mean", **common))
    root = save(model.eval(), work / f"ce-{kind}", tokenizer_dir)
    rng = np.random.default_rng(1)
    ids = [random_ids(rng, n) for n in LENGTHS]
    types = [np.concatenate([np.zeros(n // 2, np.int32), np.ones(n - n // 2, np.int32)]) if kind == "bert" else None
             for n in LENGTHS]
    model = model.to(device)
    input_ids, mask = padded(ids, device)
    extra = {}
    if kind == "bert":
        type_ids, _ = padded([t for t in types], device)
        extra["token_type_ids"] = type_ids
    with torch.no_grad():
        expected = torch.sigmoid(model(input_ids=input_ids, attention_mask=mask, **extra).logits[:, 0]).cpu().numpy()
    runner = runner_for(root, tokenizer, device, dtype, outputs=("score",))
    items = [WorkItem(None, i, x, type_ids=t, outputs=SCORE) for i, (x, t) in enumerate(zip(ids, types))]
    got = np.asarray([r["score"] for r in runner.run(items)])
    return float(np.abs(got - expected).max()), f"scores {np.round(expected[:3], 3)}"


def check_llm_reranker(work, tokenizer_dir, tokenizer, device, dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(2)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=32, intermediate_size=256,
                                         max_position_embeddings=1024, tie_word_embeddings=False)).eval()
    root = save(model, work / "qwen3-reranker", tokenizer_dir)
    rng = np.random.default_rng(3)
    ids = [rng.integers(len(SPECIAL), VOCAB, size=n).astype(np.int32) for n in LENGTHS]
    model = model.to(device)
    with torch.no_grad():  # one at a time: the reference needs no padding side
        logits = [model(input_ids=torch.from_numpy(x.astype(np.int64))[None].to(device)).logits[0, -1] for x in ids]
    expected = np.asarray([torch.softmax(torch.stack([last[SPECIAL["no"]], last[SPECIAL["yes"]]]), 0)[1].item()
                           for last in logits])
    runner = runner_for(root, tokenizer, device, dtype, family="qwen3", outputs=("score",),
                        options={"score": {"kind": "yes-no"}})
    got = np.asarray([r["score"] for r in runner.run([WorkItem(None, i, x, outputs=SCORE) for i, x in enumerate(ids)])])
    return float(np.abs(got - expected).max()), ""


def check_splade(work, tokenizer_dir, tokenizer, device, dtype):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(4)
    model = BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=256, max_position_embeddings=520)).eval()
    root = save(model, work / "splade", tokenizer_dir)
    rng = np.random.default_rng(5)
    ids = [random_ids(rng, n) for n in LENGTHS]
    model = model.to(device)
    input_ids, mask = padded(ids, device)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=mask).logits
        expected = (torch.log1p(torch.relu(logits)) * mask[..., None]).amax(1).cpu().numpy()
    expected[:, sorted(set(SPECIAL.values()) & set(range(5)))] = 0.0  # the tokenizer's special ids
    runner = runner_for(root, tokenizer, device, dtype, outputs=("sparse",))
    got = runner.run([WorkItem(None, i, x, outputs=frozenset({"sparse"})) for i, x in enumerate(ids)])
    worst, jaccard = 0.0, 1.0
    for row, out in zip(expected, got):
        dense = np.zeros(VOCAB, dtype=np.float32)
        dense[out["sparse"].indices] = out["sparse"].values
        worst = max(worst, float(np.abs(dense - row).max() / max(row.max(), 1e-6)))
        a, b = set(np.nonzero(row > 0)[0]), set(out["sparse"].indices.tolist())
        jaccard = min(jaccard, len(a & b) / max(len(a | b), 1))
    return worst, f"min index Jaccard {jaccard:.4f}"


def check_colbert(work, tokenizer_dir, tokenizer, device, dtype):
    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(6)
    model = BertModel(BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=256, max_position_embeddings=520), add_pooling_layer=False).eval()
    root = save(model, work / "colbert", tokenizer_dir)
    weights = {f"bert.{k}": v for k, v in load_file(str(root / "model.safetensors")).items()}
    linear = torch.randn(32, 128) * 0.1
    weights["linear.weight"] = linear
    save_file(weights, str(root / "model.safetensors"))
    rng = np.random.default_rng(7)
    query = random_ids(rng, 32, marker=SPECIAL["[unused0]"])
    docs = [random_ids(rng, n, marker=SPECIAL["[unused1]"], unk_every=7) for n in LENGTHS]
    model, linear = model.to(device), linear.to(device)
    input_ids, mask = padded([query] + docs, device)
    with torch.no_grad():
        vectors = F.normalize(model(input_ids=input_ids, attention_mask=mask).last_hidden_state @ linear.T, dim=-1)
    q = vectors[0, :len(query)].cpu().numpy()
    expected_docs = [vectors[i + 1, :len(d)].cpu().numpy()[d != SPECIAL["[UNK]"]] for i, d in enumerate(docs)]
    expected_scores = np.asarray([(q @ d.T).max(axis=1).sum() for d in expected_docs])
    runner = runner_for(root, tokenizer, device, dtype, outputs=("multivector",), options={"multivector": {
        "kind": "colbert", "query_marker": "[unused0]", "document_marker": "[unused1]", "skiplist": ["!"]}})
    encoded = runner.run([WorkItem(None, i, x, outputs=frozenset({"multivector"}))
                                    for i, x in enumerate([query] + docs)])
    worst = max(float(np.abs(e["multivector"] - r).max()) for e, r in zip(encoded, [q] + expected_docs))
    scores = np.asarray([r["score"] for r in runner.run([WorkItem(None, i, d, extra=encoded[0]["multivector"],
                                                                 outputs=SCORE) for i, d in enumerate(docs)])])
    score_err = float(np.abs(scores - expected_scores).max() / np.abs(expected_scores).max())
    return max(worst, score_err), f"vectors {worst:.2e}, MaxSim rel {score_err:.2e}"


def check_bge_m3(work, tokenizer_dir, tokenizer, device, dtype):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(8)
    model = XLMRobertaModel(XLMRobertaConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=256, max_position_embeddings=520,
                                             type_vocab_size=1, pad_token_id=1), add_pooling_layer=False).eval()
    root = save(model, work / "bge-m3", tokenizer_dir)
    sparse, colbert = torch.nn.Linear(128, 1), torch.nn.Linear(128, 128)
    torch.save(sparse.state_dict(), root / "sparse_linear.pt")
    torch.save(colbert.state_dict(), root / "colbert_linear.pt")
    rng = np.random.default_rng(9)
    ids = [random_ids(rng, n) for n in LENGTHS]
    model, sparse, colbert = model.to(device), sparse.to(device), colbert.to(device)
    input_ids, mask = padded(ids, device)
    with torch.no_grad():
        hidden = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        dense = F.normalize(hidden[:, 0], dim=-1).cpu().numpy()
        weights = torch.relu(sparse(hidden)).squeeze(-1).cpu().numpy()
        vectors = F.normalize(colbert(hidden[:, 1:]), dim=-1).cpu().numpy()
    runner = runner_for(root, tokenizer, device, dtype, outputs=("dense", "sparse", "multivector"), pooling="cls",
                        options={"sparse": {"kind": "bge-m3"}, "multivector": {"kind": "bge-m3"}})
    got = runner.run([WorkItem(None, i, x, outputs=frozenset({"dense", "sparse", "multivector"}))
                                for i, x in enumerate(ids)])
    worst = 0.0
    for i, (x, out) in enumerate(zip(ids, got)):
        worst = max(worst, float(np.abs(F.normalize(torch.from_numpy(out["dense"]), dim=-1).numpy() - dense[i]).max()))
        worst = max(worst, float(np.abs(out["multivector"] - vectors[i, :len(x) - 1]).max()))
        lexical: dict[int, float] = {}
        for token, w in zip(x.tolist(), weights[i, :len(x)]):
            if token not in (0, 1, 2, 3, 4) and w > lexical.get(token, 0.0):
                lexical[token] = float(w)
        got_sparse = dict(zip(out["sparse"].indices.tolist(), out["sparse"].values.tolist()))
        peak = max(lexical.values(), default=1.0)
        for token in set(lexical) | set(got_sparse):
            worst = max(worst, abs(lexical.get(token, 0.0) - got_sparse.get(token, 0.0)) / peak)
    return worst, ""


CHECKS = [
    ("cross-encoder bert", lambda *a: check_cross_encoder("bert", *a), ("float32", "float16", "bfloat16")),
    ("cross-encoder xlmr", lambda *a: check_cross_encoder("xlmr", *a), ("float32", "float16", "bfloat16")),
    ("cross-encoder modernbert", lambda *a: check_cross_encoder("modernbert", *a), ("float32", "float16", "bfloat16")),
    ("llm reranker qwen3 yes/no", check_llm_reranker, ("float32", "bfloat16")),
    ("splade", check_splade, ("float32", "float16", "bfloat16")),
    ("colbert + maxsim", check_colbert, ("float32", "float16", "bfloat16")),
    ("bge-m3 dense+sparse+colbert", check_bge_m3, ("float32", "float16", "bfloat16")),
]


def main() -> int:
    parser = argparse.ArgumentParser(description="GPU check of SIE's score / sparse / multivector heads")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    failed = 0
    print(f"{'check':<30} {'dtype':<9} {'max diff':>10} {'tol':>7}  result")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer_dir = work / "tokenizer"
        tokenizer = word_level_tokenizer(tokenizer_dir)
        for name, check, dtypes in CHECKS:
            for dtype in dtypes:
                if device.type == "cpu" and dtype == "float16":
                    continue
                try:
                    diff, note = check(work / f"{name}-{dtype}".replace(" ", "_").replace("/", "_"), tokenizer_dir,
                                       tokenizer, device, dtype)
                    ok = diff <= TOL[DTYPES[dtype]]
                    print(f"{name:<30} {dtype:<9} {diff:10.2e} {TOL[DTYPES[dtype]]:7.0e}  "
                          f"{'PASS' if ok else 'FAIL'} {note}", flush=True)
                except Exception:  # one failing check must not hide the others
                    ok = False
                    print(f"{name:<30} {dtype:<9} {'error':>10}          FAIL", flush=True)
                    traceback.print_exc()
                failed += not ok
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
