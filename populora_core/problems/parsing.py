"""Parsing of completions. Total functions: any text gives a value or a FormatError.

Shape expected from the model (Absolute Zero Reasoner's)::

    <think> ... </think>
    <answer>
    ```python
    def f(...):
        ...
    ```
    ```input
    "Hello world", 3
    ```
    </answer>

Rules, chosen so that a stop string that was cut off still parses:
- the answer is the text after the LAST ``<answer>`` up to the next
  ``</answer>`` or, if none follows, to the end of the text;
- a fenced block is the text between a ```` ```tag ```` line and the next
  ```` ``` ````; an unterminated block runs to the end of the answer;
- induction proposals carry several ```` ```input ```` blocks and one
  ```` ```message ```` block.

Only ``str.find`` is used (no regular expressions), so cost is linear in the
length of the text, which is capped.
"""

from __future__ import annotations

import ast

from populora_core.problems.types import FormatError, Proposal, TaskType

MAX_COMPLETION_CHARS = 100_000
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
FENCE = "```"


def extract_answer(text: object) -> str | FormatError:
    """The body of the last ``<answer>`` block, stripped."""
    if not isinstance(text, str):
        return FormatError("not_text", type(text).__name__)
    if len(text) > MAX_COMPLETION_CHARS:
        return FormatError("too_long", f"{len(text)} characters")
    if not text.strip():
        return FormatError("empty")
    start = text.rfind(ANSWER_OPEN)
    if start < 0:
        return FormatError("no_answer", "no <answer> tag")
    body = text[start + len(ANSWER_OPEN) :]
    end = body.find(ANSWER_CLOSE)
    if end >= 0:
        body = body[:end]
    body = body.strip()
    if not body:
        return FormatError("empty_answer")
    return body


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block in ``text`` as (tag, content), in order."""
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        start = text.find(FENCE, pos)
        if start < 0:
            return blocks
        line_end = text.find("\n", start)
        if line_end < 0:
            return blocks
        tag = text[start + len(FENCE) : line_end].strip().lower()
        end = text.find(FENCE, line_end + 1)
        content = text[line_end + 1 :] if end < 0 else text[line_end + 1 : end]
        blocks.append((tag, content.strip("\n")))
        if end < 0:
            return blocks
        pos = end + len(FENCE)


def _blocks_tagged(blocks: list[tuple[str, str]], *tags: str) -> list[str]:
    return [content for tag, content in blocks if tag in tags]


def parse_proposal(task_type: TaskType, text: object) -> Proposal | FormatError:
    """A teacher completion → Proposal (program, inputs, message) or FormatError."""
    body = extract_answer(text)
    if isinstance(body, FormatError):
        return body
    blocks = fenced_blocks(body)
    programs = _blocks_tagged(blocks, "python", "py")
    if not programs or not programs[0].strip():
        return FormatError("no_code_block", "no ```python block in the answer")
    inputs = tuple(s.strip() for s in _blocks_tagged(blocks, "input") if s.strip())
    if not inputs:
        return FormatError("no_input_block", "no ```input block in the answer")
    if task_type != "code_f":
        inputs = inputs[:1]
    messages = _blocks_tagged(blocks, "message")
    message = messages[0].strip() if messages else ""
    return Proposal(program=programs[0], inputs=inputs, message=message)


def parse_answer(task_type: TaskType, text: object) -> str | FormatError:
    """A student completion → the answer payload, or FormatError.

    - ``code_o``: the predicted output (a Python literal), fenced or bare;
    - ``code_i``: the input (an argument list), fenced or bare;
    - ``code_f``: the program, which must be in a ```python block.
    """
    body = extract_answer(text)
    if isinstance(body, FormatError):
        return body
    blocks = fenced_blocks(body)
    if task_type == "code_f":
        programs = _blocks_tagged(blocks, "python", "py")
        if not programs or not programs[0].strip():
            return FormatError("no_code_block", "no ```python block in the answer")
        return programs[0]
    if blocks:
        wanted = ("output", "", "python") if task_type == "code_o" else ("input", "", "python")
        chosen = _blocks_tagged(blocks, *wanted) or [blocks[0][1]]
        payload = chosen[0].strip()
    else:
        payload = body
    if not payload:
        return FormatError("empty_answer")
    return payload


def check_call_arguments(arguments: str, name: str = "f") -> str | None:
    """None when ``arguments`` is exactly an argument list of ``name(...)``,
    else why not. Stops text such as ``1), print(2`` from escaping the call."""
    try:
        tree = ast.parse(f"{name}({arguments}\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"not an argument list: {type(exc).__name__}"
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == name):
        return "not a single call's argument list"
    if not call.args and not call.keywords:
        return "empty argument list"
    return None
