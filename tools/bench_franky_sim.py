"""Control rate and jitter of the real `franka` driver against franky-sim, at 10 Hz and 30 Hz.

Each step reads the state and sends a Cartesian target (a slow sine along x, 3 cm amplitude),
then sleeps to the next deadline, as an RL env loop does. The baseline, in the same run, sleeps to
the same deadlines and does nothing else, so what remains is the driver's cost (the driver-process
round trips, franky, the loaded machine).

Reported per rate and control mode:
- achieved rate (steps / elapsed) and its ratio to the target rate;
- step-period error |period - 1/rate|: p50 and p99 (ms), driver loop vs idle baseline;
- call latency of state()+command_pose() (p50/p99 ms);
- tracking: RMS distance between the commanded sine and the measured hand position (mm).

    .venv/bin/python tools/bench_franky_sim.py [--seconds 10] [--rates 10 30] [--modes motion impedance]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from drivers.franka import FrankaArm
from drivers.franky_sim import FrankySim
from rlhw.errors import RobotFault
from rlhw.hardware.types.franka import FrankaController  # noqa: E402

AMPLITUDE_M = 0.03
SINE_HZ = 0.25


def run_loop(rate_hz: float, seconds: float, step=None, on_fault=None) -> dict:
    period = 1.0 / rate_hz
    n = int(seconds * rate_hz)
    starts, latencies, errors = [], [], []
    faults: list[str] = []
    t0 = time.perf_counter() + 0.05
    for k in range(n):
        deadline = t0 + k * period
        delay = deadline - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = time.perf_counter()
        starts.append(t)
        if step is not None:
            try:
                err = step(t - t0)
            except RobotFault as e:  # counted, recovered, and the loop goes on: a fault is a result too
                faults.append(f"{e.kind}: {str(e).splitlines()[0][:120]}")
                if on_fault is not None:
                    on_fault()
                continue
            latencies.append(time.perf_counter() - t)
            if err is not None:
                errors.append(err)
    periods = np.diff(starts)
    jitter = np.abs(periods - period) * 1e3
    out = {
        "steps": n,
        "achieved_hz": (n - 1) / (starts[-1] - starts[0]),
        "period_err_p50_ms": float(np.percentile(jitter, 50)),
        "period_err_p99_ms": float(np.percentile(jitter, 99)),
        "period_err_max_ms": float(jitter.max()),
    }
    out["faults"] = faults
    if latencies:
        lat = np.array(latencies) * 1e3
        out["call_p50_ms"] = float(np.percentile(lat, 50))
        out["call_p99_ms"] = float(np.percentile(lat, 99))
    if errors:
        e = np.array(errors[int(len(errors) * 0.2) :]) * 1e3  # skip the start-up transient
        out["tracking_rms_mm"] = float(np.sqrt(np.mean(e**2)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each measured loop")
    ap.add_argument("--rates", type=float, nargs="+", default=[10.0, 30.0])
    ap.add_argument("--modes", nargs="+", default=["motion", "impedance"], choices=["motion", "impedance"])
    ap.add_argument("--dynamics", type=float, default=0.2, help="relative dynamics factor (motion mode)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()

    results = []
    with FrankySim(start_timeout_s=90) as sim:
        for mode in args.modes:
            arm = FrankaArm(
                sim.host,
                FrankaController(realtime="ignore", control=mode, relative_dynamics_factor=args.dynamics),
                gripper=False,
            )
            arm.connect(timeout_s=30)
            try:
                home = arm.state()
                for rate in args.rates:
                    arm.move_joints(home.q, speed_factor=0.3, timeout_s=30)
                    base = arm.state().pose

                    def step(t: float) -> float:
                        offset = (AMPLITUDE_M * math.sin(2 * math.pi * SINE_HZ * t), 0.0, 0.0)
                        st = arm.state()
                        arm.command_pose(base.with_position(base.position + offset))
                        # compare the measured hand with where the target was when it was commanded
                        # one step earlier (a tracker is at best one period behind)
                        previous = base.position[0] + AMPLITUDE_M * math.sin(2 * math.pi * SINE_HZ * (t - 1.0 / rate))
                        return float(st.ee_position[0] - previous)

                    baseline = run_loop(rate, args.seconds)
                    arm.state()
                    wall0, sim0 = time.perf_counter(), arm.robot_time_s
                    driver = run_loop(rate, args.seconds, step, on_fault=lambda: arm.recover(timeout_s=30))
                    try:
                        arm.state()
                        driver["sim_realtime_factor"] = (arm.robot_time_s - sim0) / (time.perf_counter() - wall0)
                    except RobotFault:
                        driver["sim_realtime_factor"] = float("nan")
                    try:
                        arm.stop()
                    except RobotFault:
                        pass
                    results.append({"mode": mode, "rate_hz": rate, "baseline": baseline, "driver": driver})
                    print(f"# {mode} @ {rate:g} Hz done: {driver['achieved_hz']:.2f} Hz", flush=True)
            finally:
                arm.close()
                time.sleep(0.5)

    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(
        f"franky-sim on {sim.host}; {args.seconds:.0f} s per loop; sine target {AMPLITUDE_M * 100:.0f} cm @ {SINE_HZ} Hz"
    )
    print(
        f"{'mode':10} {'rate':>5} | {'achieved':>8} {'ratio':>6} | {'p50 err':>8} {'p99 err':>8} {'max err':>8} | "
        f"{'base p99':>8} | {'call p50':>8} {'call p99':>8} | {'track rms':>9} | {'sim RTF':>7} | faults"
    )
    for r in results:
        d, b = r["driver"], r["baseline"]
        print(
            f"{r['mode']:10} {r['rate_hz']:5.0f} | {d['achieved_hz']:8.2f} {d['achieved_hz'] / r['rate_hz']:6.3f} | "
            f"{d['period_err_p50_ms']:7.2f}m {d['period_err_p99_ms']:7.2f}m {d['period_err_max_ms']:7.2f}m | "
            f"{b['period_err_p99_ms']:7.2f}m | {d['call_p50_ms']:7.2f}m {d['call_p99_ms']:7.2f}m | "
            f"{d.get('tracking_rms_mm', float('nan')):7.1f}mm | {d['sim_realtime_factor']:7.2f} | {len(d['faults'])}"
        )
    print("(m = milliseconds; err = |step period - 1/rate|; base = idle loop sleeping to the same deadlines;")
    print(" track rms = hand vs the target one step earlier, the sine itself has 21 mm RMS; sim RTF = franky-sim")
    print(" controller time / wall time during the loop: below 1 the simulated arm moves in slow motion)")
    for r in results:
        for f in r["driver"]["faults"]:
            print(f"fault in {r['mode']} @ {r['rate_hz']:g} Hz: {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
