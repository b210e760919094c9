"""The single controller: `train_pipeline(config, run_dir)` drives env, rollout and learner groups on Ray.

A `Pipeline` (rlhw.rl.pipeline.launch) launches the three worker groups and their channels; a `Controller` runs the
training loop on it.

    env workers (robot nodes) --step lane: obs--> rollout workers --step lane: actions--> env workers
                                        rollout workers --replay--> learner workers --weights--> rollout workers

The controller never touches observations or transitions: those move on the step lanes
(rlhw.rl.pipeline.lane, a TCP stream per env worker) and through channels (payloads by object-store reference). It
only decides how much to collect, how many updates to run, when to evaluate, log and checkpoint, and when to
stop. ``train.mode``:

- ``sync``: collect ``steps_per_iteration`` env steps (whole episodes: a robot is never paused mid-episode),
  then run the updates they pay for (``utd_ratio``), repeat;
- ``async``: the robots step continuously while the controller runs updates in chunks as data arrives; the
  controller grants each env worker the steps the updates done so far pay for (``utd_ratio``, plus
  ``utd_slack`` updates' worth ahead), so a robot faster than the learner waits: a simulator before its next
  step, a real arm before its next episode (rlhw.rl.utd_gate).

Either way the achieved UTD (updates per env step after ``learning_starts``) is logged as ``train/utd`` and
recorded in ``run.json`` (``utd``), with the seconds the env workers waited for the learner.

A dead env worker (or a failed robot loop) leaves the run while another cell is in it: the others go on, and
run.json's ``cells`` names it (rlhw.rl.pipeline.fleet). That holds wherever the policy acts: next to the arm, or
in a rollout worker serving several cells, which drops the dead cell's lane alone (rlhw.rl.pipeline.lane). The last cell's death, or the learner's, ends the run
cleanly: the controller stops every arm where it is, saves a checkpoint, writes ``run.json`` with the worker's
name and reason, and returns; every transition is already on disk.
"""

from __future__ import annotations

import math
import signal
import time

from rlhw.config.root import Config
from rlhw.errors import WorkerError
from rlhw.rl.pipeline.launch import CALL_TIMEOUT_S, Pipeline, PipelineFailure
from rlhw.rl.pipeline.messages import EnvProgress, EpisodeResult
from rlhw.rl.rundir import RunDir, RunStatus
from rlhw.rl.session import StopReason, TrainingSession, interrupted
from rlhw.rl.utd_gate import step_allowance, updates_owed
from rlhw.rl.verdicts import VerdictTally
from rlhw.runtime.stop_signals import cause_text, interrupt_cause

POLL_S = 0.05
UPDATE_CHUNK = 50  # async mode: updates per controller call (bounds how stale a poll can get)


def train_pipeline(config: Config, run_dir: RunDir, resume: bool = False, cluster=None) -> StopReason:
    """Train on the pipeline until the session says stop (target eval success, step budget, a failed worker,
    Ctrl-C); returns why it stopped. ``cluster``: an existing `Cluster` (tests, benchmarks), else its own."""
    try:
        pipe = Pipeline(config, run_dir, cluster=cluster, resume=resume)
    except KeyboardInterrupt as e:
        cause = interrupt_cause(e)
        run_dir.write_status(
            RunStatus.INTERRUPTED,
            reason=f"{cause_text(cause)} while the pipeline started; nothing trained",
            signal=cause.name,
        )
        raise
    except BaseException as e:
        run_dir.write_status(RunStatus.FAILED, reason=f"the pipeline did not start: {str(e).splitlines()[0]}")
        raise
    try:
        return Controller(config, run_dir, pipe).run()
    finally:
        pipe.close()


