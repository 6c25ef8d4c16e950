"""Each task SIE serves against the library users run for it today, on the same inputs and the
same CPU, side by side in one run.

    python bench/bench_tasks.py                      # every task below
    python bench/bench_tasks.py --task nli --rounds 3

Tasks (`--task`, comma-separated):
  nli      zero-shot classification: SIE's `extract` on an NLI cross-encoder vs transformers'
           `pipeline("zero-shot-classification")` (batch `--nli-batch`), the `--labels` most
           frequent Debian sections of the dev corpus as candidate labels, the pipeline's default
           hypothesis "This example is {}.". No real NLI weights install here, so the model is
           random at a real model's size (`--nli-arch`: deberta = DeBERTa-v3-base's shape, as
           MoritzLaurer/deberta-v3-base-zeroshot-v2.0; bert = BERT-base's): speed does not
           depend on the weights' values. Built once into the tests' cache folder.
  gliclass GLiClass (multi-label) vs the gliclass library's ZeroShotClassificationPipeline (its default
           batch of 8), the same labels; a random model at gliclass-base's size (DeBERTa-v3-base
           backbone), built once with gliclass' own classes (tests/helpers/gliclass_models.py)
  glirel   GLiREL relations between given entities vs glirel's batch_predict_relations: a random model
           at glirel-large's head settings over a DeBERTa-v3-base-sized backbone, five one-word
           entities per dev document, four relation labels, every score (threshold 0)
  clip     CLIP image embeddings (JPEG bytes in) vs transformers' CLIPModel.get_image_features after its
           image processor, a random model at ViT-B/32's size (tokens = image patches + class token)
  mpnet    all-mpnet-base-v2 (real weights) vs sentence-transformers (bench_families.py)
  static   potion-base-8M (real weights) vs model2vec's StaticModel.encode (bench_families.py)

SIE and the reference each run in a process of its own (system_process.py: two systems' OpenMP teams
in one process slow each other). Each round times SIE and the reference on the same texts, after one
warm-up call each, alternating which goes first; the table gives median items/s and tokens/s (SIE's
count of real tokens: for NLI every text-hypothesis pair's), SIE / reference, and how far SIE's
answers are from the reference's (largest score difference, or the minimum cosine of the vectors).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
for folder in ("engine/heads", "engine/families"):  # test_glirel's GLiREL builder and what it imports
    sys.path.insert(0, str(ROOT / "tests" / folder))

import bench_families  # noqa: E402
from common import load_texts, median, read_jsonl  # noqa: E402
from system_process import SystemProcess  # noqa: E402

import real_checkpoints  # noqa: E402

TASKS = ("nli", "gliclass", "glirel", "clip", "mpnet", "static")
TEMPLATE = "This example is {}."


def frequent_sections(count: int) -> list[str]:
    """The `count` most frequent Debian sections of the dev corpus (its labels file)."""
    sections = collections.Counter(row["section"] for row in read_jsonl("debian-dev-labels"))
    return [name for name, _ in sections.most_common(count)]


def alternate(systems: dict[str, tuple[SystemProcess, tuple]], rounds: int) -> tuple[dict, dict]:
    """Median seconds of each system (name -> its process and the arguments of its `run`; each side
    runs in a process of its own, system_process.py) over rounds whose order reverses each time,
    after one warm-up call each, and each system's last answer."""
    for process, arguments in systems.values():  # warm-up: loads, first-call allocations
        process.call("run", *arguments)
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    answers: dict[str, object] = {}
    for r in range(rounds):
        for name in (list(systems) if r % 2 == 0 else list(systems)[::-1]):
            process, arguments = systems[name]
            took, answers[name] = process.timed("run", *arguments)
            seconds[name].append(took)
    return {name: median(s) for name, s in seconds.items()}, answers


def closing(*processes: SystemProcess):
    """Close every process once the block ends (contextlib.ExitStack over their close)."""
    stack = contextlib.ExitStack()
    for process in processes:
        stack.callback(process.close)
    return stack


# ----------------------------------------------------------------------------- NLI zero-shot

def nli_config(arch: str):
    """A random sequence classifier at a real NLI model's size, id2label as the real models say."""
    from transformers import BertConfig, DebertaV2Config

    common = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, max_position_embeddings=512)
    if arch == "deberta":  # DeBERTa-v3-base (MoritzLaurer/deberta-v3-base-zeroshot-v2.0's config.json)
        return DebertaV2Config(**common, relative_attention=True, position_buckets=256, max_relative_positions=-1,
                               pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", position_biased_input=False,
                               type_vocab_size=0, pooler_hidden_size=768, pooler_hidden_act="gelu", num_labels=2,
                               id2label={0: "entailment", 1: "not_entailment"},
                               label2id={"entailment": 0, "not_entailment": 1})
    return BertConfig(**common, type_vocab_size=2, num_labels=3,
                      id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
                      label2id={"contradiction": 0, "neutral": 1, "entailment": 2})


