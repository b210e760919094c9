"""`RobotEnv`: one task on one arm (plus cameras), behind the safety layer. The env server hosts these.

Contract used by the env service (rlhw.env) and the RL pipeline:
- ``spec`` -> rlhw.robot.spec.EnvSpec (per-instance shapes, num_envs == 1 for a single RobotEnv)
- ``reset(seed=None) -> (obs, info)``; ``step(action) -> (obs, reward, terminated, truncated, info)``
  with ``obs`` a dict name -> np.ndarray matching ``spec.observations``, ``action`` a float32 array
  matching ``spec.action``.
- ``info`` always holds ``"timestamps"`` (obs name -> capture time, wall-clock seconds),
  ``"timing"`` (phase name -> seconds for this call), ``"success"`` (bool) and ``"fault"``
  (None, or the fault kind that truncated the episode, with ``"fault_message"``).
- ``stop()`` halts the arm now; ``status()`` returns a JSON-able dict (read-only, never moves);
  ``close()`` stops and releases hardware.
"""
