"""A MuJoCo camera env behind the real env service renders real frames, whichever thread asks.

Behind `rlhw serve-env` a reset or step runs on one of the gRPC server's pool threads, never the thread
that built the env; a MuJoCo GL context belongs to one thread (drivers/mujoco/render.py). Here the env
is served by the real `EnvServer` (in this process, and as a `rlhw serve-env` child under EGL and under
OSMesa) and stepped by `RemoteEnv` from a thread of its own. Frames are 32 px: software rendering is slow.
"""

from __future__ import annotations

import ctypes.util
import threading
from pathlib import Path

import numpy as np
import pytest

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from rlhw.config import load_config
from rlhw.env.client import RemoteEnv
from rlhw.env.server_process import EnvServerProcess
from rlhw.robot.factory import make_env

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
CAMERAS = ["env.images=true", "env.sim_cameras=[wrist,front]", "env.image_size=[32,32]"]
STEPS = 8


def insert_config():
    return load_config(ROOT / "configs/sim_insert.yaml", CAMERAS)


def drive(address: str) -> tuple[dict, dict]:
    """Reset and take STEPS steps toward +x from a thread of its own; the first and last observations."""
    result: dict = {}

    def client() -> None:
        env = RemoteEnv(address, reset_timeout_s=60.0, timeout_s=30.0)
        try:
            first, _ = env.reset(seed=0)
            action = np.zeros(env.action_space.shape, np.float32)
            action[0] = 1.0
            last = first
            for _ in range(STEPS):
                last, *_ = env.step(action)
            result["obs"] = first, last
        except BaseException as e:  # noqa: BLE001 - re-raised on the test's thread
            result["error"] = e
        finally:
            env.close()

    thread = threading.Thread(target=client, name="remote-env-client")
    thread.start()
    thread.join(150)
    assert not thread.is_alive(), "the client did not finish in 150 s"
    if "error" in result:
        raise result["error"]
    return result["obs"]


def assert_real_frames_that_follow_the_motion(first: dict, last: dict) -> None:
    for name in ("image_wrist", "image_front"):
        for obs in (first, last):
            frame = obs[name]
            assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8
            # a drawn scene, not a cleared buffer: contrast and many colours
            assert frame.std() > 10 and len(np.unique(frame.reshape(-1, 3), axis=0)) > 30
    # 8 steps of 4 mm: the wrist camera rides on the hand, so its whole view shifts
    moved = np.abs(last["image_wrist"].astype(int) - first["image_wrist"].astype(int)).mean()
    assert moved > 2, f"the wrist frame barely changed ({moved:.2f}) while the hand moved 3 cm"


def test_a_served_mujoco_camera_env_renders_on_pool_threads_for_a_client_on_another_thread(serve, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's goal pose file is relative to the repository
    env = make_env(insert_config())  # built on this thread; the server calls it from its pool
    server = serve(env)
    first, last = drive(server.address)
    assert_real_frames_that_follow_the_motion(first, last)
    renderers = [t for t in threading.enumerate() if t.name.startswith("rlhw-render-")]
    assert renderers, "the frames were rendered on a render thread that owns the GL context"


@pytest.mark.parametrize("backend, library", [("egl", "EGL"), ("osmesa", "OSMesa")])
def test_rlhw_serve_env_serves_mujoco_cameras_with_each_offscreen_backend(backend, library, monkeypatch, tmp_path):
    if not ctypes.util.find_library(library):
        pytest.skip(f"lib{library} is not installed (tools/dev.sh installs it)")
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("MUJOCO_GL", backend)  # the child chooses its backend from its environment
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)  # this process set it for its own backend
    child = EnvServerProcess(insert_config(), 0, log_path=tmp_path / "serve-env.log")
    try:
        address = child.start()
        first, last = drive(address)
    finally:
        child.stop()
    assert_real_frames_that_follow_the_motion(first, last)
