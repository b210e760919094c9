"""Where an env worker's env runs, derived from the placement (no config switch): in its own process (a
simulator with no arm placed: no server child, no serialisation) or behind a `rlhw serve-env` child and a
`RemoteEnv` client to it (an arm the placement gives a hardware rank, driven or simulated: a hung or crashed
driver cannot take the worker down, and the worker restarts a dead child)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rlhw.config.isolation import LoopIsolation
from rlhw.config.root import Config
from rlhw.env.server_process import EnvServerProcess, open_remote_env
from rlhw.rl.episode_loop import BatchView
from rlhw.runtime.isolation import call_with_loop_isolation

T = TypeVar("T")


def env_transport(config: Config, robot_rank: int) -> str:
    """``server`` or ``in_process``: where env worker ``robot_rank``'s env runs.

    An arm the placement gives a hardware rank (the env placed on a node group whose ``hardware`` is of type
    Franka) is served from a server child, whether it is driven for real or simulated (``rlhw train --sim``,
    ``env.sim=mujoco``, which keep the placement): a cell and its simulated stand-in then run one program, the
    same processes, restarts and step timeouts, and the stand-in tests the cell's path. A simulator the
    placement gives no arm runs in the env worker's process. A real arm is always served (an ``auto`` driver
    that falls back to a simulator beside a declared Franka counts as real, `EnvPlan.simulated`). This used to
    be a switch (``train.env_transport``); it went because every switch doubles what must be tested, and an
    in-process real arm, which it could ask for, was only ever refused."""
    from rlhw.robot.factory import plan_env

    plan = plan_env(config, robot_rank)
    placed_on_arm = plan.hardware is not None  # the Franka entry of this hardware rank
    return "server" if placed_on_arm or not plan.simulated else "in_process"


class EnvTransport:
    """Arm ``robot_rank``'s env behind its transport (``kind``): an env worker's (``env.num_envs`` instances) or
    `rlhw eval`'s (``single``: one instance), and the restarts of its server child (``name`` names the child's
    process, ``log`` its output). ``env`` is the env or the server's client; `open` gives the episode loop's view
    of it."""

    def __init__(
        self,
        config: Config,
        robot_rank: int,
        log: Path,
        name: str,
        isolation: LoopIsolation,
        single: bool = False,
    ):
        self.config, self.robot_rank, self.log, self.name = config, robot_rank, Path(log), name
        self.isolation = isolation  # the robot loop's, under which a served arm's client is made (`open`)
        self.kind = env_transport(config, robot_rank)
        self.single = single or config.env.num_envs == 1
        self.server: EnvServerProcess | None = None
        self.env = None
        self.restarts = 0

    def open(self) -> BatchView:
        """The env, in this process or behind a new server child.

        In process the env is built here but opened by its first reset, in the loop thread: the threads its
        drivers start then (a simulated camera's render thread, Mesa's rasteriser threads) inherit the loop's
        scheduling (``loop_priority``). Opened here, at Ray's nice 15, they rendered every observation the
        SCHED_FIFO loop waited for behind every ordinary process (the rehearsal's late steps, "mostly observe")."""
        if self.kind == "in_process":
            from rlhw.robot.factory import make_batched_env, make_env

            make = make_env if self.single else make_batched_env
            self.env = make(self.config, self.robot_rank, connect=False)
            return BatchView(self.env)
        self.server, self.env = open_remote_env(self.config, self.robot_rank, self.log, self.name, self._make_client)
        return BatchView(self.env.typed)

    def _make_client(self, make: Callable[[], T]) -> T:
        """A served arm's client made under the robot loop's isolation (none set: the OS default): the threads the first
        client starts (grpc's event engine, the Session stream's feeder) carry every step to the child and back,
        and made on a Ray actor's thread they ran at its nice 15 beside the learner (a four-cell fleet's late
        steps were mostly ``transport``, docs/fleet.md). Only the client: the child itself is started on this
        thread, since it dies with the thread that started it (PR_SET_PDEATHSIG is per thread)."""
        return call_with_loop_isolation(self.isolation, make)

    @property
    def dead(self) -> bool:
        """The server child has exited (never in process)."""
        return self.server is not None and not self.server.alive()

    def may_restart(self) -> bool:
        """A dead server child, and restarts left (``train.env_restarts``)."""
        return self.dead and self.restarts < self.config.train.env_restarts

    def restart(self) -> BatchView:
        """A dead server child replaced by a new one (only the server transport has a child to restart)."""
        self.restarts += 1
        self._stop_server()
        return self.open()

    def use_classifier(self, path: str) -> BatchView | None:
        """The env judges with the success classifier in ``path`` from its next reset (a retrained one,
        rlhw/rl/classifier_refresh.py). In process the env swaps it (`RobotEnv.use_classifier`): None, the view is
        the same. A server child cannot swap it: the child is replaced by one started from this config with
        ``env.reward.classifier`` set to ``path`` (not a restart: ``restarts`` counts dead children), and the new
        view is returned. Call it between episodes only: a real arm's new child opens a new connection to it."""
        if self.kind == "in_process":
            self.env.use_classifier(path)
            return None
        env = self.config.env
        reward = env.reward.model_copy(update={"classifier": str(path)})
        self.config = self.config.model_copy(update={"env": env.model_copy(update={"reward": reward})})
        self._stop_server()
        return self.open()

    def _stop_server(self) -> None:
        """The server's client closed and its child stopped, before a new one is opened."""
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - the old client may be broken already
            pass
        self.server.stop()

    @property
    def wait_inside(self) -> bool:
        """Where the UTD gate may hold the loop: before any train step of a simulator in this process; only
        between episodes for a real arm (behind its server) and for a simulation that keeps real time as a real
        arm does (``env.pace: real_time``) or that a person drives (`RobotEnv.paced`)."""
        return self.kind == "in_process" and not self.env.paced

    def exit_note(self) -> str:
        """Why a failure may be the server's: its last output, where it has exited."""
        return f" (env server exited; its last output: {self.server.tail()})" if self.dead else ""

    def server_pid(self) -> int | None:
        """Process id of the env server child (tests kill it to check the restart); None in process."""
        return self.server.proc.pid if self.server is not None and self.server.proc is not None else None

    def server_isolation(self) -> dict | None:
        """What took effect in the server child's loop (None in process)."""
        return self.server.loop_isolation if self.server is not None else None

    def close(self) -> None:
        try:
            if self.env is not None:
                self.env.close()
        finally:
            if self.server is not None:
                self.server.stop()
