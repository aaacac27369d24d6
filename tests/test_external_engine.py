"""benchmarks/external_engine.py's figures from token ids, and its clear refusal without .venv-ov
(OpenVINO itself is measured by running the script: `make ov-env` is not part of `make test`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("external_engine", REPO / "benchmarks" / "external_engine.py")
external_engine = importlib.util.module_from_spec(spec)
spec.loader.exec_module(external_engine)


def test_agreement_counts_identical_rows_and_the_tokens_before_each_first_difference():
    reference = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9]]
    other = [[1, 2, 3, 4], [5, 6, 0, 8], [9]]
    same, prefix = external_engine.agreement(reference, other)
    assert same == 1 / 3
    assert prefix == (4 + 2 + 1) / 10  # a row cut short agrees up to its end


def test_refresh_is_the_swap_and_what_it_adds_to_the_next_call():
    calls, clock = [], {"first": 0.2}

    def first_tokens():
        calls.append("first")
        time.sleep(clock["first"])
        clock["first"] = 0.0  # the call after the swap is faster: no negative cost

    seconds = external_engine.refresh_seconds(lambda: (calls.append("swap"), time.sleep(0.1)), first_tokens)
    assert calls == ["first", "swap", "first"] and 0.1 <= seconds < 0.2


def test_without_its_venv_the_script_says_how_to_make_it(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "external_engine.py"), "--ov-venv", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "make ov-env" in result.stderr
