"""What the step-lane tests share: the run's lane token (32 bytes, as a run draws one)."""

TOKEN = b"t" * 32
