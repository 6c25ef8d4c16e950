"""Donut's generated text to JSON, as `DonutProcessor.token2json` parses it (transformers 5.x):
`<s_key>value</s_key>` pairs, nested where a value holds tags of its own, `<sep/>` between list
items; a leaf that is an added token of the form `<name/>` (RVL-CDIP's classes) becomes `name`;
text with no pair at all is `{"text_sequence": text}`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any


def token2json(tokens: str, added_vocab: Collection[str] = (), is_inner_value: bool = False) -> Any:
    """`added_vocab`: the tokenizer's added tokens (`tokenizer.get_added_vocab()`)."""
    output: dict[str, Any] = {}
    while tokens:
        start = re.search(r"<s_", tokens, re.IGNORECASE)
        if start is None:
            break
        start_token = tokens[start.start():]
        if ">" not in start_token:
            break
        start_token = start_token[: start_token.index(">") + 1]
        key = start_token[len("<s_"):-len(">")]
        end = re.search(rf"</s_{re.escape(key)}>", tokens, re.IGNORECASE)
        if end is None:
            tokens = tokens.replace(start_token, "")
            continue
        end_token = end.group()
        content = re.search(f"{re.escape(start_token)}(.*?){re.escape(end_token)}", tokens, re.IGNORECASE | re.DOTALL)
        if content is not None:
            inner = content.group(1).strip()
            if r"<s_" in inner and r"</s_" in inner:  # a node with children
                value = token2json(inner, added_vocab, is_inner_value=True)
                if value:
                    output[key] = value[0] if len(value) == 1 else value
            else:  # leaves
                leaves = []
                for leaf in inner.split(r"<sep/>"):
                    leaf = leaf.strip()
                    if leaf in added_vocab and leaf[0] == "<" and leaf[-2:] == "/>":
                        leaf = leaf[1:-2]  # a categorical special token
                    leaves.append(leaf)
                output[key] = leaves[0] if len(leaves) == 1 else leaves
        tokens = tokens[tokens.find(end_token) + len(end_token):].strip()
        if tokens[:6] == r"<sep/>":  # the next item of a list of nodes
            return [output] + token2json(tokens[6:], added_vocab, is_inner_value=True)
    if output:
        return [output] if is_inner_value else output
    return [] if is_inner_value else {"text_sequence": tokens}
