"""Donut (naver-clova-ix/donut-*): a DonutSwin image encoder and an MBart text decoder with
cross-attention, a transformers `VisionEncoderDecoderModel` checkpoint. swin.py and mbart.py are
the two halves, model.py the family; images.py is DonutImageProcessor's preprocessing and
token2json.py DonutProcessor's parsing of the generated tokens."""
