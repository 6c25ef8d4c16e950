"""Shared heads: modules from backbone hidden states `[T, H]` of a packed batch to one
result per work item (pooling, sparse, multi-vector, classifier, NLI, two-tower projections).
Backbones never pool; a family's own heads live in its package (sie_engine/models/<family>/).

A head is a `base.Head` whose `forward(hidden, batch, items)` returns one value per item (a
vector, a sparse vector, a score, decoded spans); a head that produces vectors says their width
in `dim`. A builder makes a card's heads for one of its outputs from a `HeadContext`
(checkpoint, config, tokenizer, device) and returns them by name; the names are what work
items ask for (`WorkItem.outputs`). Builders are registered by `module:function` in
`sie_engine.models.HEADS`, imported only when a model with that output loads.
"""
