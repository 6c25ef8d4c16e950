"""Florence-2 (microsoft/Florence-2-* in their original remote-code layout, florence-community/Florence-2-*
in transformers'): a DaViT vision tower and BART, prompted by task tokens. davit.py and bart.py are the
two halves, model.py the family; tasks.py turns a task token into the processor's prompt,
postprocess.py is `Florence2Processor.post_process_generation` (location tokens to boxes and quad boxes
in image pixels) and reader.py runs images through all of it; serving.py serves it through extract
(its input preparation and `generate` head), family.py is its registry entry."""
