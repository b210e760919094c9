"""An env worker's work: what the controller asked it to collect and what it has collected (`WorkBudget`), and
what the controller's next poll takes (`Outbox`).

The controller's calls (``collect``, ``run_async``, ``allow``, ``evaluate``, ``poll``) and the robot loop
meet on one condition, the budget's ``lock``; none of the controller's calls waits for the loop. The UTD gate
(`rlhw.rl.utd_gate`) shares that condition, so a grant wakes a loop held by it.
"""

from __future__ import annotations

import threading

from rlhw.rl.instances import EVAL, TRAIN, Instances
from rlhw.rl.pipeline.messages import EpisodeResult, JudgeReport
from rlhw.rl.utd_gate import UtdGate
from rlhw.rl.verdicts import VerdictTally
from rlhw.robot.step import Step


class WorkBudget:
    """Train steps to collect (``collect``: a number, sync mode; ``run_async``: unlimited, paced by the UTD gate's
    grant, ``allow``), eval episodes wanted (``evaluate``), the train steps collected and the loop's status
    (idle, waiting for the learner, episode, failed)."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.gate = UtdGate(self.lock)  # async mode: the learner's pace
        self.budget = 0  # train steps still to collect (sync mode); ignored when unlimited
        self.unlimited = False
        self.eval_pending = 0
        self.train_steps = 0
        self.stopping = False
        self.status = "idle"

    # ---- the controller's side (each returns at once)
    def collect(self, steps: int) -> None:
        with self.lock:
            self.budget += int(steps)
            self.lock.notify_all()

    def run_async(self) -> None:
        with self.lock:
            self.unlimited = True
            self.lock.notify_all()

    def allow(self, steps: int) -> None:
        """Async mode: the train steps this worker may have collected (the controller's grant; see `UtdGate`)."""
        self.gate.allow(steps)

    def evaluate(self, episodes: int) -> None:
        with self.lock:
            self.eval_pending += int(episodes)
            self.lock.notify_all()

    def stop(self) -> None:
        """The loop stops at its next wait or step (whichever comes first)."""
        with self.lock:
            self.stopping = True
            self.lock.notify_all()

    def idle(self) -> bool:
        """No work asked for and no episode running (caller holds the lock)."""
        return self.eval_pending == 0 and not self.unlimited and self.budget <= 0 and self.status != "episode"

    # ---- the loop's side
    def wait_for_work(self) -> bool:
        """Wait until there is something to collect (False: stop). Between episodes only: the UTD gate holds a
        real arm here until the learner has caught up; eval episodes are not held (they teach it nothing)."""
        with self.lock:
            if self.unlimited and self.gate.blocks(self.train_steps):
                self.status = "waiting"
                self.gate.wait(self.train_steps, lambda: self.stopping or self.eval_pending > 0)
            while not self.stopping:
                if self.eval_pending > 0 or self.unlimited or self.budget > 0:
                    self.status = "episode"
                    return True
                self.status = "idle"
                self.lock.wait(0.5)
            return False

    def hold_for_learner(self) -> None:
        """Inside an episode (a simulator in this process): wait for the learner before the next train step."""
        with self.lock:
            self.gate.wait(self.train_steps, lambda: self.stopping)

    def choose(self, book: Instances) -> str:
        """What the next episode of an idle instance is (train, eval or idle), from what is still wanted."""
        with self.lock:
            return book.choose(self.budget, self.unlimited, self.eval_pending)

    def count_train_steps(self, n: int) -> None:
        with self.lock:
            self.train_steps += n
            self.budget -= n


class Outbox:
    """What the controller's next poll takes, each item once: finished train and eval episodes, faults as text,
    and a simulated arm's judge report (`JudgeReport`: for the controller alone, never the learner's)."""

    def __init__(self, work: WorkBudget):
        self.work = work
        self.episodes: list[EpisodeResult] = []
        self.eval_results: list[EpisodeResult] = []
        self.faults: list[str] = []
        self.notices: list[str] = []
        self._clear_judge()
        self._judged_episode = False  # the judge saw a step of the running episode (one instance: see `stepped`)
        self._judge = False  # a simulator's judge has reported on a step: every poll from then on carries its report

    def note(self, text: str) -> None:
        self.faults.append(text)

    def notice(self, text: str) -> None:
        """Something for the run's log that is not a fault (see `EnvProgress.notices`)."""
        with self.work.lock:
            self.notices.append(text)

    def report(self, kind: str, result: EpisodeResult) -> None:
        """A finished episode (the episode loop's ``report`` hook): an eval episode is one fewer wanted."""
        with self.work.lock:
            judged, self._judged_episode = self._judged_episode, False
            if kind == EVAL:
                self.work.eval_pending -= 1
                self.eval_results.append(result)
                self._judged_evals += judged  # its success is the judge's verdict (`Step.outcome`)
            elif kind == TRAIN:
                self.episodes.append(result)

    def judged(self, step: Step, training: bool) -> None:
        """A step a simulator's judge saw. Only a single env has a judge (a batch reports none), so the step is
        one instance's; ``training``: of a train episode (the classifier against the judge)."""
        with self.work.lock:
            self._judged_steps += step.num_envs
            self._judged_episode = self._judge = True
            if training:
                self._verdicts.add_step(step)

    def take(self) -> dict:
        """The poll's share of `EnvProgress` (caller holds the budget's lock)."""
        judge = JudgeReport(self._judged_steps, self._judged_evals, self._verdicts) if self._judge else None
        out = {
            "episodes": self.episodes,
            "eval_results": self.eval_results,
            "faults": self.faults,
            "judge": judge,
            "notices": self.notices,
        }
        self.episodes, self.eval_results, self.faults, self.notices = [], [], [], []
        self._clear_judge()
        return out

    def _clear_judge(self) -> None:
        self._judged_steps, self._judged_evals, self._verdicts = 0, 0, VerdictTally()
