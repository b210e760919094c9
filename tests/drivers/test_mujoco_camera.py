"""Offscreen-rendered sim cameras (drivers.mujoco.MujocoCamera). Frames are slow on CPU: few and small."""

from __future__ import annotations

import numpy as np
import pytest

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from drivers.mujoco import MujocoArm, MujocoCamera, _gl, scene_camera_for
from rlhw.errors import RobotFault
from rlhw.robot.pose import Pose
from rlhw.robot.registry import make_arm, make_camera

pytestmark = pytest.mark.timeout(180)

DOWN = np.array([1.0, 0.0, 0.0, 0.0])


@pytest.fixture(scope="module")
def rig():
    arm = MujocoArm(name="cam-test", cube=True)
    arm.connect()
    arm.set_object_pose("cube", Pose((0.5, 0.0, 0.025)))
    front = MujocoCamera("front", arm, width=64, height=48)
    wrist = MujocoCamera("cam-1", arm, width=64, height=48, index=1)
    front.open()
    wrist.open()
    yield arm, front, wrist
    front.close()
    wrist.close()
    arm.close()


def test_an_offscreen_backend_was_chosen_before_mujoco_was_imported():
    ok, why = _gl.headless_ready()
    assert ok, why
    assert _gl.CHOICE.startswith("MUJOCO_GL=")


def test_frames_have_the_configured_shape_dtype_and_real_content(rig):
    arm, front, wrist = rig
    arm.advance(0.1)
    for cam in (front, wrist):
        frame = cam.latest()
        assert frame.color.shape == (48, 64, 3)
        assert frame.color.dtype == np.uint8
        assert frame.depth is None
        # A rendered scene, not a blank buffer: many distinct colours and real contrast.
        assert frame.color.std() > 10
        assert len(np.unique(frame.color.reshape(-1, 3), axis=0)) > 50


def test_indices_increase_only_when_simulated_time_advances(rig):
    arm, front, _ = rig
    arm.advance(0.1)
    first = front.latest()
    again = front.latest()
    assert again.index == first.index  # same simulated instant: no second render
    assert again.color is first.color
    arm.advance(0.1)
    second = front.latest()
    assert second.index == first.index + 1
    assert second.timestamp > first.timestamp  # wall-clock capture times
    assert second.timestamp == arm.state().timestamp  # the frame shows the state of that instant


def test_wrist_camera_sees_the_hand_move_while_the_front_camera_sees_the_arm(rig):
    arm, front, wrist = rig
    arm.advance(0.1)
    w0, f0 = wrist.latest().color.astype(int), front.latest().color.astype(int)
    target = Pose(arm.state().ee_position + [0.0, 0.12, -0.15], DOWN)
    for _ in range(8):
        arm.command_pose(target)
        arm.advance(0.1)
    w1, f1 = wrist.latest().color.astype(int), front.latest().color.astype(int)
    assert np.abs(w1 - w0).mean() > 5
    assert np.abs(f1 - f0).mean() > 0.5


def test_wait_frame_returns_a_newer_frame_or_reports_a_stall_when_time_stands_still(rig):
    arm, front, _ = rig
    arm.advance(0.1)
    frame = front.wait_frame(timeout_s=1.0)
    with pytest.raises(RobotFault) as e:
        front.wait_frame(timeout_s=0.05)
    assert e.value.kind == "camera_stall"
    arm.advance(0.1)
    assert front.wait_frame(timeout_s=0.05).index == frame.index + 1


def test_intrinsics_follow_the_scene_cameras_field_of_view(rig):
    arm, front, wrist = rig
    intr = front.intrinsics
    assert (intr.width, intr.height) == (64, 48)
    fovy = np.deg2rad(arm.model.cam_fovy[arm.model.camera("front").id])
    assert intr.fy == pytest.approx(24 / np.tan(fovy / 2))
    assert intr.fx == intr.fy and (intr.cx, intr.cy) == (32, 24)
    assert wrist.intrinsics.fy < intr.fy  # the wrist camera is wider-angle
    assert front.fps > 0


