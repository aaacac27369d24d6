"""LiveCodeBench code generation, from ``<data_dir>/livecodebench/test*.jsonl`` as the Hugging
Face dataset ``livecodebench/code_generation_lite`` publishes them (keep only the files of the
release window wanted).

A record's ``private_test_cases`` are a JSON string in older releases, else base64 of zlib of
a pickle of that JSON string: they are unpickled by an Unpickler that resolves no global at
all, so a crafted file can build only plain values (str, bytes, numbers, containers), never
call anything; the result must be a str or bytes holding JSON. The prompt is lcb_runner's
generic one; judging is lcb_runner's (``harness/lcb.py``), in the sandbox.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import zlib
from pathlib import Path

from populora_core.evaluation.harness_calls import harness_call, program_prelude
from populora_core.evaluation.items import EvalItem, chat, fenced, read_jsonl
from populora_core.harness import lcb

LCB_SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests."
)
_WITH_STARTER = "You will use the following starter code to write the solution to the problem and enclose your code within delimiters."  # noqa: E501
_WITHOUT_STARTER = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the "
    "sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, "
    "it reads the inputs, runs the algorithm and writes output to STDOUT."
)
MAX_DECOMPRESSED = 1 << 30
"""Largest private-test payload accepted (bytes after zlib), against decompression bombs."""


class _PlainValues(pickle.Unpickler):
    """Unpickles plain values only: any global (class, function) is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing global {module}.{name} in LiveCodeBench test data")


def decode_private_tests(text: str) -> list[dict]:
    """The private test cases from either published encoding (plain JSON, or
    base64(zlib(pickle(JSON string)))), without ever calling code from the data."""
    try:
        tests = json.loads(text)
    except json.JSONDecodeError:
        packed = base64.b64decode(text.encode("ascii"), validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, MAX_DECOMPRESSED)
        if inflater.unconsumed_tail:
            raise ValueError(f"private tests larger than {MAX_DECOMPRESSED} bytes") from None
        value = _PlainValues(io.BytesIO(raw)).load()
        if not isinstance(value, (str, bytes)):
            raise ValueError(f"private tests unpickle to {type(value).__name__}, not a JSON string") from None
        tests = json.loads(value)
    if not isinstance(tests, list):
        raise ValueError("private tests are not a list")
    return tests


def _prompt(r: dict) -> tuple[dict, ...]:
    form, code = (_WITH_STARTER, r["starter_code"]) if r["starter_code"] else (_WITHOUT_STARTER, "# YOUR CODE HERE")
    user = f"### Question:\n{r['question_content']}\n\n### Format: {form}\n```python\n{code}\n```\n\n"
    return chat(LCB_SYSTEM, user + "### Answer: (use the provided format with backticks)\n\n")


def problem_item(r: dict) -> EvalItem:
    """One published record as an item (public tests first, then the private ones)."""
    tests = json.loads(r["public_test_cases"]) + decode_private_tests(r["private_test_cases"])
    metadata = json.loads(r["metadata"]) if r.get("metadata") else {}
    if metadata.get("func_name") is None and any(t["testtype"] == "functional" for t in tests):
        raise ValueError(f"LiveCodeBench problem {r['question_id']}: functional tests but no metadata func_name")
    data = {
        "tests_json": json.dumps([[t["input"], t["output"]] for t in tests]),
        "fn_name": metadata.get("func_name"),  # as lcb_runner: a func_name makes the problem call-based
        "timeout_s": min(600.0, 10.0 + lcb.TEST_SECONDS * len(tests)),
        "platform": r["platform"],
        "difficulty": r["difficulty"],
        "contest_date": r["contest_date"],
    }
    return EvalItem("livecodebench", r["question_id"], _prompt(r), "livecodebench", data)


def _file_order(path: Path) -> int:
    number = re.search(r"(\d+)\.jsonl$", path.name)
    return int(number.group(1)) if number else 1


def load_livecodebench(data_dir: Path) -> list[EvalItem]:
    files = sorted((Path(data_dir) / "livecodebench").glob("*.jsonl"), key=_file_order)
    if not files:
        raise FileNotFoundError(
            f"no LiveCodeBench files in {Path(data_dir) / 'livecodebench'}: put code_generation_lite's "
            "test*.jsonl there (huggingface.co/datasets/livecodebench/code_generation_lite)"
        )
    return [problem_item(r) for f in files for r in read_jsonl(f)]


def check_livecodebench(item: EvalItem, completion: str) -> tuple[str, str] | None:
    """(program, expression) that runs lcb_runner's grading on the answer's last code block."""
    code = fenced(completion, "python", "py", "")
    if code is None:
        return None
    d = item.data
    check = harness_call(lcb.check, "_candidate", repr(code), repr(d["tests_json"]), repr(d["fn_name"]))
    return program_prelude(lcb.ANSWER_SOURCE) + check, "True"