def nli_model_dir(arch: str) -> Path:
    """The random model's folder (built once: about 440 MB), with MiniLM's tokenizer (vocabulary 30,522)."""
    from transformers import AutoModelForSequenceClassification

    from tiny_models import copy_tokenizer

    root = real_checkpoints.cache_root() / f"bench-nli-{arch}-base-random"
    if (root / "model.safetensors").is_file():
        return root
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(nli_config(arch)).eval()
    work = root.with_name(root.name + f".tmp{os.getpid()}")
    model.save_pretrained(work, safe_serialization=True)
    copy_tokenizer(work)
    if arch == "deberta":  # DeBERTa feeds no segment ids: its tokenizer_config says so
        tok_config = json.loads((work / "tokenizer_config.json").read_text())
        tok_config["model_input_names"] = ["input_ids", "attention_mask"]
        (work / "tokenizer_config.json").write_text(json.dumps(tok_config))
    os.replace(work, root)
    return root


class SIEExtractSide:
    """SIE's Engine over `card` and its bfloat16 variant (`<id>-bf16`): `run(model_id)` extracts the
    texts' labels, as (per text {label: score}, tokens)."""

    def __init__(self, card, texts: list[str], labels: list[str], fields: dict):
        from dataclasses import replace

        from sie_engine import Catalog, Engine

        self.engine = Engine(Catalog([card, replace(card, id=card.id + "-bf16", dtype="bfloat16")]), device="cpu")
        self.texts, self.labels, self.fields = texts, labels, fields

    def run(self, model_id: str) -> tuple[list[dict], int]:
        result = self.engine.extract_sync(model_id, self.texts, self.labels, **self.fields)
        return [{c.label: c.score for c in item.classifications} for item in result.items], result.tokens

    def close(self) -> None:
        self.engine.close()


def compare_extract(title: str, card, texts: list[str], labels: list[str], reference: SystemProcess, rounds: int,
                    **fields) -> list[dict]:
    """SIE's `extract` in float32 and in bfloat16 (the card with dtype bfloat16) against `reference`
    (its `run()`: per text {label: score}) on the same texts and labels: one row per SIE precision."""
    sie = SystemProcess(SIEExtractSide, card, texts, labels, fields)
    with closing(sie, reference):
        seconds, answers = alternate({"float32": (sie, (card.id,)), "bfloat16": (sie, (card.id + "-bf16",)),
                                      "ref": (reference, ())}, rounds)
    rows = []
    for precision in ("float32", "bfloat16"):
        got, tokens = answers[precision]
        diff = max(abs(g[label] - w[label]) for g, w in zip(got, answers["ref"]) for label in labels)
        rows.append({"name": title.format(precision=precision), "items": len(texts), "tokens": tokens,
                     "sie_s": seconds[precision], "ref_s": seconds["ref"], "agreement": f"max score diff {diff:.1e}"})
    return rows


class NLIPipelineSide:
    """transformers' zero-shot-classification pipeline: `run()` scores the texts' labels."""

    def __init__(self, root: Path, texts: list[str], labels: list[str], batch: int):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

        model = AutoModelForSequenceClassification.from_pretrained(str(root)).eval()
        self.pipe = pipeline("zero-shot-classification", model=model,
                             tokenizer=AutoTokenizer.from_pretrained(str(root)), device="cpu")
        self.texts, self.labels, self.batch = texts, labels, batch

    def run(self) -> list[dict]:
        out = self.pipe(self.texts, candidate_labels=self.labels, hypothesis_template=TEMPLATE, batch_size=self.batch)
        return [dict(zip(o["labels"], o["scores"])) for o in out]


def bench_nli(args) -> list[dict]:
    from sie_engine.local_card import card_from_local_dir

    root = nli_model_dir(args.nli_arch)
    labels = frequent_sections(args.labels)
    texts = load_texts(args.nli_docs)
    reference = SystemProcess(NLIPipelineSide, root, texts, labels, args.nli_batch)
    name = {"deberta": "DeBERTa-v3-base", "bert": "BERT-base"}[args.nli_arch]
    title = (f"NLI zero-shot, {name} shape (random), {len(labels)} labels: SIE {{precision}} vs transformers "
             f"pipeline float32 (batch {args.nli_batch})")
    return compare_extract(title, card_from_local_dir("nli", root), texts, labels, reference, args.rounds,
                           hypothesis_template=TEMPLATE)