def test_camera_names_map_to_scene_cameras_by_name_then_by_position():
    assert scene_camera_for("wrist", 0) == "wrist"
    assert [scene_camera_for(f"serial{i}", i) for i in range(4)] == ["front", "wrist", "side", "table"]
    with pytest.raises(ValueError, match="only 4 cameras"):
        scene_camera_for("serial9", 4)


def test_camera_refuses_a_non_mujoco_arm_and_reads_before_open():
    with pytest.raises(ValueError, match="MujocoArm"):
        MujocoCamera("front", arm=object())
    arm = MujocoArm()
    arm.connect()
    cam = MujocoCamera("front", arm)
    with pytest.raises(RobotFault) as e:
        cam.latest()
    assert e.value.kind == "not_connected"
    cam.close()  # closing an unopened camera is fine


def test_registry_builds_mujoco_arm_and_camera_with_the_factorys_arguments():
    arm = make_arm("mujoco", name="reg", seed=3, home_q=(0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785))
    cam = make_camera("mujoco", serial="side", arm=arm, width=32, height=32, index=0)
    assert isinstance(arm, MujocoArm) and isinstance(cam, MujocoCamera)
    assert cam.scene_camera == "side"


def test_cameras_of_many_arms_share_one_gl_context_yet_show_their_own_arm():
    still, moving = MujocoArm(name="still"), MujocoArm(name="moving")
    for a in (still, moving):
        a.connect()
    cams = [MujocoCamera("front", a, width=32, height=32) for a in (still, moving)]
    try:
        for c in cams:
            c.open()
        assert cams[0].render_thread is cams[1].render_thread is not None  # one context (~100 MiB in software GL)
        target = Pose(moving.state().ee_position + [0.1, 0.15, -0.2], DOWN)
        for _ in range(10):
            moving.command_pose(target)
            moving.advance(0.1)
            still.advance(0.1)
        a, b = (c.latest().color.astype(int) for c in cams)
        assert np.abs(a - b).mean() > 1  # each camera drew its own arm's state
    finally:
        for c in cams:
            c.close()
    assert cams[0].render_thread is None


