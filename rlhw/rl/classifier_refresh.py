"""The success classifier retrained during a run, from the operator's verdicts on the successes it called.

Why: a policy trained on a learned reward finds the frames its classifier wrongly calls a success, and is paid
for them (the rehearsal's false successes climbed to about 100 per 2,000 steps). HIL-SERL's remedy is to add
those frames as negatives and retrain; done after the run, it costs a lab a failed run. Here it is done while the
run goes on, from what a cell has anyway: an operator watching the arm.

How:
- When the classifier ends a train episode as a success, the env asks the operator (`TeleopDevice.verdict`; a
  scripted operator says what it sees, a person's eyes). A "no" is recorded as the episode's
  ``operator_success: false``, so every frame of it becomes a negative (rlhw/vision/labels.py).
- After ``env.reward.retrain_after_rejections`` such episodes, a Ray task on this node (CPU 0: it takes no
  worker's slot, and Ray runs it at its workers' low priority, below the robot loop) trains a new classifier
  with the options the current one was trained with (`rlhw train-reward`'s, saved in its file), from the
  episodes it was trained on plus every rejected episode of the run. It is written to
  RUN/reward/env<rank>/classifier-NNN.pt (each cell of a fleet retrains its own).
- The env takes it at the next episode boundary, never inside an episode.

Robot time: no step beyond the run's own. Operator time: one verdict per episode the classifier ends.
The policy, the replay and the learner never see the verdict; it reaches the classifier's data alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from rlhw.robot.step import Step


@dataclass(frozen=True)
class Retrained:
    """A retraining's outcome: the new classifier's file, how many episodes it learned from (of which
    ``rejected`` the operator rejected during the run), and its held-out precision and recall (NaN when
    undefined)."""

    path: str
    episodes: int
    rejected: int
    precision: float
    recall: float


#: Starts a retraining: (current classifier file, the run's episode directories, the new file) -> its future.
Launch = Callable[[str, Sequence[str], str], Future]


def rejected_files(episode_dirs: Sequence[str | Path]) -> list[Path]:
    """The run's finished train episodes whose classifier-called success the operator rejected."""
    from rlhw.rl.episodes import episode_files, finished_episode_meta

    files = [f for d in episode_dirs for f in episode_files(Path(d), "train") if f.suffix == ".npz"]
    return [f for f in files if finished_episode_meta(f).get("operator_success") is False]


def retrain(current: str, episode_dirs: Sequence[str], out: str) -> Retrained:
    """Train a classifier as ``current`` was trained (its episodes and options) plus the rejected episodes under
    ``episode_dirs`` as negatives; write it to ``out``."""
    import torch

    from rlhw.rl.episode_frames import episode_frames
    from rlhw.vision.classifier import classifier_training, save_classifier
    from rlhw.vision.train_classifier import options_from_dict, train_success_classifier

    torch.set_num_threads(1)  # beside the learner and the robot loop
    training = classifier_training(current)
    before = [Path(p) for part in ("train", "held_out") for p in training["episodes"][part]]
    rejected = rejected_files(episode_dirs)
    known = set(before)
    new = [f for f in rejected if f not in known]
    episodes = episode_frames([f for f in before if f.exists()] + new)
    result = train_success_classifier(episodes, options_from_dict(training["options"]))
    save_classifier(result.classifier, out, result.metrics, result.training)
    held = result.metrics
    return Retrained(out, len(episodes), len(rejected), float(held["precision"]), float(held["recall"]))


def ray_launch(current: str, episode_dirs: Sequence[str], out: str) -> Future:
    """`retrain` as a Ray task on this node, with no CPU reserved (see the module docstring)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    task = ray.remote(num_cpus=0, max_retries=0)(retrain).options(scheduling_strategy=here)
    return task.remote(current, list(episode_dirs), out).future()


class ClassifierRefresh:
    """One env worker's retraining: counts the operator's rejections (`stepped`, every step), and between
    episodes (`between_episodes`) starts a retraining when enough came in, or hands a finished one to ``use``."""

    def __init__(
        self,
        classifier: str,
        episode_dirs: Sequence[str | Path],
        out_dir: str | Path,
        after: int,
        use: Callable[[str], None],
        launch: Launch = ray_launch,
    ):
        # absolute: the task's worker need not share this process's directory
        self.current = str(Path(classifier).resolve())
        self.episode_dirs = [str(Path(d).resolve()) for d in episode_dirs]
        self.out_dir, self.after, self.use, self.launch = Path(out_dir), int(after), use, launch
        self.rejections = 0  # since the last retraining started
        self.version = 0  # retrainings in use
        self.pending: Future | None = None
        # A resumed run goes on judging with the last classifier it retrained, not the one it started from.
        earlier = sorted(self.out_dir.glob("classifier-[0-9][0-9][0-9].pt"))
        if earlier:
            self.current, self.version = str(earlier[-1].resolve()), len(earlier)
            use(self.current)

    def stepped(self, step: Step, training: bool) -> None:
        if training:
            self.rejections += sum(n.operator_verdict is False for n in step.notes)

    def between_episodes(self) -> str | None:
        """Take a finished retraining (its file is in use from now), or start one; what happened, for the log."""
        if self.pending is not None:
            if not self.pending.done():
                return None
            future, self.pending = self.pending, None
            try:
                result = future.result()
            except Exception as e:  # the run goes on with the classifier it has; the next rejections retry
                return f"classifier retraining failed ({type(e).__name__}: {e}); keeping {self.current}"
            self.use(result.path)
            self.current, self.version = result.path, self.version + 1
            return (
                f"classifier v{self.version} in use: {result.episodes} episodes ({result.rejected} rejected "
                f"by the operator so far), held-out precision {result.precision:.3f} recall {result.recall:.3f}"
            )
        if self.rejections >= self.after:
            self.rejections = 0
            out = self.out_dir / f"classifier-{self.version + 1:03d}.pt"
            self.pending = self.launch(self.current, self.episode_dirs, str(out))
            return f"classifier retraining started ({out.name}): the operator rejected its successes"
        return None
