"""GLM-OCR's tasks, as its model card (zai-org/GLM-OCR's README, transformers' model doc) prompts
them: the page's image then the task's text in one user turn of the chat template. Text, formula
and table recognition are fixed prompts; information extraction is the caller's own prompt (the
card's example asks for a JSON schema to be filled in), sent as `prompt` with task `custom`.

A request that names no task reads text (`DEFAULT_TASK`).
"""

from __future__ import annotations

# task -> the user turn's text after the image (None: the request's prompt)
PROMPTS: dict[str, str | None] = {
    "text": "Text Recognition:",
    "formula": "Formula Recognition:",
    "table": "Table Recognition:",
    "custom": None,
}

TASKS = tuple(PROMPTS)
DEFAULT_TASK = "text"


def task_prompt(task: str, text: str | None = None) -> str:
    """A request's task (and, for `custom`, its prompt) -> the text the user turn holds after the
    page. Raises ValueError naming the tasks and what each takes."""
    if task not in PROMPTS:
        raise ValueError(f"unknown GLM-OCR task {task!r} (tasks: {', '.join(TASKS)})")
    fixed = PROMPTS[task]
    if fixed is None:
        if not text or not text.strip():
            raise ValueError("GLM-OCR task custom needs the prompt to send with the page (e.g. an information "
                             "extraction instruction with its JSON schema)")
        return text
    if text:
        raise ValueError(f"GLM-OCR task {task} has its own prompt ({fixed!r}); send prompt only with task custom")
    return fixed
