"""The in-process runner (`train.runner=local`): env, policy and learner in one process, one loop.

It is the baseline the pipeline benchmark compares against and a quick way to debug a task; the real-robot
path is the pipeline (rlhw.rl.pipeline). Both share SAC, the replay buffer, episode recording and the session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from rlhw.rl.demos import load_demos
from rlhw.rl.episodes import EpisodeRecorder, executed, iter_recorded_transitions
from rlhw.rl.replay import MixedReplay
from rlhw.rl.rundir import RunDir
from rlhw.rl.sac import SAC, ObsLayout, resolve_device
from rlhw.rl.session import Counters, StopReason, TrainingSession, interrupted


def _batched(obs: dict) -> dict:
    return {k: np.asarray(v)[None] for k, v in obs.items()}


def seed_everything(seed: int) -> np.random.Generator:
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def make_agent(config, spec, device) -> SAC:
    layout = ObsLayout.from_spec(spec)
    low = np.broadcast_to(np.asarray(spec.action.low if spec.action.low is not None else -1.0, np.float32),
                          spec.action.shape)
    high = np.broadcast_to(np.asarray(spec.action.high if spec.action.high is not None else 1.0, np.float32),
                           spec.action.shape)
    return SAC(layout, low, high, config.train.sac, device=device)


def transition(obs: dict, action, reward, terminated, next_obs: dict, intervened: bool = False) -> dict[str, np.ndarray]:
    """One transition as a batch of 1, in the replay buffer's field names."""
    out = {f"obs/{k}": np.asarray(v)[None] for k, v in obs.items()}
    out.update({f"next_obs/{k}": np.asarray(v)[None] for k, v in next_obs.items()})
    out["action"] = np.asarray(action, np.float32)[None]
    out["reward"] = np.array([reward], np.float32)
    out["terminated"] = np.array([float(terminated)], np.float32)
    out["intervened"] = np.array([float(intervened)], np.float32)
    return out


def run_episode(env, agent: SAC, deterministic: bool, rng, recorder: EpisodeRecorder | None, kind: str,
                random_actions: bool = False, on_step: Callable | None = None) -> tuple[float, bool, int, int]:
    """One episode; returns (return, success, length, intervened steps). Each step is recorded and learned
    from with the action the arm executed, its ``intervened`` flag, and the acting policy's version (the
    number of updates behind its weights; -1 for random warm-up actions and an operator's steps)."""
    obs, _ = env.reset(seed=int(rng.integers(2**31)))
    if recorder is not None:
        recorder.begin(obs, kind=kind)
    ret, success, length, interventions = 0.0, False, 0, 0
    while True:
        version = -1 if random_actions else agent.updates
        action = agent.random_actions(1, rng)[0] if random_actions else agent.act(_batched(obs), deterministic)[0]
        next_obs, reward, terminated, truncated, info = env.step(action)
        action, intervened = executed(action, info)
        ret += float(reward)
        length += 1
        interventions += int(intervened)
        success = success or bool(info.get("success", False))
        if recorder is not None:
            recorder.step(action, reward, terminated, truncated, next_obs, bool(info.get("success", False)),
                          intervened=intervened, policy_version=-1 if intervened else version)
        if on_step is not None:
            on_step(obs, action, reward, terminated, next_obs, intervened)
        obs = next_obs
        if terminated or truncated:
            break
    if recorder is not None:
        recorder.end()
    return ret, success, length, interventions


