"""Camera streams as MP4 video (PyAV): written episode after episode, read back whole.

Each stream's time base is 1/fps and frame k of a file has pts k, so the frame of a given timestamp is
exact (LeRobot's loader looks frames up by timestamp, within 1e-4 s). yuv420p with a key frame every 2
frames (LeRobot's choice: quick random access for training).

The codec defaults to h264 (libx264, crf 23), not LeRobot's default AV1 (SVT-AV1, crf 30): run as root,
SVT-AV1 puts the thread that encodes, and every encoder thread it starts, at SCHED_FIFO priority 99 (seen
with PyAV 18's SVT-AV1 4.1). On a robot node that is a busy real-time thread above the control loop. AV1
stays available (``codec="libsvtav1"``), and `_SchedulingGuard` puts every thread it raised back.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path

import numpy as np

CODECS = ("h264", "libsvtav1")
DEFAULT_CRF = {"h264": 23, "libsvtav1": 30}


class _SchedulingGuard:
    """Puts back the scheduling of every thread of this process that an encoder call raised to a real-time
    policy (SVT-AV1 does, see the module docstring): threads that were real-time before keep theirs."""

    def __init__(self):
        self.before = self._policies()

    @staticmethod
    def _policies() -> dict[int, int]:
        import os

        out = {}
        for task in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
            try:
                out[int(task)] = os.sched_getscheduler(int(task))
            except OSError:
                pass  # the thread ended meanwhile
        return out

    def restore(self) -> None:
        import os

        realtime = (os.SCHED_FIFO, os.SCHED_RR)
        for tid, policy in self._policies().items():
            if policy in realtime and self.before.get(tid) not in realtime:
                try:
                    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                except OSError:
                    pass


class VideoWriter:
    """One camera's MP4 file; ``frames_written`` is the next frame's index (its pts)."""

    def __init__(
        self,
        path: Path,
        fps: int,
        shape: tuple[int, int, int],
        codec: str = "h264",
        crf: int | None = None,
        gop: int = 2,
    ):
        import os

        import av

        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole configuration per file unless told
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fps = fps
        self._container = av.open(str(path), "w")
        options = {"g": str(gop), "crf": str(DEFAULT_CRF[codec] if crf is None else crf)}
        if codec == "libsvtav1":
            options["preset"] = "12"
        self._stream = self._container.add_stream(codec, rate=fps, options=options)
        self._stream.width, self._stream.height = shape[1], shape[0]
        self._stream.pix_fmt = "yuv420p"
        self._stream.time_base = Fraction(1, fps)
        self.frames_written = 0
        self.closed = False
        self._guard = _SchedulingGuard() if codec == "libsvtav1" else None

    def write(self, frames: Iterable[np.ndarray]) -> None:
        import av

        for image in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = self.frames_written
            try:
                self._container.mux(self._stream.encode(frame))
            finally:
                self._restore()
            self.frames_written += 1

    def size_bytes(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def close(self) -> None:
        """Flush the encoder and close the file; again is a no-op."""
        if self.closed:
            return
        self.closed = True
        try:
            self._container.mux(self._stream.encode(None))
        finally:
            self._container.close()
            self._restore()

    def _restore(self) -> None:
        if self._guard is not None:
            self._guard.restore()


def stream_info(path: Path) -> dict:
    """The ``info`` LeRobot keeps for a video feature in meta/info.json (read from the written file)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            "video.height": stream.height,
            "video.width": stream.width,
            "video.codec": stream.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(stream.base_rate or stream.average_rate),
            "video.channels": 3,
            "has_audio": False,
        }


def _to_rgb(frame, single_thread: list[bool]) -> np.ndarray:
    """One decoded frame as H x W x 3 RGB. The conversion runs on one thread where PyAV lets us say so (PyAV
    18 does, 15 does not): its default threading cost 10-30x more per 128 px frame on a loaded 2-core machine."""
    if single_thread[0]:
        try:
            return frame.reformat(format="rgb24", threads=1).to_ndarray()
        except TypeError:
            single_thread[0] = False
    return frame.to_ndarray(format="rgb24")


def read_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every frame of ``path`` as (timestamps in seconds, uint8 N x H x W x 3), in presentation order."""
    import av

    stamps, frames, single_thread = [], [], [True]
    with av.open(str(path)) as container:
        stream = container.streams.video[0]  # decoded on one thread, for the reason `_to_rgb` gives
        for frame in container.decode(stream):
            stamps.append(float(frame.pts * frame.time_base))
            frames.append(_to_rgb(frame, single_thread))
    order = np.argsort(stamps, kind="stable")
    return np.asarray(stamps)[order], np.stack(frames)[order] if frames else np.zeros((0, 0, 0, 3), np.uint8)
