"""`FrankaArm`: the `Arm` interface over franky-control, with franky in a killable driver process.

Every call goes over a socketpair to ``drivers.franka.child`` and waits at most a bounded time.
If the driver process does not answer in time it is SIGKILLed (its TCP/UDP link to the arm dies
with it, which makes the arm stop: libfranka stops a motion whose command stream ends) and the call
raises ``RobotFault(FaultKind.HANG)``. `connect()` (or `recover()`) then starts a fresh process.

Three lines, so that a blocking call (a 15 s ``move_joints``) never holds up the two things other
threads must be able to do meanwhile: the command line (one call at a time), the stop line
(`stop()` preempts the running motion) and the read line (`state()`, served by its own thread in
the driver process from franky's state buffer, which the control loop refreshes at 1 kHz).

Nothing moves unless a command is called: connect only reads state and sets collision
thresholds; the gripper is not homed.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection

import numpy as np

from drivers.franka.replies import Reply
from rlhw.errors import ConfigError, FaultKind, RobotFault, WorkerError
from rlhw.hardware.types.franka import FrankaConfig, FrankaController
from rlhw.network import FCI_PORT, tcp_connect_problem
from rlhw.robot.arm import Arm, ArmState
from rlhw.robot.build import ArmBuild
from rlhw.robot.pose import Pose
from rlhw.robot.registry import register_arm

#: Mirrors drivers.franka.child.STOP_TIMEOUT_S (not imported: the child module is for the driver process).
STOP_TIMEOUT_S = 2.0

#: robot_ip -> the FrankaArm that owns it in this process (one controller per arm).
_owners: weakref.WeakValueDictionary[str, FrankaArm] = weakref.WeakValueDictionary()
_owners_lock = threading.Lock()


@register_arm("franka")
class FrankaArm(Arm):
    """A Franka FR3/Panda through FCI. ``FrankaArm(ip, FrankaController(realtime="ignore"))`` for franky-sim.

    ``controller`` is the validated `FrankaController` of the arm's hardware entry (the one schema of
    this driver's options; its defaults when None), ``gripper`` whether the Franka Hand is attached
    (the entry's ``gripper``), ``timeout_s`` the bound on every non-motion call (``env.driver_timeout_s``;
    above libfranka's own link timeout of about 1 s). Only one FrankaArm per robot_ip may exist in a
    process until it is closed: a second controller would fight the first.
    """

    name = "franka"

    def __init__(
        self, robot_ip: str, controller: FrankaController | None = None, *, gripper: bool = True, timeout_s: float = 3.0
    ):
        if not isinstance(robot_ip, str) or not robot_ip.strip():
            raise ConfigError("robot_ip", f"must be a host name or IP address string, got {robot_ip!r}")
        if not timeout_s > 1.0:
            raise ConfigError(
                "env.driver_timeout_s",
                f"the franka driver needs more than 1 s per call (libfranka's own link timeout is about 1 s), got {timeout_s}",
            )
        self.controller = controller if controller is not None else FrankaController()
        self.has_gripper = bool(gripper)
        self.timeout_s = float(timeout_s)
        self.robot_ip = robot_ip.strip()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._stop_line: socket.socket | None = None
        self._read_conn: Connection | None = None
        self._lock = threading.RLock()  # the command line: one call at a time
        self._read_lock = threading.Lock()  # the read line: one state() at a time
        self._wanted = False  # connect() called and close() not: recover() may reconnect
        self.info: dict = {}
        self.last_error: str | None = None
        self.robot_time_s: float | None = None
        self.robot_mode: str | None = None
        self._claim()
        self._finalizer = weakref.finalize(self, _kill_proc, None)

    @classmethod
    def from_plan(cls, build: ArmBuild) -> FrankaArm:
        """The arm of the plan's Franka hardware entry, with its validated controller, as the entry says."""
        hw = build.hardware
        if not isinstance(hw, FrankaConfig):
            raise ConfigError(
                "env.driver",
                "the franka driver needs a Franka hardware entry in the env component's node group "
                "(cluster.node_groups[*].hardware with type: Franka); for a simulator set env.sim=mujoco",
            )
        return cls(hw.robot_ip, hw.controller, gripper=hw.gripper, timeout_s=build.env.driver_timeout_s)

    # -- ownership -----------------------------------------------------------------------------
    @staticmethod
    def controlling(robot_ip: str) -> FrankaArm | None:
        """The FrankaArm of this process that controls ``robot_ip`` (one controller per arm), or None."""
        with _owners_lock:
            return _owners.get(robot_ip)

    def _claim(self) -> None:
        with _owners_lock:
            other = _owners.get(self.robot_ip)
            if other is not None and other is not self:
                raise ConfigError(
                    "robot_ip",
                    f"robot {self.robot_ip} is already controlled by another FrankaArm in this process; "
                    "close() that one first (one controller per arm)",
                )
            _owners[self.robot_ip] = self

    def _release(self) -> None:
        with _owners_lock:
            if _owners.get(self.robot_ip) is self:
                del _owners[self.robot_ip]

    # -- driver process ------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def driver_pid(self) -> int | None:
        """The driver process's id (None before connect): the one a hang report names, and an operator's
        handle on a stuck driver."""
        proc = self._proc
        return None if proc is None else proc.pid

    def connect(self, timeout_s: float = 10.0) -> None:
        with self._lock:
            self._claim()
            if self.connected:
                return
            self._drop()  # a process killed from the read or stop line leaves its sockets behind
            parent, child = socket.socketpair()
            stop_parent, stop_child = socket.socketpair()
            read_parent, read_child = socket.socketpair()
            fds = (child.fileno(), stop_child.fileno(), read_child.fileno())
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "drivers.franka.child", *map(str, fds)],
                    pass_fds=fds,
                    stdin=subprocess.DEVNULL,
                )
            finally:
                child.close()
                stop_child.close()
                read_child.close()
            self._conn = Connection(parent.detach())
            self._stop_line = stop_parent
            self._read_conn = Connection(read_parent.detach())
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _kill_proc, self._proc)
            self._wanted = True
            opts = {**self.controller.model_dump(), "gripper": self.has_gripper}
            try:
                self.info = self._call("connect", timeout_s, robot_ip=self.robot_ip, options=opts)
            except RobotFault as e:
                self._drop()
                if e.kind is FaultKind.NETWORK and tcp_connect_problem(self.robot_ip, FCI_PORT, 1.0) is not None:
                    raise RobotFault(
                        FaultKind.NETWORK,
                        f"cannot reach {self.robot_ip}:{FCI_PORT} (FCI): check the cable/IP and that FCI is enabled "
                        f"in Desk, or that franky-sim serves this address ({e})",
                    ) from None
                raise
            if self.has_gripper and "gripper_max_width" in self.info:
                self.max_gripper_width = float(self.info["gripper_max_width"])

    def _call(self, op: str, wait_s: float, **kwargs):
        with self._lock:
            if not self.connected or self._conn is None:
                if self._proc is not None:
                    code = self._proc.poll()
                    self._drop()
                    raise RobotFault(
                        FaultKind.NETWORK,
                        f"driver process for {self.robot_ip} exited (code {code}); call connect() or recover()",
                    )
                raise RobotFault(FaultKind.NOT_CONNECTED, f"arm {self.robot_ip} is not connected; call connect() first")
            try:
                self._conn.send((op, kwargs))
                if not self._conn.poll(wait_s):
                    pid = self._proc.pid
                    self._drop()
                    raise RobotFault(
                        FaultKind.HANG,
                        f"franky did not answer '{op}' within {wait_s:.1f}s (arm {self.robot_ip}); killed driver "
                        f"process {pid}, which also drops its link to the arm; connect() or recover() starts a fresh one",
                    )
                reply = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError) as e:
                code = self._proc.poll() if self._proc else None
                self._drop()
                raise RobotFault(
                    FaultKind.NETWORK, f"driver process for {self.robot_ip} died during '{op}' (exit code {code}): {e}"
                ) from None
        return self._result(op, reply)

    def _result(self, op: str, reply: tuple, read_from: subprocess.Popen | None = None):
        if reply[0] == Reply.OK:
            return reply[1]
        if reply[0] == Reply.BUG:
            self.last_error = reply[1]
            raise WorkerError(f"franka-driver[{self.robot_ip}]", f"'{op}' failed", reply[1])
        _, kind, message = reply  # Reply.FAULT: a FaultKind (the child sends the enum itself)
        self.last_error = message
        if kind is FaultKind.NETWORK:
            # libfranka drops the connection on a network error; a fresh process is needed anyway.
            # From the read line, never wait for a thread inside a blocking call on the command
            # line: that call fails the same way and drops the process then.
            if read_from is None:
                with self._lock:
                    self._drop()
            else:
                self._drop_unless_busy(read_from)
        raise RobotFault(kind, f"{self.robot_ip}: {message}")

    def _read(self, op: str, wait_s: float):
        """One call over the read line: it never waits for the command line, so state() answers
        while another thread is inside a blocking move_joints / recover / gripper call. The same
        bound as a command: no answer within ``wait_s`` kills the driver process."""
        with self._read_lock:
            proc, conn = self._proc, self._read_conn
            if proc is None or conn is None:
                raise RobotFault(FaultKind.NOT_CONNECTED, f"arm {self.robot_ip} is not connected; call connect() first")
            code = proc.poll()
            if code is not None:
                self._drop_unless_busy(proc)
                raise RobotFault(
                    FaultKind.NETWORK,
                    f"driver process for {self.robot_ip} exited (code {code}); call connect() or recover()",
                )
            try:
                conn.send((op, {}))
                if not conn.poll(wait_s):
                    # Kill, not _drop(): another thread may be inside a call on the command line;
                    # it then sees the process gone and drops it (as after an urgent stop).
                    _kill_proc(proc)
                    self._drop_unless_busy(proc)
                    raise RobotFault(
                        FaultKind.HANG,
                        f"franky did not answer '{op}' within {wait_s:.1f}s on the read line (arm {self.robot_ip}); "
                        f"killed driver process {proc.pid}, which also drops its link to the arm; "
                        "connect() or recover() starts a fresh one",
                    )
                reply = conn.recv()
            except (EOFError, OSError) as e:
                code = proc.poll()
                _kill_proc(proc)
                self._drop_unless_busy(proc)
                raise RobotFault(
                    FaultKind.NETWORK, f"driver process for {self.robot_ip} died during '{op}' (exit code {code}): {e}"
                ) from None
        return self._result(op, reply, read_from=proc)

    def _drop_unless_busy(self, proc: subprocess.Popen) -> None:
        """_drop() ``proc`` when no other thread is inside a call on the command line (never waits
        for one) and no connect() has replaced it meanwhile."""
        if self._lock.acquire(blocking=False):
            try:
                if self._proc is proc:
                    self._drop()
            finally:
                self._lock.release()

    def _drop(self) -> None:
        """Kill the driver process now (no goodbye: it may be stuck in C++)."""
        proc, conn, line, read_conn = self._proc, self._conn, self._stop_line, self._read_conn
        self._proc = self._conn = self._stop_line = self._read_conn = None
        for end in (line, conn, read_conn):
            if end is not None:
                try:
                    end.close()
                except OSError:
                    pass
        if proc is not None:
            _kill_proc(proc)

    def close(self) -> None:
        with self._lock:
            self._wanted = False
            if self.connected and self._conn is not None:
                try:
                    self._conn.send(("close", {}))
                    if self._conn.poll(min(3.0, self.timeout_s)):
                        self._conn.recv()
                except (EOFError, OSError):
                    pass
                try:
                    self._proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
            self._drop()
            self._release()

    # -- Arm interface -----------------------------------------------------------------------------
    def state(self) -> ArmState:
        """The arm's state. Safe from any thread, and answers while another thread is inside a
        blocking call (it goes over the read line, not the command line)."""
        d = self._read("state", self.timeout_s)
        # The controller's own clock: against wall time it shows a simulator's real-time factor.
        self.robot_time_s = d["robot_time_s"]
        self.robot_mode = d["robot_mode"]
        return ArmState(
            timestamp=d["timestamp"],
            q=d["q"],
            dq=d["dq"],
            pose=Pose.from_vector(d["ee_pose"]),  # the pipe carries the 7-vector [x, y, z, qx, qy, qz, qw]
            gripper_width=d["gripper_width"],
            errors=tuple(d["errors"]),
            external_wrench=d.get("external_wrench"),
        )

    def command_pose(self, pose: Pose) -> None:
        # finite, with a unit quaternion: a Pose checks that when it is made; the pipe takes the 7-vector
        self._call("command_pose", self.timeout_s, pose=pose.vector)

    def command_gripper(self, width: float) -> None:
        width = float(width)
        if not math.isfinite(width):
            raise ValueError(f"gripper width must be a finite number of metres, got {width}")
        width = min(max(width, 0.0), self.max_gripper_width)
        self._call("command_gripper", self.timeout_s, width=width)

    def move_joints(self, q: np.ndarray, speed_factor: float = 0.2, timeout_s: float = 15.0) -> None:
        q = np.asarray(q, dtype=float)
        if q.shape != (7,) or not np.all(np.isfinite(q)):
            raise ValueError(f"q must be 7 finite joint angles (rad), got {q!r}")
        if not 0 < speed_factor <= 1:
            raise ValueError(f"speed_factor must be in (0, 1], got {speed_factor}")
        # The child stops the arm itself at timeout_s (a bounded stop motion, STOP_TIMEOUT_S); the
        # margin covers that stop plus one ordinary call.
        self._call(
            "move_joints",
            timeout_s + STOP_TIMEOUT_S + self.timeout_s,
            q=q,
            speed_factor=float(speed_factor),
            timeout_s=float(timeout_s),
        )

    def stop(self) -> None:
        """Bring the arm to rest. Safe from any thread: when another thread is inside a call
        (e.g. a blocking move_joints), the stop goes over a separate line and preempts it."""
        if not self.connected:
            return  # a dropped link already stopped the arm (libfranka halts without commands)
        if self._lock.acquire(blocking=False):
            try:
                self._call("stop", self.timeout_s)
            finally:
                self._lock.release()
            return
        self._urgent_stop()

    def _urgent_stop(self) -> None:
        line = self._stop_line
        try:
            if line is None:
                raise OSError("no stop line")
            line.settimeout(self.timeout_s)
            line.sendall(b"s")
            if line.recv(1) == b"k":
                return
        except OSError:
            pass
        # No acknowledgement: the driver process is stuck. Killing it drops the link, which stops
        # the arm; the call in the other thread then fails with a network fault.
        proc = self._proc
        if proc is not None:
            _kill_proc(proc)
        raise RobotFault(
            FaultKind.HANG, f"driver process for {self.robot_ip} did not acknowledge stop(); killed it to drop the link"
        )

    def recover(self, timeout_s: float = 5.0) -> bool:
        """Automatic error recovery; restarts the driver process first when a fault killed it.

        Returns False (reason in ``last_error``) rather than raising for a failed recovery, so the
        env can count strikes; raises only when the arm was never connected.
        """
        if not self._wanted and not self.connected:
            raise RobotFault(FaultKind.NOT_CONNECTED, f"arm {self.robot_ip} is not connected; call connect() first")
        deadline = time.monotonic() + timeout_s
        try:
            if not self.connected:
                self.connect(timeout_s=max(1.0, deadline - time.monotonic()))
            ok = bool(self._call("recover", max(0.5, deadline - time.monotonic())))
            if not ok:
                self.last_error = "recover_from_errors() returned False"
                return False
            return not self.state().errors
        except RobotFault as e:
            self.last_error = str(e)
            return False

    # -- extras ------------------------------------------------------------------------------------
    def ping(self, timeout_s: float = 2.0) -> float:
        """Round-trip time to the driver process (s); proves the process is alive and answering."""
        t = time.perf_counter()
        self._call("ping", timeout_s)
        return time.perf_counter() - t

    def robot_info(self) -> dict:
        return self._call("info", self.timeout_s)

    def __repr__(self) -> str:
        return f"FrankaArm({self.robot_ip!r}, connected={self.connected})"


def _kill_proc(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.kill()
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass
