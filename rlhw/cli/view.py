"""`rlhw view EPISODES... [--out FILE.rrd] [--serve]`: recorded episodes in the Rerun viewer (rerun-sdk).

EPISODES are episode files (``*.npz`` finished, ``*.steps`` interrupted) or directories searched for them
(train, eval and demo episodes). Each episode is logged under ``/<file stem>/`` (e.g. ``/demo-000003/``)
on two timelines, ``step`` (the episode's step index) and ``time`` (when the step happened):

- ``camera/<name>``: the image observations;
- ``obs/<name>``: every proprio observation, one scalar series per component (arm state: hand
  position, gripper width; task state: target, cube...);
- ``action``: the executed action per component; ``reward``; ``intervened`` (1 while the operator
  drove); ``success``.

Step 0 holds the reset observation; step t >= 1 the action of step t and the observation that followed.
``--out`` writes an .rrd file (open it with ``rerun FILE.rrd``); ``--serve`` serves the web viewer
from this process until Ctrl-C.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from rlhw.cli.common import episode_paths
from rlhw.errors import ConfigError
from rlhw.rl.episodes import Episode, load_episode


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("episodes", nargs="+", metavar="EPISODES", help="episode files or directories of them")
    parser.add_argument(
        "--out", default=None, help="write the recording to this .rrd file (default: episodes.rrd unless --serve)"
    )
    parser.add_argument(
        "--serve", action="store_true", help="serve the Rerun web viewer with the episodes (until Ctrl-C)"
    )


def run(args: argparse.Namespace) -> int:
    import rerun as rr

    paths = episode_paths(args.episodes)
    out = Path(args.out) if args.out else (None if args.serve else Path("episodes.rrd"))
    if out is not None and out.suffix != ".rrd":
        raise ConfigError("--out", f"{out} must end in .rrd (a Rerun recording)")
    rec = rr.RecordingStream(application_id="rlhw-episodes")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        rec.save(str(out))
    steps = 0
    for path in paths:
        episode = load_episode(path)
        if episode is None:
            print(f"skipped {path}: no recorded step")
            continue
        steps += log_episode(rec, path.name.split(".")[0], episode)
    rec.flush()
    print(f"{len(paths)} episode(s), {steps} step(s)" + (f" written to {out}" if out else ""))
    if args.serve:
        serve(rec)
    rec.disconnect()
    return 0


def log_episode(rec, name: str, episode: Episode) -> int:
    """Log one episode under ``/<name>/``; returns its number of steps."""
    import rerun as rr

    times = episode.time
    n = episode.length
    for t in range(n + 1):
        rec.set_time("step", sequence=t)
        if t > 0:
            rec.set_time("time", timestamp=float(times[t - 1]))
        for key, values in episode.obs.items():
            value = values[t]
            if key.startswith("image_") and value.ndim == 3:
                rec.log(f"{name}/camera/{key[len('image_') :]}", rr.Image(value))
            else:
                rec.log(f"{name}/obs/{key}", rr.Scalars(np.asarray(value, dtype=np.float64).ravel()))
        if t == 0:
            continue
        i = t - 1
        rec.log(f"{name}/action", rr.Scalars(np.asarray(episode.action[i], dtype=np.float64).ravel()))
        rec.log(f"{name}/reward", rr.Scalars(float(episode.reward[i])))
        rec.log(f"{name}/success", rr.Scalars(float(episode.success[i])))
        rec.log(f"{name}/intervened", rr.Scalars(float(episode.intervened[i])))
    return n


def serve(rec) -> None:
    """Serve the recording over gRPC and the web viewer that shows it, until Ctrl-C."""
    import threading

    import rerun as rr

    uri = rec.serve_grpc()
    rr.serve_web_viewer(connect_to=uri, open_browser=False)
    print(f"serving the Rerun viewer (gRPC {uri}); open the printed web address; Ctrl-C to stop", flush=True)
    threading.Event().wait()  # until Ctrl-C (KeyboardInterrupt: the CLI exits 130)
