"""Florence-2's tasks as `Florence2Processor` (transformers 5.x) defines them: each task token, the
prompt the processor substitutes for it (some take an input: a caption, a phrase, a region as four
`<loc_*>` tokens), and the post-processing its answer gets (postprocess.py).
"""

from __future__ import annotations

# task token -> the kind of post-processing its generated text gets
POST_PROCESSING: dict[str, str] = {
    "<OCR>": "pure_text",
    "<OCR_WITH_REGION>": "ocr",
    "<CAPTION>": "pure_text",
    "<DETAILED_CAPTION>": "pure_text",
    "<MORE_DETAILED_CAPTION>": "pure_text",
    "<OD>": "description_with_bboxes",
    "<DENSE_REGION_CAPTION>": "description_with_bboxes",
    "<CAPTION_TO_PHRASE_GROUNDING>": "phrase_grounding",
    "<REFERRING_EXPRESSION_SEGMENTATION>": "polygons",
    "<REGION_TO_SEGMENTATION>": "polygons",
    "<OPEN_VOCABULARY_DETECTION>": "description_with_bboxes_or_polygons",
    "<REGION_TO_CATEGORY>": "pure_text",
    "<REGION_TO_DESCRIPTION>": "pure_text",
    "<REGION_TO_OCR>": "pure_text",
    "<REGION_PROPOSAL>": "bboxes",
}

PROMPTS_WITHOUT_INPUT: dict[str, str] = {
    "<OCR>": "What is the text in the image?",
    "<OCR_WITH_REGION>": "What is the text in the image, with regions?",
    "<CAPTION>": "What does the image describe?",
    "<DETAILED_CAPTION>": "Describe in detail what is shown in the image.",
    "<MORE_DETAILED_CAPTION>": "Describe with a paragraph what is shown in the image.",
    "<OD>": "Locate the objects with category name in the image.",
    "<DENSE_REGION_CAPTION>": "Locate the objects in the image, with their descriptions.",
    "<REGION_PROPOSAL>": "Locate the region proposals in the image.",
}

PROMPTS_WITH_INPUT: dict[str, str] = {
    "<CAPTION_TO_PHRASE_GROUNDING>": "Locate the phrases in the caption: {input}",
    "<REFERRING_EXPRESSION_SEGMENTATION>": "Locate {input} in the image with mask",
    "<REGION_TO_SEGMENTATION>": "What is the polygon mask of region {input}",
    "<OPEN_VOCABULARY_DETECTION>": "Locate {input} in the image.",
    "<REGION_TO_CATEGORY>": "What is the region {input}?",
    "<REGION_TO_DESCRIPTION>": "What does the region {input} describe?",
    "<REGION_TO_OCR>": "What text is in the region {input}?",
}

TASKS = tuple(POST_PROCESSING)
DEFAULT_TASK = None  # a request names its task token


def construct_prompt(prompt: str) -> str:
    """`Florence2Processor._construct_prompts` for one prompt: a task token alone becomes its prompt,
    a task token with input text becomes its prompt around that text, anything else stays as is."""
    for token, text in PROMPTS_WITHOUT_INPUT.items():
        if token in prompt:
            if prompt != token:
                raise ValueError(f"Task token {token} should be the only content in the prompt.")
            prompt = text
            break
    for token, text in PROMPTS_WITH_INPUT.items():
        if token in prompt:
            prompt = text.format(input=prompt.replace(token, "").strip())
            break
    return prompt


def task_prompt(task: str, text: str | None = None) -> str:
    """What a request names (`task`, and `text` for the tasks that take an input) -> the prompt the
    processor builds. Raises ValueError naming the tasks and what each takes."""
    if task not in POST_PROCESSING:
        raise ValueError(f"unknown Florence-2 task {task!r} (tasks: {', '.join(TASKS)})")
    if task in PROMPTS_WITH_INPUT:
        if not text or not text.strip():
            raise ValueError(f"Florence-2 task {task} needs a text input (e.g. a caption, a phrase, or a region "
                             "as four <loc_0..999> tokens)")
        return construct_prompt(task + text)
    if text:
        raise ValueError(f"Florence-2 task {task} takes no text input (tasks that do: "
                         f"{', '.join(PROMPTS_WITH_INPUT)})")
    return construct_prompt(task)