def test_camera_renders_even_when_mujoco_was_imported_before_the_driver_chose_a_backend():
    # A fresh interpreter: mujoco first with MUJOCO_GL unset (it picks GLFW, which needs a display).
    import os
    import subprocess
    import sys

    script = (
        "import mujoco\n"
        "from drivers.mujoco import MujocoArm, MujocoCamera, _gl\n"
        "a = MujocoArm(); a.connect(); a.advance(0.1)\n"
        "c = MujocoCamera('front', a, width=16, height=16); c.open()\n"
        "f = c.latest(); c.close()\n"
        "print(f.color.shape, float(f.color.std()) > 1, _gl.CHOICE)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(16, 16, 3) True" in out.stdout and "switched after mujoco was imported first" in out.stdout


def test_collision_meshes_draw_the_same_scene_with_the_arm_coarser():
    """The fast choice for image training on a CPU is checked against the default: the same frame format,
    one GL context, few pixels different (the arm's), and a moved cube seen in the same pixels by both."""
    arm = MujocoArm(name="meshes", cube=True)
    arm.connect()
    arm.set_object_pose("cube", Pose((0.45, 0.05, 0.025)))
    cams = [MujocoCamera("front", arm, width=64, height=64, meshes=m) for m in ("visual", "collision")]
    try:
        for c in cams:
            c.open()
        assert cams[0].render_thread is cams[1].render_thread is not None  # one GL context: the choice is per render
        arm.advance(0.1)
        visual, collision = (c.latest().color for c in cams)
        assert visual.shape == collision.shape == (64, 64, 3) and collision.dtype == np.uint8
        differs = np.abs(visual.astype(int) - collision.astype(int)).max(axis=2) > 8
        assert 0.005 < differs.mean() < 0.25  # the arm is drawn differently, the rest is the same
        alone = MujocoCamera("front", arm, width=64, height=64, meshes="collision")
        alone.open()
        arm.set_object_pose("cube", Pose((0.40, -0.05, 0.025)))  # the cube shows in both renderings alike
        arm.advance(0.1)
        moved_v, moved_c = cams[0].latest().color.astype(int), alone.latest().color.astype(int)
        alone.close()
        cube_v = np.abs(moved_v - visual.astype(int)).max(axis=2) > 8
        cube_c = np.abs(moved_c - collision.astype(int)).max(axis=2) > 8
        assert cube_v.sum() > 10 and (cube_v & cube_c).sum() >= 0.8 * cube_v.sum()
    finally:
        for c in cams:
            c.close()
        arm.close()


def test_an_unknown_mesh_choice_is_refused_naming_the_choices():
    arm = MujocoArm()
    with pytest.raises(ValueError, match=r"meshes: 'fine' is not one of \['visual', 'collision'\]"):
        MujocoCamera("front", arm, meshes="fine")


def test_a_camera_opened_on_one_thread_renders_for_any_other_on_the_thread_that_owns_its_context():
    """MuJoCo's GL context belongs to one thread (EGL refuses any other): a served env opens its cameras on
    one thread and reads them from gRPC pool threads, so every render runs on the context's own thread."""
    import threading

    arm = MujocoArm(name="threads")
    arm.connect()
    opened: dict = {}
    opener = threading.Thread(target=lambda: opened.setdefault("cam", MujocoCamera("front", arm, width=32, height=32)))
    opener.start()
    opener.join(30)
    cam = opened["cam"]
    on_opener = threading.Thread(target=cam.open)
    on_opener.start()
    on_opener.join(30)
    frames, where = [], []

    def read() -> None:
        arm.advance(0.05)
        frames.append(cam.latest().color)
        where.append(cam.render_thread.call(lambda renderer: threading.current_thread()))

    try:
        for _ in range(3):  # a new thread each time, as a pool may pick any of its threads
            reader = threading.Thread(target=read)
            reader.start()
            reader.join(30)
        read()  # and the test's own thread
        assert len(frames) == 4 and all(f.shape == (32, 32, 3) and f.std() > 10 for f in frames)
        owner = cam.render_thread.thread
        assert set(where) == {owner} and owner.name.startswith("rlhw-render-")
    finally:
        thread = cam.render_thread.thread
        cam.close()
        arm.close()
    assert not thread.is_alive()  # the last user's close freed the context on its thread and ended it


def test_a_render_that_overruns_its_timeout_is_a_camera_stall_and_the_next_frame_renders():
    import threading

    from rlhw.errors import FaultKind

    arm = MujocoArm(name="stuck")
    arm.connect()
    cam = MujocoCamera("front", arm, width=24, height=24)
    cam.open()
    release = threading.Event()
    try:
        with pytest.raises(RobotFault) as stalled:
            cam.render_thread.call(lambda renderer: release.wait(30), timeout_s=0.05)
        assert stalled.value.kind is FaultKind.CAMERA_STALL and "took over 0.05 s" in str(stalled.value)
        release.set()  # the stuck work ends; the thread goes on with the next frame
        arm.advance(0.05)
        assert cam.latest().color.std() > 10
    finally:
        release.set()
        cam.close()
        arm.close()


def test_a_process_forked_after_rendering_is_refused_naming_spawn_and_the_parent_renders_on():
    """Mesa cannot make a GL context in a child forked from a process that has one (it hangs holding the
    GIL); the child is told so at once, for the parent's cameras and for new ones."""
    import subprocess
    import sys

    script = (
        "import os\n"
        "from drivers.mujoco import MujocoArm, MujocoCamera\n"
        "from rlhw.errors import RobotFault\n"
        "a = MujocoArm(); a.connect(); a.advance(0.1)\n"
        "c = MujocoCamera('front', a, width=16, height=16); c.open(); c.latest()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    a.advance(0.1)\n"
        "    for make in (lambda: c, lambda: MujocoCamera('front', a, width=24, height=24)):\n"
        "        try:\n"
        "            cam = make(); cam.open(); cam.latest(); print('child rendered')\n"
        "        except RobotFault as e:\n"
        "            print('child refused', e.kind.value, 'spawn' in str(e))\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "a.advance(0.1); print('parent', c.latest().color.std() > 10)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["child refused not_connected True"] * 2 + ["parent True"]
