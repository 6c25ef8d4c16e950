"""GPU check of every architecture family against transformers, on CUDA.

For each family (BERT, XLM-RoBERTa, ModernBERT with sliding windows, Qwen2 and Qwen3 with
grouped-query attention, NomicBERT) a small random model is saved in the Hugging Face
layout, loaded through SIE (`build_runner`, as the engine does) in float16 and bfloat16
with the CUDA attention backend SIE selects (flash-attn varlen when installed, else
torch's `varlen_attn`) and with the grouped SDPA backend for comparison, and compared
with transformers' float32 forward on the same GPU over a padded batch of sequences of
different lengths (1 to 700 tokens, longer than ModernBERT's local window).

Printed per row: max |hidden - reference| (absolute, and relative to max |reference|),
the lowest cosine between pooled outputs, and the packed-vs-alone (batch invariance)
difference. A row passes when the cosine is at least 0.999 and the relative error is at
most 2% (float16) or 6% (bfloat16). One family failing (an exception included) is printed
and the others still run.

Usage: python bench/gpu_check_families.py [--record]   (--record appends the table to
bench/RESULTS.md). Needs torch with CUDA and transformers >= 5 (NomicBERT's modeling code).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import word_tokenizer  # noqa: E402

from sie_engine.attention import GroupedSDPAAttention, select_backend  # noqa: E402
from sie_engine.batch import pack  # noqa: E402
from sie_engine.card import ModelCard, WeightsSource  # noqa: E402
from sie_engine.runner import build_runner  # noqa: E402
from sie_engine.tokenizer import TextTokenizer  # noqa: E402

VOCAB = 4096
DEVICE = torch.device("cuda")  # --device cpu: a dry run of this script where no GPU is
LENGTHS = (1, 7, 64, 129, 300, 511, 700)
REL_TOL = {torch.float16: 0.02, torch.bfloat16: 0.06}


@dataclass
class Family:
    name: str
    build: callable  # () -> transformers model (float32, random)
    pooling: str
    pad_id: int = 0
    first_id: int = 5  # lowest token id drawn (keeps clear of pad / special ids)


def _bert():
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                intermediate_size=1024, max_position_embeddings=1024), add_pooling_layer=False)


def _xlmr():
    from transformers import XLMRobertaConfig, XLMRobertaModel

    config = XLMRobertaConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                              intermediate_size=1024, max_position_embeddings=1026, type_vocab_size=1, pad_token_id=1)
    return XLMRobertaModel(config, add_pooling_layer=False)


def _modernbert():
    from transformers import ModernBertConfig, ModernBertModel

    config = ModernBertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
                              intermediate_size=384, max_position_embeddings=1024, local_attention=64,
                              global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=1, cls_token_id=1,
                              eos_token_id=2, sep_token_id=2)
    return ModernBertModel(config)


def _qwen2():
    from transformers import Qwen2Config, Qwen2Model

    model = Qwen2Model(Qwen2Config(vocab_size=VOCAB, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                                   num_key_value_heads=2, intermediate_size=1024, max_position_embeddings=2048))
    with torch.no_grad():  # biases start at zero: make them count
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0, 0.1)
    return model


def _qwen3():
    from transformers import Qwen3Config, Qwen3Model

    return Qwen3Model(Qwen3Config(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                                  num_key_value_heads=2, head_dim=64, intermediate_size=768,
                                  max_position_embeddings=2048))


def _nomic_bert():
    from transformers import NomicBertConfig, NomicBertModel

    return NomicBertModel(NomicBertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                          intermediate_size=768, max_position_embeddings=1024))


FAMILIES = [
    Family("bert", _bert, "mean"),
    Family("xlm-roberta", _xlmr, "mean", pad_id=1),
    Family("modernbert", _modernbert, "mean"),
    Family("qwen2", _qwen2, "last"),
    Family("qwen3", _qwen3, "last"),
    Family("nomic_bert", _nomic_bert, "mean"),
]


def word_level_tokenizer(directory: Path) -> TextTokenizer:
    """A real fast tokenizer (word-level over the test vocabulary) for build_runner; the check
    feeds token ids directly, so its vocabulary does not matter."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{f"w{i}": i for i in range(4, VOCAB)}}
    return word_tokenizer.word_level_tokenizer(directory, vocab, max(LENGTHS), pad_token="[PAD]")


def reference(model, ids: list[torch.Tensor], pad_id: int) -> list[torch.Tensor]:
    longest = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), longest), pad_id, dtype=torch.long, device=DEVICE)
    mask = torch.zeros((len(ids), longest), dtype=torch.long, device=DEVICE)
    for i, x in enumerate(ids):
        input_ids[i, :len(x)] = x
        mask[i, :len(x)] = 1
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    return [out[i, :len(x)].float() for i, x in enumerate(ids)]