def train_local(config, run_dir: RunDir, env_factory: Callable | None = None, resume: bool = False,
                eval_env_factory: Callable | None = None) -> StopReason:
    """Train in this process until the target eval success or the step budget. Returns why it stopped.

    Eval episodes run on the training env unless ``eval_env_factory`` gives them their own (a benchmark
    whose scripted operator takes over during training must evaluate the policy alone)."""
    cfg = config.train
    if env_factory is None:
        from rlhw.robot import make_env

        env_factory = make_env
    rng = seed_everything(cfg.seed)
    env = eval_env = env_factory(config, 0)
    try:
        if eval_env_factory is not None:
            eval_env = eval_env_factory(config, 0)
        device = resolve_device(cfg.device)
        agent = make_agent(config, env.spec, device)
        replay = MixedReplay(cfg.buffer_size, cfg.demo_ratio, seed=cfg.seed)
        for batch in load_demos(cfg.demos, {k: v.shape for k, v in env.spec.observations.items()},
                                tuple(env.spec.action.shape)):
            replay.add_demos(batch)
        counters = Counters()
        episodes_dir = Path(run_dir.episodes) / "env0"
        if resume:
            counters = _resume(run_dir, agent, replay)
        recorder = EpisodeRecorder(episodes_dir, fsync=False) if cfg.record_episodes else None
        session = TrainingSession(config, run_dir, counters)

        def learn(obs, action, reward, terminated, next_obs, intervened):
            replay.add_batch(transition(obs, action, reward, terminated, next_obs, intervened))
            session.add_env_steps(1)
            owed = int(cfg.utd_ratio * (session.c.env_steps - cfg.learning_starts)) - session.c.updates
            if session.c.env_steps >= cfg.learning_starts and len(replay) >= cfg.sac.batch_size and owed > 0:
                for _ in range(owed):
                    metrics = agent.update(replay.sample(cfg.sac.batch_size))
                session.add_losses(metrics, owed)
                session.set_extra(**{"losses/alpha": metrics["losses/alpha"],
                                     "train/demo_buffer_size": len(replay.demos)})

        try:
            while session.stop is None:
                warmup = session.c.env_steps < cfg.learning_starts
                ret, success, length, interventions = run_episode(env, agent, False, rng, recorder, "train",
                                                                  random_actions=warmup, on_step=learn)
                session.add_episode(ret, success, length, interventions)
                if session.log_due():
                    session.log()
                if session.eval_due():
                    results = [run_episode(eval_env, agent, True, rng, recorder, "eval")
                               for _ in range(cfg.eval_episodes)]
                    session.record_eval(results)
                if session.checkpoint_due() or session.stop is not None:
                    run_dir.save_checkpoint(_checkpoint(agent, session), session.c.env_steps)
                session.check_budget()
            run_dir.save_checkpoint(_checkpoint(agent, session), session.c.env_steps)
            return session.finish()
        except KeyboardInterrupt:
            if recorder is not None:
                recorder.close()
            try:
                run_dir.save_checkpoint(_checkpoint(agent, session), session.c.env_steps)
                saved = True
            except Exception:  # noqa: BLE001 - report it in run.json rather than hide the interrupt
                saved = False
            return session.finish(interrupted(session.c.env_steps, saved))
        except BaseException as e:
            if recorder is not None:
                recorder.close()
            run_dir.save_checkpoint(_checkpoint(agent, session), session.c.env_steps)
            session.finish(StopReason("failed", f"{type(e).__name__}: {e}"))
            raise
    finally:
        env.close()
        if eval_env is not env:
            eval_env.close()


def _checkpoint(agent: SAC, session: TrainingSession) -> dict:
    return {"sac": agent.state_dict(), "layout": agent.layout.to_dict(), "env_steps": session.c.env_steps,
            "updates": session.c.updates, "episodes": session.c.episodes, "best_success": session.c.best_success}


def _resume(run_dir: RunDir, agent: SAC, replay: MixedReplay) -> Counters:
    """The checkpoint's weights and counters; every recorded train transition back into online replay (the
    intervention steps into the demo buffer too: `MixedReplay.add_batch`)."""
    ckpt = run_dir.load_checkpoint()
    counters = Counters()
    if ckpt is not None:
        agent.load_state_dict(ckpt["sac"])
        counters.updates = int(ckpt["updates"])
        counters.episodes = int(ckpt.get("episodes", 0))
        counters.best_success = float(ckpt.get("best_success", float("nan")))
    for batch in iter_recorded_transitions(run_dir.episodes):
        replay.add_batch(batch)
    counters.env_steps = replay.online.total_added
    return counters
