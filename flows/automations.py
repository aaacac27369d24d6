"""The Prefect server's automation that tells the truth about a run whose process died.

Train and generation flow runs send a heartbeat every ``HEARTBEAT_S`` seconds while
their process lives (``heartbeats`` under `populora train`, `resume` and `replay`; the
deployments set ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` in prefect.yaml). A process
killed outright (SIGKILL, out of memory, a lost machine) reports nothing, and its flow
runs would stay Running until a resume crashed them (``tasks.orphans``). This
automation, registered on the server by `make server` and `make deploy` (``python -m
flows.automations``), sets each such flow run Crashed once no heartbeat and no final
state came for ``within_s`` seconds after its last heartbeat. It matches PopuLoRA's
flows only; a run that has ended is left as it is (Prefect refuses to move a final state).

    python -m flows.automations [--within SECONDS] [--remove]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime

from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

HEARTBEAT_S = 30
"""Seconds between two heartbeats of a flow run (Prefect's minimum)."""
CRASH_AFTER_S = 3 * HEARTBEAT_S
"""Silence after a heartbeat that marks a flow run's process dead: three missed beats."""
NAME = "populora: crash flow runs whose process died"
FLOWS = ("populora-train", "populora-generation")
"""The flows that send heartbeats (``heartbeats``)."""
ENDS = ("Completed", "Failed", "Cancelled", "Crashed")


def heartbeats() -> contextlib.AbstractContextManager:
    """Settings under which the flow runs started inside send heartbeats every
    ``HEARTBEAT_S`` seconds, whatever Prefect's setting says (its default, 180 s, is longer
    than the automation waits: it would crash runs that are alive)."""
    return temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: HEARTBEAT_S})


def crash_automation(within_s: float = CRASH_AFTER_S):
    """The automation (not yet on a server): a proactive trigger per flow run of ``FLOWS``
    that fires when, after a heartbeat, neither another heartbeat nor a final state comes
    within ``within_s`` seconds; its action sets the flow run Crashed."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    if within_s <= HEARTBEAT_S:
        raise ValueError(f"within_s ({within_s}) must exceed the heartbeat interval ({HEARTBEAT_S} s)")
    heartbeat = "prefect.flow-run.heartbeat"
    return Automation(
        name=NAME,
        description=f"Sets a PopuLoRA flow run Crashed when its process stopped sending heartbeats for {within_s:g} s.",
        trigger=EventTrigger(
            after={heartbeat},
            expect={heartbeat, *(f"prefect.flow-run.{end}" for end in ENDS)},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification(
                {"prefect.resource.role": "flow", "prefect.resource.name": list(FLOWS)}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=datetime.timedelta(seconds=within_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"No heartbeat for {within_s:g} s: the process running this flow died "
                "(populora resume continues the run where it stopped).",
            )
        ],
    )


def remove() -> int:
    """Deletes every automation named ``NAME`` from the server; returns how many."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(name=NAME)
        for automation in found:
            client.delete_automation(automation.id)
    return len(found)


def register(within_s: float = CRASH_AFTER_S):
    """The automation on the server ``PREFECT_API_URL`` names, exactly once (an earlier one
    of the same name is replaced); returns it."""
    automation = crash_automation(within_s)
    remove()
    return automation.create()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.automations", description=__doc__.split("\n\n")[0])
    parser.add_argument("--within", type=float, default=CRASH_AFTER_S, help="seconds of silence that mean dead")
    parser.add_argument("--remove", action="store_true", help="delete the automation instead")
    args = parser.parse_args(argv)
    if args.remove:
        print(f"removed {remove()} automation(s) named {NAME!r}")
        return 0
    automation = register(args.within)
    print(f"automation {NAME!r} ({automation.id}): a flow run silent for {args.within:g} s is set Crashed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
