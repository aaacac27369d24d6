"""The trained protocol (evaluation/items.py): the code benchmarks asked in the training
reply format, math unchanged, an unknown protocol refused."""

from __future__ import annotations

import pytest

from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.items import with_protocol
from populora_core.problems.prompts import ASSISTANT_PREFILL, STOP_STRINGS, STUDENT_FORMAT, SYSTEM
from tests.core.evaluation.conftest import DATA

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")


@pytest.mark.parametrize("benchmark", ["humanevalplus", "mbppplus", "cruxeval_o"])
def test_code_items_are_asked_in_the_training_format(benchmark):
    item = load_benchmark(benchmark, DATA, 1)[0]
    trained = with_protocol(item, "trained")
    assert trained.messages[0] == {"role": "system", "content": SYSTEM}
    user = trained.messages[1]["content"]
    assert user.startswith(STUDENT_FORMAT) and user.endswith(item.messages[1]["content"])
    assert (trained.prefill, trained.stop) == (ASSISTANT_PREFILL, STOP_STRINGS)
    assert (trained.data, trained.kind) == (item.data, item.kind)  # judged the same way
    assert with_protocol(item, "standard") is item and (item.prefill, item.stop) == ("", ())


def test_math_is_asked_the_same_way_and_an_unknown_protocol_is_refused():
    item = load_benchmark("gsm8k", DATA, 1)[0]
    assert with_protocol(item, "trained") is item
    with pytest.raises(ValueError, match="protocols: standard, trained"):
        with_protocol(item, "chat")
