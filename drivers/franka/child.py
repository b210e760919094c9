"""The driver process: the only place franky objects live, served by a `FrankyArmServer`.

Run as ``python -m drivers.franka.child FD [STOP_FD [READ_FD]]``; FD is one end of a socketpair
wrapped in a `multiprocessing.connection.Connection` (the command line). The parent sends
``(op, kwargs)`` and reads back ``("ok", value)``, ``("fault", FaultKind, message)`` or ``("bug",
message)`` (see `drivers.franka.replies.Reply`). STOP_FD is the stop line (a byte in, a byte back: see
`FrankyArmServer.listen_for_urgent_stops`); READ_FD is the read line,
a second Connection served by its own thread with the same messages, for the read-only ops in
`READ_OPS`, so that a state read never waits behind a blocking move on the command line.

Why a separate process: libfranka can block for tens of seconds (or forever) when the link dies
(FIELD-NOTES: ``move()`` > 40 s, ``recover_from_errors()`` > 30 s), and a thread stuck in C++ cannot
be interrupted. The parent bounds every call and SIGKILLs this process on a hang.

Two guards run here, independent of the parent:
- if the parent goes away (pipe EOF, or the kernel's parent-death signal), the arm is stopped;
- if streaming Cartesian targets stop arriving for ``watchdog_s`` while a motion is active, the
  arm is stopped (a silent controller must not leave a motion running).
The gripper runs on its own thread with a latest-target slot (drivers.franka.gripper).
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

import numpy as np

from drivers.franka.gripper import GripperWorker
from drivers.franka.replies import Reply
from rlhw.errors import FaultKind

#: Bound on waiting for a stop motion to bring the arm to rest (s, wall time).
STOP_TIMEOUT_S = 2.0
#: Ops the read line serves. Read-only by construction: none of them commands the arm. franky's
#: Robot.state is safe from a second thread during a motion (it returns the state buffer its
#: control loop refreshes every 1 ms, and serialises its own readOnce when idle).
READ_OPS = frozenset({"state"})


def fault_kind(exc: BaseException) -> FaultKind | None:
    """The `FaultKind` of a franky exception, by its type; None for an exception that is no franky
    fault (a bug). libfranka raises NetworkException for every lost TCP/UDP link ("TCP receive",
    "UDP receive: Timeout", "TCP connection got interrupted") and ProtocolException when the link's
    byte stream is out of step ("Incorrect TCP message size"): both mean a fresh connection."""
    import franky

    if isinstance(exc, (franky.NetworkException, franky.ProtocolException)):
        return FaultKind.NETWORK
    if isinstance(exc, (franky.RealtimeException, franky.IncompatibleVersionException)):
        return FaultKind.NOT_CONNECTED
    # ControlException, CommandException, GripperException, InvalidOperationException, ModelException
    # and franky's own (InvalidMotionTypeException, ...): the arm refused or stopped a motion.
    if isinstance(exc, franky.Exception) or type(exc).__module__.startswith("franky"):
        return FaultKind.REFLEX
    return None


def hint(kind: FaultKind, exc: BaseException) -> str:
    import franky

    if isinstance(exc, franky.RealtimeException):
        return (
            " (no realtime kernel: set realtime: ignore for franky-sim / test machines, keep 'enforce' on the robot PC)"
        )
    if isinstance(exc, franky.IncompatibleVersionException):
        return " (libfranka in franky does not match the robot's system version: install the franky-control build for your firmware)"
    if kind is FaultKind.NETWORK:
        return (
            " (is FCI enabled in Desk and the control box reachable? for franky-sim: is the simulator still running?)"
        )
    return ""


class FrankyArmServer:
    """Owns the franky Robot (and gripper) of this process and serves the parent's ops on it
    (``op_<name>``), plus the urgent-stop and read lines and the streaming watchdog."""

    def __init__(self):
        self.robot = None
        self.gripper: GripperWorker | None = None
        self.options: dict = {}
        self.tracker = None
        self.last_target: np.ndarray | None = None
        self.motion_kind = "cartesian"
        self.last_pose_cmd = 0.0
        self.streaming = False
        self.watchdog_stops = 0
        self.urgent_stop = threading.Event()

    def listen_for_urgent_stops(self, sock: socket.socket) -> None:
        """Thread: a byte on the stop line preempts whatever motion runs, even while the main
        thread is busy in a blocking op (move_joints). franky's Robot.stop() is meant for exactly
        this: it preempts a motion running in another thread."""
        while True:
            try:
                data = sock.recv(1)
            except OSError:
                return
            if not data:
                return
            self.urgent_stop.set()
            self.streaming = False
            try:
                if self.robot is not None:
                    self.robot.stop()
                reply = b"k"
            except Exception:
                reply = b"e"
            try:
                sock.sendall(reply)
            except OSError:
                return

    def serve_reads(self, conn: Connection) -> None:
        """Thread: answers the read line. The main thread may be inside any blocking op meanwhile;
        ops here only read (READ_OPS), so they cannot interfere with a motion."""
        while True:
            try:
                op, kwargs = conn.recv()
            except (EOFError, OSError):
                return  # parent gone: the main thread sees EOF on its own line and stops the arm
            if op in READ_OPS:
                reply = execute(self, op, kwargs)
            else:
                reply = (Reply.BUG, f"'{op}' is not a read-only op ({sorted(READ_OPS)}); send it over the command line")
            try:
                conn.send(reply)
            except (EOFError, OSError):
                return

    # -- ops ---------------------------------------------------------------------------------
    def op_connect(self, robot_ip: str, options: dict) -> dict:
        import franky

        self.options = options
        rt = franky.RealtimeConfig.Enforce if options["realtime"] == "enforce" else franky.RealtimeConfig.Ignore
        self.robot = franky.Robot(
            robot_ip, realtime_config=rt, relative_dynamics_factor=options["relative_dynamics_factor"]
        )
        self.robot.set_collision_behavior(
            list(options["collision_torque_thresholds_nm"]), list(options["collision_force_thresholds_n"])
        )
        if options.get("joint_impedance"):
            self.robot.set_joint_impedance(list(options["joint_impedance"]))
        if options.get("cartesian_impedance"):
            self.robot.set_cartesian_impedance(list(options["cartesian_impedance"]))
        info = {"robot_mode": str(self.robot.state.robot_mode).split(".")[-1]}
        if options["gripper"]:
            try:
                g = franky.Gripper(robot_ip)
            except Exception as e:
                raise _Fault(
                    FaultKind.NOT_CONNECTED,
                    f"the gripper at {robot_ip}:1338 did not answer ({type(e).__name__}: {e}); "
                    "set gripper: false if this arm has no Franka Hand",
                ) from None
            self.gripper = GripperWorker(g, options["gripper_speed"], options["gripper_force"])
            info["gripper_max_width"] = self.gripper.max_width
            info["gripper_server_version"] = int(g.server_version)
        return info

    def op_state(self) -> dict:
        # Local references: the main thread may clear self.robot / self.gripper (close) meanwhile.
        robot, gripper = self.robot, self.gripper
        if robot is None:
            raise _Fault(FaultKind.NOT_CONNECTED, "driver process has no robot connection")
        s = robot.state
        now = time.time()
        ee = s.O_T_EE
        errors = [name for name in _error_names(s.current_errors)]
        mode = str(s.robot_mode).split(".")[-1]
        if mode in ("Reflex", "UserStopped", "Other"):
            errors.append(f"mode_{mode.lower()}")
        width = float(gripper.gripper.width) if gripper else 0.0
        return {
            "timestamp": now,
            "q": np.asarray(s.q, dtype=float),
            "dq": np.asarray(s.dq, dtype=float),
            "ee_pose": np.concatenate([np.asarray(ee.translation, float), np.asarray(ee.quaternion, float)]),
            "gripper_width": width,
            "errors": tuple(errors),
            # estimated external wrench at the stiffness frame (the EE by default), base frame
            "external_wrench": np.asarray(s.O_F_ext_hat_K, dtype=float),
            "robot_mode": mode,
            "robot_time_s": float(s.time.to_sec()),
        }

    def op_command_pose(self, pose: np.ndarray) -> None:
        import franky

        target = franky.Affine(np.asarray(pose[:3], float), np.asarray(pose[3:], float))
        if self.options["control"] == "impedance":
            if self.tracker is None or not self.tracker.is_running:
                from franky.tracker import CartesianImpedanceTracker

                self.tracker = None
                self._ensure_idle()

                self.tracker = CartesianImpedanceTracker(
                    self.robot,
                    translational_stiffness=self.options["translational_stiffness"],
                    rotational_stiffness=self.options["rotational_stiffness"],
                )
            self.tracker.set_target(target)
        else:
            if self.motion_kind != "cartesian":
                self._ensure_idle()  # e.g. a joint move that timed out and is still decelerating
            same = self.last_target is not None and np.allclose(pose, self.last_target, atol=1e-4)
            if not (same and self.robot.is_in_control):
                # A new target preempts the running motion (velocity-continuous). Re-sending an
                # unchanged target would restart the trajectory and slow the arm down, so skip it.
                motion = franky.CartesianMotion(target, franky.ReferenceType.Absolute)
                self.robot.move(motion, asynchronous=True)
                self.motion_kind = "cartesian"
                self.last_target = np.array(pose, dtype=float)
        self.last_pose_cmd = time.monotonic()
        self.streaming = True

    def op_command_gripper(self, width: float) -> None:
        if self.gripper is None:
            raise _Fault(FaultKind.NOT_CONNECTED, "this arm was connected with gripper disabled (gripper: false)")
        busy = self.gripper.busy_since
        if busy is not None and time.monotonic() - busy > self.options["gripper_timeout_s"]:
            raise _Fault(
                FaultKind.TIMEOUT,
                f"gripper has not finished its previous command after {self.options['gripper_timeout_s']}s",
            )
        try:
            self.gripper.command(float(width))
        except RuntimeError as e:
            raise _Fault(FaultKind.REFLEX, str(e)) from None

    def op_move_joints(self, q: np.ndarray, speed_factor: float, timeout_s: float) -> None:
        import franky

        self._ensure_idle()
        self.last_target = None
        # franky scales a motion's factor by the robot-wide relative_dynamics_factor, so the two
        # multiply (0.2 x 0.1 gave 2 % of max speed and homing never finished). `speed_factor` means
        # a fraction of the arm's maximum joint dynamics, capped by the robot-wide factor.
        robot_factor = float(self.options["relative_dynamics_factor"])
        motion_factor = min(float(speed_factor), robot_factor) / robot_factor
        motion = franky.JointMotion(np.asarray(q, float), relative_dynamics_factor=motion_factor)
        self.robot.move(motion, asynchronous=True)
        self.motion_kind = "joint"
        self.streaming = False
        deadline = time.monotonic() + timeout_s
        self.urgent_stop.clear()
        while time.monotonic() < deadline:
            try:
                if self.robot.join_motion(min(0.1, max(0.0, deadline - time.monotonic()))):
                    self._settle(np.asarray(q, float), deadline)
                    return None
            except Exception:
                if self.urgent_stop.is_set():
                    raise _Fault(
                        FaultKind.STOPPED, "joint move interrupted by stop() from another thread; the arm was stopped"
                    ) from None
                raise
        self._halt()
        raise _Fault(FaultKind.TIMEOUT, f"joint move did not finish within {timeout_s}s; the arm was stopped")

    def op_stop(self) -> None:
        self._halt()

    def op_recover(self) -> bool:
        self._stop_tracker()
        return bool(self.robot.recover_from_errors())

    def op_close(self) -> None:
        self.shutdown()

    def op_ping(self) -> str:
        return "pong"

    def op_info(self) -> dict:
        import franky

        s = self.robot.state
        return {
            "franky_version": getattr(franky, "__version__", "unknown"),
            "robot_mode": str(s.robot_mode).split(".")[-1],
            "control_command_success_rate": float(s.control_command_success_rate),
            "gripper_server_version": int(self.gripper.gripper.server_version) if self.gripper else None,
        }

    # -- helpers -------------------------------------------------------------------------------
    def _stop_tracker(self) -> None:
        """End impedance tracking with franky's TorqueStopMotion (damps the arm to rest), bounded."""
        if self.tracker is None:
            return
        self.tracker = None
        import franky

        self._stop_with(franky.TorqueStopMotion())

    def _stop_with(self, stop_motion) -> None:
        if self.robot is None or not self.robot.is_in_control:
            return
        try:
            self.robot.move(stop_motion, asynchronous=True)
            if self.robot.join_motion(STOP_TIMEOUT_S):
                return
        except Exception as e:
            if fault_kind(e) is FaultKind.NETWORK:
                raise
            if not self.robot.is_in_control:
                return  # the stop motion was preempted (an urgent stop) or ended: nothing runs
        # The stop motion did not finish in time (or could not start): preempt everything.
        self.robot.stop()
        try:
            self.robot.join_motion(1.0)
        except Exception as e:
            if fault_kind(e) is FaultKind.NETWORK:
                raise

    def _ensure_idle(self) -> None:
        """franky refuses a motion of another type while one runs (InvalidMotionTypeException):
        bring any running motion to rest first, bounded."""
        if self.robot is None or not self.robot.is_in_control:
            return
        self._halt()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.robot.is_in_control and time.monotonic() < deadline:
            try:
                self.robot.join_motion(0.1)
            except Exception as e:
                if fault_kind(e) is FaultKind.NETWORK:
                    raise
        if self.robot.is_in_control:
            raise _Fault(FaultKind.TIMEOUT, f"the previous motion did not come to rest within {STOP_TIMEOUT_S}s")

    def _settle(self, q: np.ndarray, deadline: float, tolerance_rad: float = 5e-3, limit_s: float = 2.0) -> None:
        """Wait (bounded) until the measured joints are at ``q``: the trajectory ends on time, but the
        joints trail it (franky-sim by ~0.025 rad at 20 % speed), and callers of a blocking move
        expect the arm to be there when it returns."""
        end = min(deadline, time.monotonic() + limit_s)
        while time.monotonic() < end:
            if np.abs(np.asarray(self.robot.state.q, float) - q).max() < tolerance_rad:
                return
            time.sleep(0.01)

    def _halt(self) -> None:
        """Bring the arm to rest: a decelerating stop motion of the running kind, not an abrupt cut."""
        import franky

        self.streaming = False
        self.last_target = None
        if self.tracker is not None:
            self._stop_tracker()
            return
        if self.robot is None:
            return
        stop = franky.JointStopMotion() if self.motion_kind == "joint" else franky.CartesianStopMotion()
        self._stop_with(stop)

    def watchdog(self) -> None:
        watchdog_s = self.options.get("watchdog_s")
        if self.streaming and watchdog_s and time.monotonic() - self.last_pose_cmd > watchdog_s:
            self.watchdog_stops += 1
            try:
                self._halt()
            except Exception:
                pass

    def shutdown(self) -> None:
        try:
            self._halt()
        except Exception:
            pass
        if self.gripper is not None:
            self.gripper.close()
            self.gripper = None
        self.robot = None


