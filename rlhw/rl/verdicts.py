"""The success classifier against a simulator's judge: a rehearsal's sign that the policy fools its reward.

Kept apart from the session (which imports torch through the run directory) because the pipeline's messages
carry a tally from the env workers to the controller (`rlhw.rl.pipeline.messages.JudgeReport`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhw.robot.step import Step


@dataclass
class VerdictTally:
    """How often a success classifier (the reward of a rehearsal) disagreed with the simulator's judge on the
    train steps it judged since the last eval: HIL-SERL's sign that a policy learned to fool its classifier
    (false successes) or that the classifier misses real ones (false negatives)."""

    steps: int = 0
    false_positives: int = 0  # the classifier said success, the judge did not
    false_negatives: int = 0  # the judge saw success, the classifier did not
    judged_positive: int = 0
    false_success_episodes: int = 0  # train episodes the classifier ended as a success the judge did not see
    operator_rejections: int = 0  # classifier-called successes the operator said were not (its retraining data)

    def add(self, classifier: bool, judge: bool, ended: bool) -> None:
        self.steps += 1
        self.judged_positive += judge
        self.false_positives += classifier and not judge
        self.false_negatives += judge and not classifier
        self.false_success_episodes += ended and classifier and not judge

    def add_step(self, step: Step) -> None:
        """One env step's classifier verdict (``success``, where its notes' ``reward_classifier`` says one ran)
        against the judge's, for each instance the judge saw. A classifier success ends its episode
        (``env.reward.terminate_on_success``, the default). The local runner's and the env worker's rule."""
        if step.judge_success is None:
            return
        for i, notes in enumerate(step.notes):
            if notes.reward_classifier is not None:
                success = bool(step.success[i])
                self.add(success, bool(step.judge_success[i]), success)
                self.operator_rejections += notes.operator_verdict is False

    def merge(self, other: VerdictTally) -> None:
        """Add ``other``'s counts (the controller sums its env workers' tallies)."""
        self.steps += other.steps
        self.false_positives += other.false_positives
        self.false_negatives += other.false_negatives
        self.judged_positive += other.judged_positive
        self.false_success_episodes += other.false_success_episodes
        self.operator_rejections += other.operator_rejections

    def row(self) -> dict[str, float]:
        """The period's figures for metrics.jsonl (rates over the judge's negatives / positives; NaN when none)."""
        negatives = self.steps - self.judged_positive
        return {
            "reward/classifier_steps": self.steps,
            "reward/classifier_false_positives": self.false_positives,
            "reward/classifier_false_negatives": self.false_negatives,
            "reward/classifier_fp_rate": self.false_positives / negatives if negatives else float("nan"),
            "reward/classifier_fn_rate": (
                self.false_negatives / self.judged_positive if self.judged_positive else float("nan")
            ),
            "reward/classifier_false_success_episodes": self.false_success_episodes,
            "reward/operator_rejections": self.operator_rejections,
        }