# ----------------------------------------------------------------------------- GLiClass

def gliclass_model_dir() -> Path:
    """A GLiClass model at gliclass-base's size (DeBERTa-v3-base backbone, random weights), built once with
    the gliclass library's own classes (tests/helpers/gliclass_models.py) into the tests' cache folder."""
    import gliclass_models

    root = real_checkpoints.cache_root() / "bench-gliclass-deberta-base-random"
    if (root / "model.safetensors").is_file() or (root / "pytorch_model.bin").is_file():
        return root
    tiny = gliclass_models.DEBERTA
    gliclass_models.DEBERTA = dict(tiny, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                   intermediate_size=3072, position_buckets=256)
    try:
        work = gliclass_models.make_gliclass(root.with_name(root.name + f".tmp{os.getpid()}"), backbone="deberta")
    finally:
        gliclass_models.DEBERTA = tiny
    os.replace(work, root)
    return root


class GLiClassSide:
    """The gliclass library's ZeroShotClassificationPipeline (batch 8, multi-label): `run()` scores the
    texts' labels."""

    def __init__(self, root: Path, texts: list[str], labels: list[str]):
        from gliclass_models import gliclass_pipeline

        self.pipe, self.texts, self.labels = gliclass_pipeline(root), texts, labels

    def run(self) -> list[dict]:
        from gliclass_models import reference_scores

        return reference_scores(self.pipe, self.texts, self.labels, True, batch_size=8)


def bench_gliclass(args) -> list[dict]:
    from sie_engine.local_card import card_from_local_dir

    root = gliclass_model_dir()
    labels = frequent_sections(args.labels)
    texts = load_texts(args.gliclass_docs)
    title = (f"GLiClass, DeBERTa-v3-base backbone (random), {len(labels)} labels, multi-label: SIE {{precision}} vs "
             f"gliclass ZeroShotClassificationPipeline float32 (batch 8)")
    return compare_extract(title, card_from_local_dir("gliclass", root), texts, labels,
                           SystemProcess(GLiClassSide, root, texts, labels), args.rounds, multi_label=True)


# ----------------------------------------------------------------------------- GLiREL

RELATIONS = ["depends on", "provides", "written in", "part of"]


def glirel_model_dir() -> Path:
    """A GLiREL at glirel-large's settings over a DeBERTa-v3-base-sized random backbone, built once with
    the glirel library (tests/engine/heads/test_glirel.py's builder) into the tests' cache folder."""
    from test_glirel import build_glirel
    from transformers import DebertaV2Model

    from tiny_models import save_tiny

    root = real_checkpoints.cache_root() / "bench-glirel-deberta-base-random"
    if (root / "pytorch_model.bin").is_file() or (root / "model.safetensors").is_file():
        return root
    backbone = real_checkpoints.cache_root() / "bench-glirel-deberta-base-backbone"
    if not (backbone / "model.safetensors").is_file():
        config = nli_config("deberta")
        torch.manual_seed(0)
        save_tiny(DebertaV2Model(config).eval(), backbone)
    work = root.with_name(root.name + f".tmp{os.getpid()}")
    build_glirel(work, backbone, 0, hidden_size=768, subtoken_pooling="first", label_embed_strategy="both")
    os.replace(work, root)
    return root


