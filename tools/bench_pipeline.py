"""Pipeline throughput against an in-process loop, and real-robot loop health against franky-sim.

    .venv/bin/python tools/bench_pipeline.py [--seconds 30] [--num-envs 1,8] [--lanes direct,next-to-arm]
        [--parts throughput,latency,phases,across-nodes,franky,franky-loaded] [--franky-steps 300] [--franky-hz 10,30]
        [--realtime 0,80] [--sim-realtime 90]

Every figure is measured for each obs->action path in the same run: ``direct``, the step lane (the TCP stream
between env and rollout worker), and ``next-to-arm`` (``train.policy_at=env``: the env worker runs the policy).
The ``channels`` rows of earlier runs (the relay through two channel actors, ``train.step_lane: channels``) are
history: that lane is gone (issue 37: a benchmark's baseline is no product mode).

Part 1 (sim only, one run, same machine, same env and policy): env steps/s of
  - an in-process loop: `make_env` (MuJoCo reach) + the SAC policy network in one Python loop;
  - the full pipeline (env worker stepping the simulator in its own process, as it does a simulator with no
    arm placed -> step lane -> rollout worker with the same policy network -> step lane; or the env worker
    acting itself)
    with 1 and with 2 env workers, each serving ``env.num_envs`` instances for every value of ``--num-envs``
    (1 = one arm per env worker; more = simulated instances stepped together, one message per env-worker
    step), no training running.
Part 2 (latency): observation-to-action latency on one node (env worker: observation in hand -> action back
from the rollout worker) with the mock arm at 30 Hz, proprio only and with two 128x128x3 camera images.
Part 2a (phases): the direct lane's round trip alone (an echo process answering at once), interleaved step by
step with the pickle framing it replaced (the baseline: tools/bench_lane.py), the same through a Ray Compiled
Graph (the other way to a direct lane), the policy's forward pass alone, and the wire's costs per step in
process (pickle vs codec, and the frame tags), proprio only and with the two images.
Part 2b (across-nodes): the same with the env worker and its rollout worker on two raylets.
Part 3 (franky, franky-loaded): configs/franky_sim.yaml (the real franka driver against franky-sim) through
the pipeline at 10 and 30 Hz with the policy acting, quiet and with the learner training flat out on the same
cores: deadline hit rate (steps that started inside their control period), obs->action p50/p99.
``--realtime 0,80`` repeats the latency and franky rows with node 0's robot loop at SCHED_FIFO 80
(``env_configs`` ``loop_priority``: the env worker's and rollout worker's loop threads and the env server
child); 0 = no isolation.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


#: The obs->action paths compared, as config overrides.
LANES = {
    "direct": [],
    "next-to-arm": ["train.policy_at=env"],
}


def in_process(config, seconds: float) -> float:
    from rlhw.rl.local import make_agent
    from rlhw.robot import make_env

    env = make_env(config, 0)
    agent = make_agent(config, env.spec, "cpu")
    obs = env.reset(seed=0).obs  # a batch of 1, as the policy takes it
    steps, t0 = 0, None
    try:
        while True:
            action = agent.act(obs)[0]
            step = env.step(action)  # its observations are a batch of 1, as the policy takes them
            obs = step.obs
            if step.ended[0]:
                obs = env.reset().obs
            steps += 1
            if steps == 50:
                t0 = time.perf_counter()  # after warm-up
            if t0 is not None and time.perf_counter() - t0 >= seconds:
                return (steps - 50) / (time.perf_counter() - t0)
    finally:
        env.close()


def pipeline_rate(
    config, seconds: float, address: str | None = None, learner_load: bool = False
) -> tuple[float, list[dict]]:
    """Env steps/s of a pipeline run with the policy acting, and every env worker's loop health; on the Ray
    cluster at ``address`` (else a local one). ``learner_load``: the learner group trains flat out meanwhile
    (50 updates per call, back to back, on the transitions the run collects; weights go to the policy every
    ``train.weights_every_updates``), else nothing trains."""
    from rlhw.rl.pipeline.launch import Pipeline
    from rlhw.rl.rundir import RunDir
    from rlhw.runtime.cluster import Cluster

    with tempfile.TemporaryDirectory() as tmp:
        pipe = Pipeline(config, RunDir(tmp), cluster=Cluster(config, address=address, probe_hardware=False))
        stop, updates = threading.Event(), [0]

        def train_flat_out() -> None:
            while not stop.is_set():
                done = pipe.learners.train(50).wait(600)[0].updates
                updates[0] += done
                if not done:
                    stop.wait(0.05)  # not enough data yet

        learner = threading.Thread(target=train_flat_out, daemon=True)
        try:
            pipe.acting.set_exploration(False).wait(60)  # the policy network acts, as in the loop
            pipe.envs.run_async().wait(60)
            if learner_load:
                learner.start()
            deadline = time.monotonic() + 240  # warm-up: the first resets (a real arm moves home) and 20 steps
            while sum(p.train_steps for p in pipe.poll_envs()) < 20 and time.monotonic() < deadline:
                time.sleep(0.5)
            s0 = sum(p.train_steps for p in pipe.poll_envs())
            t0 = time.perf_counter()
            time.sleep(seconds)
            s1 = sum(p.train_steps for p in pipe.poll_envs())
            rate = (s1 - s0) / (time.perf_counter() - t0)
            health = pipe.envs.loop_health().wait(60)
            if learner_load:
                stop.set()
                learner.join(120)
                for h in health:
                    h["learner_updates"] = updates[0]
        finally:
            stop.set()
            pipe.close()
    return rate, health


def lane_rows(configs, lanes: list[str], num_envs: list[int], seconds: float, loop: float) -> list[tuple]:
    """Throughput rows: every lane, for 1 and 2 env workers of each ``env.num_envs``, one run each."""
    rows = []
    for k in num_envs:
        for lane in lanes:
            for n, cfg in zip((1, 2), configs(k, LANES[lane])):
                rate, health = pipeline_rate(cfg, seconds)
                p50 = max(h["latency_p50_ms"] for h in health)
                p99 = max(h["latency_p99_ms"] for h in health)
                name = f"{lane}: {n} env worker{'s' if n > 1 else ''}" + (f" x {k} instances" if k > 1 else "")
                rows.append((name, rate, rate / loop, f"{p50:.2f} / {p99:.2f}"))
    return rows


def realtime_loop(priority: int, group: int | None) -> list[str]:
    """Overrides that give node 0's robot loop SCHED_FIFO ``priority`` (env_configs ``loop_priority``) through
    node group ``group``, or through a new group when the config has none (None); 0 = no isolation."""
    if not priority:
        return []
    env_configs = f"[{{node_ranks: 0, loop_priority: {{realtime: {priority}}}}}]"
    if group is None:
        return [f"cluster.node_groups=[{{label: loop, node_ranks: 0, env_configs: {env_configs}}}]"]
    return [f"cluster.node_groups[{group}].env_configs={env_configs}"]


def lane_name(lane: str, priority: int) -> str:
    return f"{lane} FIFO {priority}" if priority else lane


def latency_rows(lanes: list[str], seconds: float, realtime: list[int]) -> list[tuple]:
    """obs->action on one node with the mock arm: proprio only, and with two 128x128x3 camera images, for every
    lane and robot-loop priority (``realtime``, as `realtime_loop`)."""
    from rlhw.config import load_config

    rows = []
    for images in (False, True):
        for priority in realtime:
            for lane in lanes:
                cfg = load_config(
                    ROOT / "configs/sim_reach.yaml",
                    [
                        "env.sim=mock",
                        f"env.images={str(images).lower()}",
                        "env.sim_cameras=[wrist,front]",
                        "env.control_hz=30",
                        "train.progress=false",
                        "train.learning_starts=100000000",
                        "train.record_episodes=false",
                        *LANES[lane],
                        *realtime_loop(priority, None),
                    ],
                )
                _, health = pipeline_rate(cfg, seconds)
                h = health[0]
                what = "2x128x128x3 images + proprio" if images else "proprio only"
                rows.append(
                    (
                        f"{lane_name(lane, priority)}: mock arm, {what}",
                        h["steps"],
                        h["latency_p50_ms"],
                        h["latency_p99_ms"],
                    )
                )
    return rows


def across_nodes_rows(lanes: list[str], seconds: float) -> list[tuple]:
    """obs->action with the env worker on one raylet and its rollout worker on another (2 raylets here)."""
    import ray
    from ray.cluster_utils import Cluster as RayCluster

    from rlhw.config import load_config, load_config_dict

    ray.shutdown()
    rc = RayCluster()
    rows = []
    try:
        for rank in (0, 1):
            rc.add_node(num_cpus=2, labels={"rlhw.node_rank": str(rank)}, include_dashboard=False)
        ray.init(address=rc.address, namespace="rlhw", log_to_driver=False)
        for lane in lanes:
            cfg = load_config(
                ROOT / "configs/sim_reach.yaml",
                [
                    "cluster.num_nodes=2",
                    "env.sim=mock",
                    "env.control_hz=30",
                    "train.progress=false",
                    "train.learning_starts=100000000",
                    "train.record_episodes=false",
                    *LANES[lane],
                ],
            )
            data = cfg.model_dump(mode="json")
            data["cluster"]["component_placement"] = {
                "env": {"node_group": "node", "placement": "0"},
                "rollout,learner": {"node_group": "node", "placement": "1"},
            }
            _, health = pipeline_rate(load_config_dict(data), seconds, address=rc.address)
            h = health[0]
            where = (
                "env + policy on raylet 0, learner on raylet 1"
                if lane == "next-to-arm"
                else "env on raylet 0, rollout on raylet 1"
            )
            rows.append((f"{lane}: {where}", h["steps"], h["latency_p50_ms"], h["latency_p99_ms"]))
    finally:
        ray.shutdown()
        rc.shutdown()
    return rows


def p50_p99_ms(seconds: list[float]) -> tuple[float, float]:
    return float(np.percentile(seconds, 50) * 1e3), float(np.percentile(seconds, 99) * 1e3)


def mock_observation(images: bool):
    """The config, env spec and one observation (a batch of 1) of the mock arm, proprio only or with the two
    128x128x3 camera images: what the phase rows send."""
    from rlhw.config import load_config
    from rlhw.robot import make_env

    cfg = load_config(
        ROOT / "configs/sim_reach.yaml",
        ["env.sim=mock", f"env.images={str(images).lower()}", "env.sim_cameras=[wrist,front]"],
    )
    env = make_env(cfg, 0)
    try:
        return cfg, env.spec, dict(env.reset(seed=0).obs)
    finally:
        env.close()


def phase_rows(steps: int) -> list[tuple]:
    """obs->action phase by phase on one node: the direct lane's round trip alone (an echo process, no policy)
    interleaved step by step with the pickle framing it replaced (the baseline, `tools/bench_lane.py`), the
    policy's forward pass alone (the rollout worker's network, one thread, CPU), and the wire's costs per step
    in process (pickle, codec, tags)."""
    from rlhw.rl.acting import ActingPolicy
    from rlhw.rl.pipeline.messages import EnvStep, PolicyWeights
    from tools.bench_lane import LANE_NAMES, Lanes, round_trips, wire_cost_rows, with_transitions

    rows = []
    with Lanes() as ends:
        for images in (False, True):
            cfg, spec, obs = mock_observation(images)
            policy = ActingPolicy(spec, cfg.train.sac, torch.device("cpu"), seed=0)
            policy.load(PolicyWeights(0, {k: v.numpy() for k, v in policy.current[0].state_dict().items()}))
            policy.random_actions = False  # with weights (version 0), so the network acts
            msg = EnvStep(env=0, obs=obs, rows=(0,), evaluating=np.zeros(1, bool))
            trips: dict[str, list[float]] = {name: [] for name in ends}
            forwards = []
            for i in range(steps):
                trip = round_trips(ends, msg, i)
                t1 = time.perf_counter()
                assert policy.act(obs, np.zeros(1, bool)).versions[0] == 0
                t2 = time.perf_counter()
                if i >= 50:
                    for name, t in trip.items():
                        trips[name].append(t)
                    forwards.append(t2 - t1)
            what = "2x128x128x3 images + proprio" if images else "proprio only"
            rows += [
                (f"{LANE_NAMES[n]}, {what}", len(t), *p50_p99_ms(t)) for n, t in sorted(trips.items(), reverse=True)
            ]
            rows.append((f"policy forward alone (CPU, 1 thread), {what}", len(forwards), *p50_p99_ms(forwards)))
            rows += wire_cost_rows(msg, what, steps)
            if not images:
                rows += wire_cost_rows(with_transitions(obs), "proprio + transitions, 8 instances", steps)
    return rows


def compiled_graph_rows(steps: int) -> list[tuple]:
    """The other way to a direct lane, for comparison: the same `EnvStep` through a Ray Compiled Graph to an
    actor that answers at once (as `tools.bench_lane.echo_sealed` does) and back, proprio only and with the two images."""
    import ray
    from ray.dag import InputNode

    from rlhw.rl.pipeline.messages import Actions, EnvStep

    class Echo:
        def answer(self, msg: EnvStep) -> Actions:
            return Actions(np.zeros((msg.wanted, 7), np.float32), np.zeros(msg.wanted, np.int64))

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        for images in (False, True):
            msg = EnvStep(env=0, obs=mock_observation(images)[2], rows=(0,), evaluating=np.zeros(1, bool))
            echo = ray.remote(Echo).remote()
            with InputNode() as inp:
                dag = echo.answer.bind(inp)
            graph = dag.experimental_compile()
            trips = []
            try:
                for i in range(steps):
                    t0 = time.perf_counter()
                    ray.get(graph.execute(msg))
                    if i >= 50:
                        trips.append(time.perf_counter() - t0)
            finally:
                graph.teardown()
                ray.kill(echo)
            what = "2x128x128x3 images + proprio" if images else "proprio only"
            rows.append((f"Ray Compiled Graph round trip alone, {what}", len(trips), *p50_p99_ms(trips)))
    finally:
        if started:
            ray.shutdown()
    return rows


def robot_realtime(pid: int, priority: int) -> None:
    """Every thread of process ``pid`` (franky-sim: the stand-in for the robot's own controller, which on a
    real cell is a computer of its own) to SCHED_FIFO ``priority``, so the learner cannot slow the robot."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(priority))


def franky_rows(
    lanes: list[str], rates: list[float], steps: int, loaded: bool, realtime: list[int], sim_realtime: int = 0
) -> list[dict]:
    """configs/franky_sim.yaml through the pipeline for every lane, control rate and robot-loop priority
    (``realtime``: SCHED_FIFO priorities for node 0's ``loop_priority``, 0 = no isolation); ``loaded``: the learner
    trains flat out on the same cores meanwhile; ``sim_realtime``: franky-sim's threads at that SCHED_FIFO
    priority (0: left as started)."""
    from drivers.franky_sim import FrankySim
    from rlhw.config import load_config

    out = []
    with FrankySim(start_timeout_s=120) as sim:
        if sim_realtime:
            robot_realtime(sim.pid, sim_realtime)
        for hz in rates:
            for priority in realtime:
                for lane in lanes:
                    cfg = load_config(
                        ROOT / "configs/franky_sim.yaml",
                        [
                            f"cluster.node_groups[0].hardware.configs[0].robot_ip={sim.host}",
                            f"env.control_hz={hz:g}",
                            "train.progress=false",
                            "train.record_episodes=false",
                            *LANES[lane],
                            *realtime_loop(priority, 0),
                        ],
                    )
                    rate, health = pipeline_rate(cfg, steps / hz, learner_load=loaded)
                    out.append({"lane": lane_name(lane, priority), "hz": hz, "rate": rate, **health[0]})
    return out


