"""rlhw episodes as LeRobotDataset v3.0 and back: `export` writes one (`rlhw export-dataset`), `reader` reads
one into `train.demos`; `format` holds the layout, `video` the PyAV streams, `tables` the parquet pieces.

Written with pyarrow and PyAV rather than LeRobot's own `lerobot-dataset` package: that package imports
torchvision, whose PyPI wheels are CUDA builds that do not load beside rlhw's CPU torch. The suite checks the
exports with LeRobot's real loader in a second environment (tools/lerobot_env.sh).
"""
