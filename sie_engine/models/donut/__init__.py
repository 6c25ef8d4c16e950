"""Donut (naver-clova-ix/donut-*): a DonutSwin image encoder and an MBart text decoder with
cross-attention, a transformers `VisionEncoderDecoderModel` checkpoint. swin.py and mbart.py are
the two halves, model.py the model; reader.py and serving.py read pages with it (serving.py: extract's
`generate` head and input preparation), token2json.py is DonutProcessor's parsing of the generated
tokens, family.py the registry entry."""
