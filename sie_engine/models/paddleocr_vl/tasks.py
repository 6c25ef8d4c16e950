"""PaddleOCR-VL's tasks, as its model card (PaddlePaddle/PaddleOCR-VL's README, transformers' model doc,
vLLM's recipe) prompts them: the page's image then the task's text in one user turn of the chat
template. Each task is a fixed prompt; the model is trained on these four and no other instruction.

A request that names no task reads text (`DEFAULT_TASK`, the card's `ocr`).
"""

from __future__ import annotations

# task -> the user turn's text after the image
PROMPTS: dict[str, str] = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
}

TASKS = tuple(PROMPTS)
DEFAULT_TASK = "ocr"


def task_prompt(task: str, text: str | None = None) -> str:
    """A request's task -> the text the user turn holds after the page. Raises ValueError naming the
    tasks (and that none takes a prompt)."""
    if task not in PROMPTS:
        raise ValueError(f"unknown PaddleOCR-VL task {task!r} (tasks: {', '.join(TASKS)})")
    if text:
        raise ValueError(f"PaddleOCR-VL task {task} has its own prompt ({PROMPTS[task]!r}); PaddleOCR-VL takes no "
                         "prompt: send only the task")
    return PROMPTS[task]