def print_latency(title: str, rows: list[tuple], width: int = 52, digits: int = 2) -> None:
    """Rows of (name, count, p50 ms, p99 ms) under ``title``."""
    print()
    print(f"{title:<{width}}{'n':>7}{'p50 ms':>9}{'p99 ms':>9}")
    for name, n, p50, p99 in rows:
        print(f"{name:<{width}}{n:>7}{p50:>9.{digits}f}{p99:>9.{digits}f}")


def print_franky(rows: list[dict], loaded: bool) -> None:
    print()
    print(f"franky-sim through the pipeline (real franka driver), {'learner training flat out' if loaded else 'quiet'}")
    print(
        f"{'lane':<20}{'Hz':>5}{'steps':>7}{'hit %':>9}{'late':>6}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{'period p99':>12}{'updates':>9}"
    )
    for h in rows:
        hit = float("nan") if h["late_steps"] is None else 100 * (1 - h["late_steps"] / max(h["timed_steps"], 1))
        period = h["period_p99_ms"] if h["period_p99_ms"] is not None else float("nan")
        print(
            f"{h['lane']:<20}{h['hz']:>5g}{h['steps']:>7}{hit:>9.2f}{h['late_steps'] or 0:>6}"
            f"{h['latency_p50_ms']:>9.2f}{h['latency_p99_ms']:>9.2f}{h['latency_max_ms']:>9.1f}{period:>12.1f}"
            f"{h.get('learner_updates', 0):>9}  {h.get('late_by_phase') or ''}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument(
        "--num-envs",
        default="1,8",
        help="comma-separated env.num_envs values to run the throughput rows with (default 1,8)",
    )
    ap.add_argument(
        "--lanes",
        default="direct,next-to-arm",
        help="obs->action paths to compare: direct (the step lane to the rollout worker) or next-to-arm "
        "(train.policy_at=env: the env worker acts itself)",
    )
    ap.add_argument(
        "--parts",
        default="throughput,latency,franky",
        help="which parts to run: throughput, latency, phases, across-nodes, franky, franky-loaded",
    )
    ap.add_argument("--franky-steps", type=int, default=300)
    ap.add_argument("--franky-hz", default="10,30")
    ap.add_argument(
        "--realtime",
        default="0",
        help="comma-separated SCHED_FIFO priorities of the robot loop (node 0's env_configs "
        "loop_priority) for the latency and franky rows; 0 = no isolation (default 0)",
    )
    ap.add_argument(
        "--sim-realtime",
        type=int,
        default=0,
        help="franky-sim's threads at this SCHED_FIFO priority, as a robot's own controller would be "
        "on a computer of its own (default 0: as started)",
    )
    args = ap.parse_args()
    try:
        num_envs = [int(x) for x in args.num_envs.split(",") if x.strip()]
        franky_hz = [float(x) for x in args.franky_hz.split(",") if x.strip()]
        realtime = [int(x) for x in args.realtime.split(",") if x.strip()]
    except ValueError:
        ap.error(
            f"--num-envs, --franky-hz and --realtime take comma-separated numbers, got {args.num_envs!r}, "
            f"{args.franky_hz!r}, {args.realtime!r}"
        )
    if not num_envs or min(num_envs) < 1:
        ap.error(f"--num-envs needs values >= 1, got {args.num_envs!r}")
    lanes = [x.strip() for x in args.lanes.split(",") if x.strip()]
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if bad := [x for x in lanes if x not in LANES] + [
        x for x in parts if x not in ("throughput", "latency", "phases", "across-nodes", "franky", "franky-loaded")
    ]:
        ap.error(f"unknown --lanes/--parts value(s): {bad}")
    torch.set_num_threads(1)
    import ray

    from rlhw.config import load_config, load_config_dict

    base = ["train.progress=false", "train.learning_starts=100000000", "train.record_episodes=false"]

    def configs(k: int, extra: list[str]):
        """sim_reach with env.num_envs=k: one env worker, and two env workers on node 0."""
        one = load_config(ROOT / "configs/sim_reach.yaml", [*base, f"env.num_envs={k}", *extra])
        data = one.model_dump(mode="json")
        data["cluster"]["component_placement"] = {
            "env": {"node_group": "node", "placement": "0:0-1"},
            "rollout,learner": {"node_group": "node", "placement": "0"},
        }
        return one, load_config_dict(data)

    if "throughput" in parts:
        loop = in_process(configs(1, [])[0], args.seconds)
        rows = [("in-process loop (env + policy, 1 arm)", loop, 1.0, "")]
        rows += lane_rows(configs, lanes, num_envs, args.seconds, loop)
        print()
        print(f"{'sim reach (MuJoCo), env steps/s':<44}{'steps/s':>10}{'x loop':>10}{'obs->act p50/p99 ms':>22}")
        for name, rate, ratio, lat in rows:
            print(f"{name:<44}{rate:>10.1f}{ratio:>10.2f}{lat:>22}")
    if "latency" in parts:
        print_latency("obs->action on one node (30 Hz mock arm)", latency_rows(lanes, args.seconds, realtime), width=62)
    if "phases" in parts:
        print_latency(
            "obs->action phase by phase (one node)", phase_rows(2000) + compiled_graph_rows(2000), width=90, digits=3
        )
    if "across-nodes" in parts:
        print_latency("obs->action across nodes (30 Hz mock arm, proprio)", across_nodes_rows(lanes, args.seconds))
    for loaded in (False, True):
        if ("franky-loaded" if loaded else "franky") in parts:
            print_franky(franky_rows(lanes, franky_hz, args.franky_steps, loaded, realtime, args.sim_realtime), loaded)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
