"""The stage table is consistent: every function takes exactly what its entry declares."""

from __future__ import annotations

import inspect

from populora_core.rundir.artifacts import SCHEMAS
from populora_core.stages import runner, table


def test_each_stage_function_takes_its_declared_inputs_and_needs_by_keyword():
    for stage in table.TABLE:
        params = inspect.signature(stage.fn).parameters
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values()), stage.name
        assert set(params) == {*stage.inputs, *stage.needs, "config", "generation"}, stage.name


def test_inputs_come_from_the_run_or_from_earlier_stages_and_every_artifact_has_one_writer():
    written: list[str] = []
    for stage in table.TABLE:
        for name in stage.inputs:
            assert name in runner.INPUTS or name in written, (stage.name, name)
        assert set(stage.dirs) <= set(stage.inputs) and set(stage.dirs) <= set(runner.INPUTS), stage.name
        written += stage.outputs
    assert sorted(written) == sorted(SCHEMAS)


def test_lookups_name_the_valid_choices():
    assert table.get_stage("reward").fn.__name__ == "reward"
    assert table.stage_of("ratings").name == "rate"
    try:
        table.get_stage("rewrad")
    except KeyError as exc:
        assert "pair, propose" in str(exc)
    else:
        raise AssertionError("an unknown stage must raise")


def test_reading_the_table_and_the_cli_help_import_no_torch():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from populora_core.stages.table import TABLE, get_stage\n"
        "from cli.main import build_parser\n"
        "build_parser()\n"
        "assert [s.name for s in TABLE][0] == 'pair'\n"
        "assert 'torch' not in sys.modules, 'the stage table imported torch'\n"
        "assert get_stage('update').fn.__name__ == 'update' and 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
