"""What the benchmarks that time flows share (not a benchmark itself)."""

from __future__ import annotations

from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings


def subflows_without_heartbeat():
    """Settings under which flows start no heartbeat thread, for benchmarks that time the
    orchestration (Prefect joins a flow's heartbeat thread for up to a second when the flow
    ends). Enter it once around the loop (building the settings costs ~0.15 s). Runs a user
    starts beat (``flows.automations.heartbeats``)."""
    return temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})