class _Fault(Exception):
    def __init__(self, kind: FaultKind, message: str):
        self.kind = kind
        super().__init__(message)


def _error_names(errors) -> list[str]:
    """Names of the active flags in a franky.Errors (libfranka's error struct)."""
    names = []
    for name in dir(errors):
        if name.startswith("_"):
            continue
        try:
            value = getattr(errors, name)
        except Exception:
            continue
        if isinstance(value, bool) and value:
            names.append(name)
    return names


def execute(server: FrankyArmServer, op: str, kwargs: dict) -> tuple:
    """Run one op and build its `Reply`; franky exceptions become fault kinds, never escape."""
    try:
        if server.robot is None and op not in ("connect", "close", "ping"):
            raise _Fault(FaultKind.NOT_CONNECTED, "driver process has no robot connection")
        return (Reply.OK, getattr(server, f"op_{op}")(**kwargs))
    except _Fault as e:
        return (Reply.FAULT, e.kind, str(e))
    except Exception as e:
        kind = fault_kind(e)
        if kind is None:
            return (Reply.BUG, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        return (Reply.FAULT, kind, f"{type(e).__name__}: {e}{hint(kind, e)}")


def serve(conn: Connection, stop_line: socket.socket | None = None, read_line: Connection | None = None) -> None:
    server = FrankyArmServer()
    if stop_line is not None:
        threading.Thread(
            target=server.listen_for_urgent_stops, args=(stop_line,), name="stop-line", daemon=True
        ).start()
    if read_line is not None:
        threading.Thread(target=server.serve_reads, args=(read_line,), name="read-line", daemon=True).start()
    while True:
        try:
            ready = conn.poll(0.02)
        except (EOFError, OSError):
            break
        if not ready:
            server.watchdog()
            continue
        try:
            op, kwargs = conn.recv()
        except (EOFError, OSError):
            break  # parent gone: stop the arm below
        if op != "command_pose":
            server.watchdog()
        reply = execute(server, op, kwargs)
        try:
            conn.send(reply)
        except (EOFError, OSError):
            break
        if op == "close":
            return
    server.shutdown()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C goes to the parent; it closes us properly
    # Parent death is seen as EOF on the socket (the kernel closes the parent's end), which
    # works whatever thread started us; PR_SET_PDEATHSIG would fire when that *thread* exits.
    conn = Connection(int(argv[0]))
    stop_line = socket.socket(fileno=int(argv[1])) if len(argv) > 1 else None
    read_line = Connection(int(argv[2])) if len(argv) > 2 else None
    signal.signal(signal.SIGTERM, lambda *_: conn.close())
    serve(conn, stop_line, read_line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