class Controller:
    """The training loop of one pipeline run. It owns the run's counters (through the `TrainingSession`) and
    decides how much the env workers collect, how many updates the learner workers run, and when to evaluate,
    log, checkpoint and stop; observations and transitions never pass through it."""

    def __init__(self, config: Config, run_dir: RunDir, pipe: Pipeline):
        self.cfg, self.run_dir, self.pipe = config.train, run_dir, pipe
        self.rehearsal = config.env.sim_state == "hidden"
        self.session = TrainingSession(config, run_dir, pipe.resumed)
        self.base_steps = self.session.c.env_steps  # steps of the runs this one resumes
        self.collected = [0] * pipe.n_env  # train steps per env worker, in this run
        self.restarts = [0] * pipe.n_env  # env server children restarted, per env worker
        self.env_wait_s = [0.0] * pipe.n_env  # seconds each env worker waited for the learner (async mode)
        self.granted: int | None = None  # async mode: the train steps each env worker may have collected
        self.session.status_extra["env_restarts"] = self.restarts
        self.explore_random = True  # the rollout workers act uniformly at random until learning_starts
        self.eval_results: list[EpisodeResult] = []  # finished eval episodes, whichever poll brought them in
        # A simulator judge's reports (a rehearsal): eval episodes it judged, and the classifier against it on train
        # steps since the last eval (logged with each eval, as the local runner does).
        self.judged_evals = 0
        self.verdicts = VerdictTally()

    # ---- the loop
    def run(self) -> StopReason:
        """Iterate until the session says stop, then stop the robots, count their last steps and save."""
        session, pipe = self.session, self.pipe
        try:
            if self.cfg.mode == "async":
                self.grant()
                pipe.envs.run_async().wait(CALL_TIMEOUT_S)
            last_check = time.monotonic()
            while session.stop is None:
                self._collect_and_train()
                if time.monotonic() - last_check > 2.0:
                    pipe.check_rollouts()
                    last_check = time.monotonic()
                if session.log_due():
                    session.set_extra(**pipe.envs.health_row(CALL_TIMEOUT_S))
                    self.note_utd()
                    session.log()
                if session.eval_due():
                    self.evaluate()
                if session.checkpoint_due() or session.stop is not None:
                    self.checkpoint()
                session.check_budget()
            # Stop the robots first (async mode keeps them stepping), count their last steps, then save.
            pipe.envs.stop_loop().wait(CALL_TIMEOUT_S)
            self.absorb(pipe.poll_envs())
            self.checkpoint()
            self.note_utd()
            # Data-parallel ranks must hold identical weights; run.json records the evidence.
            session.status_extra["learner_weight_digests"] = pipe.learners.weights_digest().wait(CALL_TIMEOUT_S)
            session.status_extra["learner_devices"] = pipe.learners.device_name().wait(CALL_TIMEOUT_S)
            session.status_extra["loop_health"] = pipe.envs.health(CALL_TIMEOUT_S)
            session.status_extra["cells"] = pipe.envs.report()
            if pipe.rollouts is not None:
                session.status_extra["rollout_isolation"] = [
                    r.loop_isolation for r in pipe.rollouts.poll().wait(CALL_TIMEOUT_S)
                ]
            return session.finish()
        except (PipelineFailure, WorkerError) as e:
            return self._worker_failed(e)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (rlhw.runtime.stop_signals)
            return self._interrupted(interrupt_cause(e))
        except BaseException as e:
            _try(self.checkpoint)
            session.finish(StopReason(RunStatus.FAILED, f"{type(e).__name__}: {e}"))
            raise

    def _collect_and_train(self) -> None:
        """sync: collect ``steps_per_iteration`` in whole episodes, then the updates they pay for; async: the
        robots step on, and the updates owed so far run in chunks."""
        pipe = self.pipe
        if self.cfg.mode == "sync":
            pipe.envs.collect(max(1, math.ceil(self.cfg.steps_per_iteration / pipe.n_env))).wait(CALL_TIMEOUT_S)
            while True:  # until every env worker has used its budget and finished its episode
                polled = pipe.poll_envs()
                self.absorb(polled)
                if all(p.idle for p in polled):
                    break
                time.sleep(POLL_S)
            self.train_owed()
        else:
            self.absorb(pipe.poll_envs())
            before = self.session.c.updates
            self.train_owed()
            if self.session.c.updates == before:
                time.sleep(POLL_S)

    # ---- what the loop does
    def absorb(self, results: list[EnvProgress]) -> None:
        """Count what the env workers report: episodes, faults, steps, eval results (handed over once each)."""
        session = self.session
        for res in results:
            self.pipe.envs.absorb(res)  # the cell's own counters (rlhw.rl.pipeline.fleet)
            self.eval_results.extend(res.eval_results)  # a poll hands them over once: never drop them
            for ret, success, length, interventions in res.episodes:
                session.add_episode(ret, success, length, interventions)
            for fault in res.faults:
                session.increment("robot/faults")
                _note(f"{self.pipe.envs.addresses[res.rank]}: {fault}")
            for text in res.notices:
                _note(f"{self.pipe.envs.addresses[res.rank]}: {text}")
            self.collected[res.rank] = res.train_steps
            self.restarts[res.rank] = res.restarts
            self.env_wait_s[res.rank] = res.utd_wait_s
            if res.judge is not None:
                self.judged_evals += res.judge.eval_episodes
                self.verdicts.merge(res.judge.verdicts)
        total = self.base_steps + sum(self.collected)
        if total > session.c.env_steps:
            session.add_env_steps(total - session.c.env_steps)

    def train_owed(self) -> None:
        """Run the updates the collected steps pay for (``utd_ratio``); in async mode one chunk, then a poll."""
        cfg, session, pipe = self.cfg, self.session, self.pipe
        if self.explore_random and session.c.env_steps >= cfg.learning_starts:
            pipe.acting.set_exploration(False).wait(CALL_TIMEOUT_S)
            self.explore_random = False
        owed = updates_owed(session.c.env_steps, session.c.updates, cfg.utd_ratio, cfg.learning_starts)
        while owed > 0:
            n = min(owed, UPDATE_CHUNK) if cfg.mode == "async" else owed
            m = pipe.learners.train(n).wait(CALL_TIMEOUT_S + n)[0]
            if m.updates == 0:  # a rank has no data yet: let the robots collect on rather than wait for it
                self.grant(floor=max(self.collected) + UPDATE_CHUNK)
                return
            session.add_losses(dict(m.losses), m.updates)
            owed -= m.updates
            # A learner slower than the robots (high utd_ratio, async mode) owes updates: logged, never hidden.
            session.set_extra(
                **{
                    "losses/alpha": m.losses["losses/alpha"],
                    "train/replay_size": m.replay_size,
                    "train/demo_buffer_size": m.demo_buffer_size,
                    "perf/updates_behind": max(owed, 0),
                }
            )
            if cfg.mode == "async":
                self.grant()
                self.absorb(pipe.poll_envs())
                return

    def grant(self, floor: int = 0) -> None:
        """Async mode: tell the env workers how many train steps each may have collected, from the updates done
        (`step_allowance`); they wait for the learner beyond it (rlhw.rl.utd_gate)."""
        cfg = self.cfg
        steps = max(
            floor,
            step_allowance(
                self.session.c.updates,
                cfg.utd_ratio,
                cfg.learning_starts,
                cfg.utd_slack,
                *self.pipe.envs.fair_share(self.base_steps, self.collected),
            ),
        )
        if self.granted is None or steps > self.granted:
            self.pipe.envs.allow(steps).wait(CALL_TIMEOUT_S)
            self.granted = steps

    def note_utd(self) -> None:
        """The achieved update-to-data ratio, for metrics.jsonl (``train/utd``) and run.json (``utd``)."""
        c, cfg = self.session.c, self.cfg
        achieved = c.updates / max(1, c.env_steps - cfg.learning_starts)
        waited = float(sum(self.env_wait_s))
        self.session.set_extra(**{"train/utd": achieved, "perf/env_wait_s": waited})
        self.session.status_extra["utd"] = {
            "configured": cfg.utd_ratio,
            "achieved": round(achieved, 4),
            "updates": c.updates,
            "env_steps": c.env_steps,
            "learning_starts": cfg.learning_starts,
            "env_wait_s": [round(w, 3) for w in self.env_wait_s],
        }

    def evaluate(self) -> None:
        """``eval_episodes`` (rounded up to a multiple of the env workers), recorded by the session."""
        pipe = self.pipe
        per_env = math.ceil(self.cfg.eval_episodes / len(pipe.envs.live))
        self.eval_results.clear()
        pipe.envs.start_eval(per_env)
        pipe.envs.evaluate(per_env).wait(CALL_TIMEOUT_S)
        # In async mode train_owed() polls too: results it brings in land in eval_results through absorb().
        while not pipe.envs.eval_done():
            self.absorb(pipe.poll_envs())
            if self.cfg.mode == "async":
                self.train_owed()
            else:
                time.sleep(POLL_S)
        results = self.eval_results[:]
        self.eval_results.clear()
        self.session.record_eval(results, self._judge_row(len(results)))

    def _judge_row(self, episodes: int) -> dict[str, float]:
        """A rehearsal's eval: its success is the judge's (`JudgeReport`); the classifier against the judge since
        the last eval joins the row. An eval of a rehearsal that no judge saw would log the classifier's opinion
        as the truth: that stops the run."""
        judged, self.judged_evals = self.judged_evals, 0
        verdicts, self.verdicts = self.verdicts, VerdictTally()
        if self.rehearsal and episodes and not judged:
            raise PipelineFailure(
                "controller",
                f"a rehearsal (env.sim_state=hidden) evaluated {episodes} episodes and no simulator judge reported "
                "on them, so eval/success_rate would be the classifier's opinion; the env workers must step their "
                "simulator in process (env.num_envs=1)",
            )
        row = {"eval/judged_episodes": judged} if self.rehearsal else {}
        return {**row, **(verdicts.row() if verdicts.steps else {})}

    def checkpoint(self) -> None:
        self.pipe.learners.execute_on(0).save_checkpoint(self.session.c).wait(CALL_TIMEOUT_S)

    # ---- how a run ends early
    def _worker_failed(self, e: PipelineFailure | WorkerError) -> StopReason:
        """A dead env worker or a failed loop: save what can be saved and say who failed, in run.json."""
        who = e.who if isinstance(e, PipelineFailure) else e.address
        reason = e.reason if isinstance(e, PipelineFailure) else str(e).splitlines()[0]
        _note(f"stopping: {who} failed: {reason}")
        # Every arm stops where it is and holds (its episode ends there, recorded): nothing moves for a run
        # that has lost its learner or its last cell.
        if _try(lambda: self.pipe.envs.stop_loop().wait(CALL_TIMEOUT_S)):
            self.session.status_extra["arms_stopped_at"] = time.time()  # no step is recorded after this
        _try(lambda: self.absorb(self.pipe.poll_envs()))  # their last steps, counted
        self.session.status_extra["cells"] = self.pipe.envs.report()
        saved = _try(self.checkpoint)
        return self.session.finish(
            StopReason(
                RunStatus.FAILED,
                f"{who} failed: {reason}; "
                f"{'checkpoint saved' if saved else 'checkpoint NOT saved'}, "
                f"episodes on disk in {self.run_dir.episodes}",
            )
        )

    def _interrupted(self, cause: signal.Signals) -> StopReason:
        _note(
            f"interrupted ({cause_text(cause)}): stopping the robots and saving a checkpoint "
            f"({cause_text(cause)} again to abandon)"
        )
        session, pipe = self.session, self.pipe
        stop = interrupted(session.c.env_steps, False, cause)
        try:  # a second Ctrl-C / SIGTERM leaves this block; run.json still says what happened
            _try(lambda: pipe.envs.stop_loop().wait(CALL_TIMEOUT_S))
            _try(lambda: self.absorb(pipe.poll_envs()))
            stop = interrupted(session.c.env_steps, _try(self.checkpoint), cause)
        finally:
            session.finish(stop)
        return stop


def _try(fn) -> bool:
    try:
        fn()
        return True
    except Exception:  # noqa: BLE001 - best effort while already failing
        return False


def _note(text: str) -> None:
    import sys

    print(f"rlhw train: {text}", file=sys.stderr, flush=True)