def entity_words(text: str, count: int = 5, within: int = 60) -> list[tuple[int, int]]:
    """`count` one-word entities (word index, word index) spread over the text's first `within` words: the
    same spans go to both systems (which words they are does not change the work)."""
    from sie_engine.models.gliner.prompt import split_words

    words = min(len(split_words(text).texts), within)
    step = max(words // count, 1)
    return [(i, i) for i in range(0, words, step)][:count]


class SIEGlirelSide:
    """SIE's Engine on the GLiREL directory: `run()` every relation score of the items' entities, as
    ({(head start, tail start, relation): score} per item, tokens)."""

    def __init__(self, root: Path, items: list[dict]):
        from sie_engine import Catalog, Engine
        from sie_engine.local_card import card_from_local_dir

        self.engine = Engine(Catalog([card_from_local_dir("glirel", root)]), device="cpu")
        self.items = items

    def run(self) -> tuple[list[dict], int]:
        result = self.engine.extract_sync("glirel", self.items, RELATIONS, threshold=0.0)
        return ([{(r.head.start, r.tail.start, r.relation): r.score for r in item.relations} for item in result.items],
                result.tokens)

    def close(self) -> None:
        self.engine.close()


class GlirelSide:
    """glirel's batch_predict_relations on the same entities (`ner`), keyed as SIE's answer is:
    `starts[i]` are text i's word starts."""

    def __init__(self, root: Path, texts: list[str], ner: list, starts: list[list[int]]):
        from glirel import GLiREL

        # glirel 1.2.1 asks for the two arguments huggingface_hub no longer passes
        self.model = GLiREL._from_pretrained(model_id=str(root), revision=None, cache_dir=None, force_download=False,
                                             proxies=None, resume_download=False, local_files_only=True,
                                             token=None).eval()
        self.texts, self.ner, self.starts = texts, ner, starts

    def run(self) -> list[dict]:
        out = self.model.batch_predict_relations(self.texts, RELATIONS, threshold=0.0, ner=self.ner)
        return [{(starts[r["head_pos"][0]], starts[r["tail_pos"][0]], r["label"]): r["score"] for r in doc}
                for starts, doc in zip(self.starts, out)]


def bench_glirel(args) -> list[dict]:
    from sie_engine.models.gliner.prompt import split_words

    root = glirel_model_dir()
    texts = [t for t in load_texts(args.glirel_docs * 2) if len(split_words(t).texts) >= 10][:args.glirel_docs]
    spans = [entity_words(t) for t in texts]
    words = [split_words(t) for t in texts]
    items = [{"text": t, "entities": [{"start": w.starts[a], "end": w.ends[b], "label": "thing"} for a, b in sp]}
             for t, w, sp in zip(texts, words, spans)]
    ner = [[[a, b, "thing", " ".join(w.texts[a:b + 1])] for a, b in sp] for w, sp in zip(words, spans)]
    sie = SystemProcess(SIEGlirelSide, root, items)
    reference = SystemProcess(GlirelSide, root, texts, ner, [list(w.starts) for w in words])
    with closing(sie, reference):
        seconds, answers = alternate({"sie": (sie, ()), "ref": (reference, ())}, args.rounds)
    got, tokens = answers["sie"]
    same = all(a.keys() == b.keys() for a, b in zip(got, answers["ref"]))
    diff = max(abs(a[k] - b[k]) for a, b in zip(got, answers["ref"]) for k in a.keys() & b.keys())
    title = (f"GLiREL, DeBERTa-v3-base backbone (random), {len(spans[0])} entities, {len(RELATIONS)} relations: "
             "SIE float32 vs glirel batch_predict_relations")
    return [{"name": title,
             "items": len(texts), "tokens": tokens, "sie_s": seconds["sie"], "ref_s": seconds["ref"],
             "agreement": f"{'same' if same else 'DIFFERENT'} triples, max score diff {diff:.1e}"}]


# ----------------------------------------------------------------------------- CLIP

def clip_model_dir() -> Path:
    """A random CLIP at ViT-B/32's size (vision: 12 layers, hidden 768, 224 px in 32 px patches; text:
    12 layers, hidden 512; projection 512) with its processor, built once into the tests' cache folder.
    The tokenizer is the tests' small byte-level BPE (tests/helpers/image_fixtures.py): only images are timed."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from image_fixtures import tiny_clip_tokenizer

    root = real_checkpoints.cache_root() / "bench-clip-vit-b32-random"
    if (root / "model.safetensors").is_file():
        return root
    tokenizer = tiny_clip_tokenizer()
    text = dict(vocab_size=len(tokenizer), hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                num_attention_heads=8, max_position_embeddings=77, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                  image_size=224, patch_size=32)
    torch.manual_seed(0)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=512)).eval()
    work = root.with_name(root.name + f".tmp{os.getpid()}")
    model.save_pretrained(work)
    CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 224},
                                                     crop_size={"height": 224, "width": 224}),
                  tokenizer=tokenizer).save_pretrained(work)
    os.replace(work, root)
    return root


class SIEClipSide:
    """SIE's Engine on the CLIP directory: `run(precision)` embeds the JPEG bytes."""

    def __init__(self, root: Path, images: list[bytes]):
        from sie_engine import Catalog, Engine
        from sie_engine.local_card import card_from_local_dir

        self.engine = Engine(Catalog([card_from_local_dir("clip", root)]), device="cpu")
        self.images = images

    def run(self, precision: str):
        import numpy as np

        result = self.engine.encode_sync("clip", [{"image": b} for b in self.images], normalize=False,
                                         precision=precision)
        return np.stack([item.dense for item in result.items])

    def close(self) -> None:
        self.engine.close()


class TransformersClipSide:
    """What a transformers user writes: decode, the processor, get_image_features in batches of 32."""

    def __init__(self, root: Path, images: list[bytes]):
        from transformers import CLIPImageProcessorPil, CLIPModel

        self.model = CLIPModel.from_pretrained(str(root)).eval()
        # transformers' PIL image processor: its default one needs torchvision, which does not load beside this torch
        self.processor = CLIPImageProcessorPil.from_pretrained(str(root))
        self.images = images

    def run(self):
        import io

        import numpy as np
        from PIL import Image

        out = []
        for start in range(0, len(self.images), 32):
            pictures = [Image.open(io.BytesIO(b)).convert("RGB") for b in self.images[start:start + 32]]
            with torch.no_grad():
                features = self.model.get_image_features(**self.processor(images=pictures, return_tensors="pt"))
            out.append(getattr(features, "pooler_output", features).numpy())
        return np.concatenate(out)


def bench_clip(args) -> list[dict]:
    from common import min_cosine

    from image_fixtures import _picture, encode_image

    root = clip_model_dir()
    images = [encode_image(_picture(320 + 8 * (i % 5), 240 + 8 * (i % 3), i), "JPEG") for i in range(args.clip_images)]
    sie = SystemProcess(SIEClipSide, root, images)
    reference = SystemProcess(TransformersClipSide, root, images)
    with closing(sie, reference):
        seconds, answers = alternate({"float32": (sie, ("float32",)), "bfloat16": (sie, ("bfloat16",)),
                                      "ref": (reference, ())}, args.rounds)
    patches = len(images) * ((224 // 32) ** 2 + 1)
    return [{"name": f"CLIP image embeddings, ViT-B/32 size (random), JPEG bytes in: SIE {precision} vs transformers "
                     "CLIPModel.get_image_features float32 (its PIL image processor, batch 32)",
             "items": len(images), "tokens": patches, "sie_s": seconds[precision], "ref_s": seconds["ref"],
             "agreement": f"min cosine {min_cosine(answers[precision], answers['ref']):.7f}"}
            for precision in ("float32", "bfloat16")]


# ----------------------------------------------------------------------------- embedders

def family_row(row: dict) -> dict:
    """bench_families' row (tokens/s) in this table's terms."""
    return {"name": row["name"], "items": row["texts"], "tokens": row["tokens"],
            "sie_s": row["tokens"] / row["sie"], "ref_s": row["tokens"] / row["ref"],
            "agreement": f"min cosine {row['min_cos']:.7f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nli-docs", type=int, default=8)
    parser.add_argument("--labels", type=int, default=8, help="candidate labels: the most frequent sections")
    parser.add_argument("--nli-arch", choices=("deberta", "bert"), default="deberta")
    parser.add_argument("--nli-batch", type=int, default=8, help="the pipeline's batch_size")
    parser.add_argument("--gliclass-docs", type=int, default=32)
    parser.add_argument("--glirel-docs", type=int, default=16)
    parser.add_argument("--clip-images", type=int, default=64)
    parser.add_argument("--mpnet-docs", type=int, default=200)
    parser.add_argument("--static-docs", type=int, default=6000)
    args = parser.parse_args()
    tasks = [t for t in args.task.split(",") if t]
    unknown = set(tasks) - set(TASKS)
    if unknown:
        parser.error(f"unknown tasks {sorted(unknown)}; choose from {', '.join(TASKS)}")
    load = os.getloadavg()[0]
    rows = []
    for task in tasks:
        if task == "nli":
            rows.extend(bench_nli(args))
        elif task == "gliclass":
            rows.extend(bench_gliclass(args))
        elif task == "glirel":
            rows.extend(bench_glirel(args))
        elif task == "clip":
            rows.extend(bench_clip(args))
        elif task == "mpnet":
            rows.append(family_row(bench_families.bench_mpnet(args.mpnet_docs, args.rounds)))
        elif task == "static":
            rows.append(family_row(bench_families.bench_static(args.static_docs, args.rounds)))
        print(f"  {rows[-1]['name']}: {rows[-1]['ref_s'] / rows[-1]['sie_s']:.2f}x", flush=True)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.rounds} alternating rounds, "
          f"load average {load:.1f} before and {os.getloadavg()[0]:.1f} after\n")
    print("| task vs reference | items | tokens | SIE items/s | reference items/s | SIE tokens/s | "
          "reference tokens/s | SIE / reference | agreement |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        n, t = row["items"], row["tokens"]
        print(f"| {row['name']} | {n:,} | {t:,} | {n / row['sie_s']:,.1f} | {n / row['ref_s']:,.1f} | "
              f"{t / row['sie_s']:,.0f} | {t / row['ref_s']:,.0f} | {row['ref_s'] / row['sie_s']:.2f}x | "
              f"{row['agreement']} |")


if __name__ == "__main__":
    main()