def sie_hidden(runner, ids: list[torch.Tensor]) -> list[torch.Tensor]:
    batch = pack([x.cpu().numpy() for x in ids], runner.backend, runner.device)
    with torch.inference_mode():
        hidden = runner.backbone(batch.input_ids, batch.positions, batch.attn).float()
    return list(hidden.split(list(batch.seq_lens)))


def pooled(hidden: list[torch.Tensor], pooling: str) -> torch.Tensor:
    return torch.stack([h.mean(0) if pooling == "mean" else h[-1] for h in hidden])


def check_family(family: Family, workdir: Path, tokenizer: TextTokenizer) -> list[dict]:
    torch.manual_seed(0)
    model = family.build().eval()
    root = workdir / family.name
    model.save_pretrained(root, safe_serialization=True)
    model = model.to(DEVICE)
    generator = torch.Generator().manual_seed(1)
    ids = [torch.randint(family.first_id, VOCAB, (n,), generator=generator).to(DEVICE) for n in LENGTHS]
    expected = reference(model, ids, family.pad_id)
    scale = max(float(e.abs().max()) for e in expected)
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        card = ModelCard(id=f"gpu/{family.name}", weights=WeightsSource(path=str(root)), pooling=family.pooling,
                         dtype={torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype],
                         max_seq_len=max(LENGTHS), max_batch_tokens=8192)
        runner = build_runner(card, root, DEVICE, tokenizer=tokenizer)
        backends = [runner.backend]
        if runner.backend.name != GroupedSDPAAttention.name:  # also the padded-group fallback on the same device
            backends.append(GroupedSDPAAttention())
        for backend in backends:
            for module in runner.backbone.modules():  # the backend object every attention layer holds
                if hasattr(module, "backend"):
                    module.backend = backend
            runner.backend = backend
            got = sie_hidden(runner, ids)
            err = max(float((g - e).abs().max()) for g, e in zip(got, expected))
            cos = float(torch.nn.functional.cosine_similarity(pooled(got, family.pooling),
                                                              pooled(expected, family.pooling)).min())
            alone = [sie_hidden(runner, [x])[0] for x in ids]
            invariance = max(float((a - g).abs().max()) for a, g in zip(alone, got))
            ok = cos >= 0.999 and err / scale <= REL_TOL[dtype]
            rows.append(dict(family=family.name, dtype=str(dtype).replace("torch.", ""), backend=backend.name,
                             max_abs=err, rel=err / scale, cos=cos, invariance=invariance, ok=ok, error=""))
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| family | dtype | backend | max abs err | rel err | min pooled cos | packed vs alone | result |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["error"]:
            lines.append(f"| {r['family']} | {r.get('dtype', '')} | | | | | | FAIL: {r['error']} |")
        else:
            lines.append(f"| {r['family']} | {r['dtype']} | {r['backend']} | {r['max_abs']:.2e} | {r['rel']:.2e} | "
                         f"{r['cos']:.6f} | {r['invariance']:.2e} | {'pass' if r['ok'] else 'FAIL'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help="append the table to bench/RESULTS.md")
    parser.add_argument("--families", nargs="*", help="subset of: " + ", ".join(f.name for f in FAMILIES))
    parser.add_argument("--device", default="cuda", help="cpu: dry-run the script without a GPU")
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU", file=sys.stderr)
        return 2
    chosen = [f for f in FAMILIES if not args.families or f.name in args.families]
    device_name = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu"
    selected = select_backend(DEVICE, torch.float16).name
    print(f"device: {device_name}; torch {torch.__version__}; SIE's backend: {selected}", flush=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = word_level_tokenizer(Path(tmp) / "tokenizer")
        for family in chosen:
            try:
                family_rows = check_family(family, Path(tmp), tokenizer)
            except Exception as exc:  # one family failing must not hide the others
                traceback.print_exc()
                family_rows = [dict(family=family.name, error=f"{type(exc).__name__}: {exc}".replace("\n", " ")[:200])]
            rows.extend(family_rows)
            print(table(family_rows).split("\n", 2)[-1], flush=True)
    report = table(rows)
    print("\n" + report)
    if args.record:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with open(ROOT / "bench" / "RESULTS.md", "a") as out:
            out.write(f"\n## Architecture families against transformers on CUDA ({stamp})\n\n"
                      f"`python bench/gpu_check_families.py` on {device_name}, torch {torch.__version__}; "
                      f"reference: transformers float32 on the same GPU; lengths {list(LENGTHS)}.\n\n{report}\n")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
