"""Robot-loop isolation: the env_configs keys parse and refuse bad values naming the field, affinity and
priority take effect in the thread that applies them (or the refusal names the setting and the fix), no
full garbage collection runs inside a step, and a late step is logged with the phase that made it late."""

from __future__ import annotations

import gc
import os
import threading
import warnings
from dataclasses import replace

import pytest

from rlhw.config import load_config_dict
from rlhw.config.isolation import LoopIsolation
from rlhw.errors import ConfigError
from rlhw.rl.loop_health import LoopTimer
from rlhw.runtime import isolation
from rlhw.runtime.isolation import (
    GcGuard,
    OsScheduling,
    apply_learner_threads,
    apply_loop_isolation,
    call_with_loop_isolation,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL_ARM_CONFIGS = ("configs/franky_sim.yaml", "configs/workstation_franka.yaml", "configs/franka_insert.yaml")


@pytest.fixture(autouse=True)
def fresh_process_warnings():
    """Each test starts as a fresh process would: no refusal said yet."""
    isolation._said.clear()
    yield
    isolation._said.clear()


def _refuse(*_):
    raise PermissionError(1, "Operation not permitted")


def cluster(*env_configs, groups=None):
    groups = groups or [{"label": "robot", "node_ranks": 0, "env_configs": list(env_configs)}]
    return load_config_dict({"cluster": {"num_nodes": 1, "node_groups": groups}}).cluster


def err(*env_configs, groups=None) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        cluster(*env_configs, groups=groups)
    return e.value


def in_thread(fn):
    """Run ``fn`` in a fresh thread (Linux applies affinity and scheduling per thread) and return its result."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=30)
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_isolation_keys_of_an_env_config_reach_the_node():
    c = cluster({"node_ranks": 0, "loop_cpus": "0", "loop_priority": {"realtime": 80}, "learner_threads": 2})
    iso = c.node_env(0).isolation
    assert iso.loop_cpus == (0,) and iso.loop_priority.realtime == 80 and iso.learner_threads == 2


def test_a_node_without_isolation_keys_gets_the_os_defaults():
    assert cluster({"node_ranks": 0}).node_env(0).isolation.is_empty()


@pytest.mark.parametrize(
    "entry, field, words",
    [
        ({"loop_cpus": "2-x"}, "loop_cpus", "CPU"),
        ({"loop_cpus": "3,3"}, "loop_cpus", "twice"),
        ({"loop_priority": {"realtime": 120}}, "loop_priority.realtime", "1..99"),
        ({"loop_priority": {"nice": -40}}, "loop_priority.nice", "-20..19"),
        ({"loop_priority": {"realtime": 80, "nice": -5}}, "loop_priority", "exactly one"),
        ({"loop_priority": {"fifo": 80}}, "loop_priority.fifo", ""),
        ({"learner_threads": 0}, "learner_threads", "1"),
    ],
)
def test_bad_isolation_values_are_refused_naming_the_field(entry, field, words):
    e = err({"node_ranks": 0, **entry})
    assert e.path.startswith(f"cluster.node_groups[0].env_configs[0].{field.split('.')[0]}"), e.path
    assert words in e.message


def test_two_groups_giving_one_node_different_loop_cpus_is_an_error():
    groups = [
        {"label": "gpu", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "loop_cpus": "0"}]},
        {"label": "robot", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "loop_cpus": "1"}]},
    ]
    e = err(groups=groups)
    assert e.path == "cluster.node_groups[1].env_configs[0].loop_cpus"
    assert "node_groups[0].env_configs[0]" in e.message


def test_loop_cpus_take_effect_in_the_thread_that_applies_them():
    cpu = min(os.sched_getaffinity(0))
    record = in_thread(lambda: (apply_loop_isolation(LoopIsolation(loop_cpus=str(cpu))), os.sched_getaffinity(0)))
    assert record[0]["affinity"] == [cpu]
    assert record[1] == {cpu}


def test_a_cpu_the_node_does_not_have_is_refused_naming_the_setting():
    oscalls = replace(OsScheduling(), node_cpus=lambda: {0, 1})
    with pytest.raises(ConfigError) as e:
        apply_loop_isolation(LoopIsolation(loop_cpus="5"), oscalls)
    assert e.value.path.endswith("loop_cpus") and "no CPU [5]" in e.value.message


def test_realtime_priority_takes_effect_where_the_os_allows_it():
    """As root (or with CAP_SYS_NICE) SCHED_FIFO is read back; elsewhere the refusal is recorded."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the unprivileged path warns; checked below
        record = in_thread(lambda: apply_loop_isolation(LoopIsolation(loop_priority={"realtime": 10})))
    if "refused" not in record:
        assert record == {"affinity": sorted(os.sched_getaffinity(0)), "policy": "SCHED_FIFO", "priority": 10}
    else:
        assert os.geteuid() != 0 and record["policy"] == "SCHED_OTHER"


def test_nice_takes_effect_in_the_thread_that_applies_it():
    record = in_thread(lambda: apply_loop_isolation(LoopIsolation(loop_priority={"nice": 5})))
    assert record["policy"] == "SCHED_OTHER" and record["nice"] == 5


def test_threads_started_by_a_call_under_the_loops_isolation_keep_it_and_the_caller_keeps_its_own():
    """How an env worker opens a served arm's client: grpc's threads, started by the opening, carry the loop's
    scheduling (here nice 5, which needs no privilege), and the caller's thread is left as it was."""
    caller_nice = os.getpriority(os.PRIO_PROCESS, 0)

    def open_something() -> int:
        started: list[int] = []
        worker = threading.Thread(target=lambda: started.append(os.getpriority(os.PRIO_PROCESS, 0)))
        worker.start()
        worker.join(timeout=10)
        return started[0]

    assert call_with_loop_isolation(LoopIsolation(loop_priority={"nice": 5}), open_something) == 5
    assert os.getpriority(os.PRIO_PROCESS, 0) == caller_nice


def test_a_failure_of_the_call_under_the_loops_isolation_is_raised_on_the_calling_thread():
    def refuse() -> None:
        raise ConfigError("env.sim", "is not a simulator")

    with pytest.raises(ConfigError, match="env.sim"):
        call_with_loop_isolation(LoopIsolation(), refuse)


def test_a_refused_priority_warns_naming_the_setting_and_the_fix():
    oscalls = replace(OsScheduling(), sched_setscheduler=_refuse)
    with pytest.warns(RuntimeWarning, match="loop_priority"):
        record = in_thread(lambda: apply_loop_isolation(LoopIsolation(loop_priority={"realtime": 80}), oscalls))
    assert "loop_priority {realtime: 80} refused" in record["refused"]
    assert "CAP_SYS_NICE" in record["refused"] and "rtprio" in record["refused"]
    assert record["policy"] == "SCHED_OTHER"  # read back: what really runs, not what was asked


def test_learner_threads_set_torchs_thread_count():
    import torch

    before = torch.get_num_threads()
    try:
        assert apply_learner_threads(LoopIsolation(learner_threads=2)) == 2
        assert apply_learner_threads(LoopIsolation(), default=1) == 1
    finally:
        torch.set_num_threads(before)


def test_no_full_collection_runs_inside_a_step_under_allocation_pressure():
    """200 'steps' that each build reference cycles (which only a collection frees); gen-2 collections are
    counted with gc.callbacks while a step runs, and between episodes, where GcGuard.idle runs them."""
    inside = {"step": False, "full_in_step": 0, "full_between": 0}

    def on_gc(phase, info):
        if phase == "start" and info["generation"] == 2:
            inside["full_in_step" if inside["step"] else "full_between"] += 1

    guard = GcGuard()
    gc.callbacks.append(on_gc)
    guard.start()
    try:
        for _ in range(4):
            guard.idle()
            for _ in range(50):
                inside["step"] = True
                for _ in range(2000):
                    a, b = [], []
                    a.append(b), b.append(a)
                inside["step"] = False
    finally:
        guard.stop()
        gc.callbacks.remove(on_gc)
    assert inside["full_in_step"] == 0
    assert inside["full_between"] >= 4 and guard.full_collections == 4


def test_without_the_guard_the_same_pressure_does_collect_inside_steps():
    """The baseline for the test above: the interpreter's own schedule starts full collections mid-step."""
    counted = {"full": 0}

    def on_gc(phase, info):
        counted["full"] += phase == "start" and info["generation"] == 2

    gc.callbacks.append(on_gc)
    try:
        for _ in range(200 * 2000 // 100):
            for _ in range(100):
                a, b = [], []
                a.append(b), b.append(a)
    finally:
        gc.callbacks.remove(on_gc)
    assert counted["full"] > 0


def test_a_late_step_is_logged_with_the_phase_that_made_it_late(caplog):
    now = {"t": 0.0}
    timer = LoopTimer(clock=lambda: now["t"])
    timer.episode_started()
    now["t"] = 0.150  # the policy took 150 ms to answer
    timer.actions_received()
    now["t"] = 0.160
    with caplog.at_level("WARNING"):
        timer.stepped({"env.command": 0.002, "env.late": 0.060, "env.wait": 0.0, "env.observe": 0.005})
    summary = timer.summary(1)
    assert summary["late_steps"] == 1 and summary["late_by_phase"] == {"obs_to_action": 1}
    assert summary["late_recent"][0]["phase"] == "obs_to_action"
    assert "late by 60.0 ms, mostly obs_to_action" in caplog.text


@pytest.mark.parametrize("path", REAL_ARM_CONFIGS)
def test_real_arm_configs_default_to_the_policy_next_to_the_arm_and_a_fifo_80_loop(path):
    from rlhw.config import load_config

    config = load_config(os.path.join(ROOT, path))
    assert config.train.policy_at == "env"
    assert config.cluster.node_env(0).isolation.loop_priority.realtime == 80  # node 0 drives the arm


def test_where_the_os_refuses_real_time_the_loop_falls_back_and_says_so_once():
    from rlhw.config import load_config

    iso = load_config(os.path.join(ROOT, "configs/franky_sim.yaml")).cluster.node_env(0).isolation
    oscalls = replace(OsScheduling(), sched_setscheduler=_refuse)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")  # count every warning issued, not Python's own once-per-place
        records = [in_thread(lambda: apply_loop_isolation(iso, oscalls)) for _ in range(3)]  # e.g. env restarts
    refusals = [w for w in said if issubclass(w.category, RuntimeWarning) and "loop_priority" in str(w.message)]
    assert len(refusals) == 1, [str(w.message) for w in said]
    assert "{realtime: 80} refused by the OS" in str(refusals[0].message)
    assert "falling back" in str(refusals[0].message) and "CAP_SYS_NICE" in str(refusals[0].message)
    for record in records:  # every loop start still records it for run.json, with what really runs
        assert "refused" in record and record["policy"] == "SCHED_OTHER"


def test_the_local_runner_takes_the_loops_cpus_and_a_nice_priority_but_never_a_realtime_one():
    """Its one thread also runs the learner's updates: at SCHED_FIFO it would hold a core through each update."""
    from rlhw.rl.local import one_thread_isolation

    realtime = LoopIsolation(loop_cpus="0", loop_priority={"realtime": 80})
    taken, why = one_thread_isolation(realtime)
    assert taken.loop_priority is None and taken.loop_cpus == (0,)
    assert "train.runner=pipeline" in why and "realtime: 80" in why
    nice = LoopIsolation(loop_priority={"nice": 5})
    assert one_thread_isolation(nice) == (nice, None)
