"""Camera streams as MP4 video (PyAV): written episode after episode, read back whole.

Each stream's time base is 1/fps and frame k of a file has pts k, so the frame of a given timestamp is
exact (LeRobot's loader looks frames up by timestamp, within 1e-4 s). The codec defaults to LeRobot's
own (AV1 through SVT-AV1, yuv420p, a key frame every 2 frames for quick random access, crf 30); h264 is
the choice for players without AV1.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Iterable

import numpy as np

CODECS = ("libsvtav1", "h264")


class VideoWriter:
    """One camera's MP4 file; ``frames_written`` is the next frame's index (its pts)."""

    def __init__(self, path: Path, fps: int, shape: tuple[int, int, int], codec: str = "libsvtav1", crf: int = 30,
                 gop: int = 2):
        import os

        import av

        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole configuration per file unless told
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fps = fps
        self._container = av.open(str(path), "w")
        options = {"g": str(gop), "crf": str(crf)}
        if codec == "libsvtav1":
            options["preset"] = "12"
        self._stream = self._container.add_stream(codec, rate=fps, options=options)
        self._stream.width, self._stream.height = shape[1], shape[0]
        self._stream.pix_fmt = "yuv420p"
        self._stream.time_base = Fraction(1, fps)
        self.frames_written = 0
        self.closed = False

    def write(self, frames: Iterable[np.ndarray]) -> None:
        import av

        for image in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = self.frames_written
            self._container.mux(self._stream.encode(frame))
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


def stream_info(path: Path) -> dict:
    """The ``info`` LeRobot keeps for a video feature in meta/info.json (read from the written file)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {"video.height": stream.height, "video.width": stream.width, "video.codec": stream.codec.canonical_name, "video.pix_fmt": stream.pix_fmt,
                "video.is_depth_map": False, "video.fps": int(stream.base_rate or stream.average_rate),
                "video.channels": 3, "has_audio": False}


def read_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every frame of ``path`` as (timestamps in seconds, uint8 N x H x W x 3), in presentation order."""
    import av

    stamps, frames = [], []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            stamps.append(float(frame.pts * frame.time_base))
            frames.append(frame.to_ndarray(format="rgb24"))
    order = np.argsort(stamps, kind="stable")
    return np.asarray(stamps)[order], np.stack(frames)[order] if frames else np.zeros((0, 0, 0, 3), np.uint8)
