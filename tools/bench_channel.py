"""Channel speed, side by side with ray.util.queue.Queue and a raw Ray actor call, in one run.

    .venv/bin/python tools/bench_channel.py [--quick]

What is measured (all on one node, local Ray started by this script):

* hop p50: one small item from a producer (the driver) to a consumer actor already waiting in
  ``get``: time from the start of ``put`` to ``get`` returning in the consumer (both read the
  system-wide monotonic clock). A hop is two messages (producer -> channel actor -> consumer), like
  the raw baseline: the p50 round trip of a no-op call on a plain actor (request + reply).
* items/s unbatched: a producer actor puts N small items one call each while the driver gets them.
* items/s batched: the same with put_batch/get_batch of 100 (Queue: put_nowait_batch/get_nowait_batch).
* arrays: bytes/s moving one array per step through a channel (producer put, consumer get, in one
  process, so the object-store copy is not overlapped) vs raw ``ray.put`` + ``ray.get``; and the
  same through a channel with a producer actor streaming while the driver consumes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import ray
from ray.util.queue import Queue

from rlhw.runtime.channel import Channel


@ray.remote(num_cpus=0)
class Echo:
    def ping(self, x):
        return x


@ray.remote(num_cpus=0)
class Consumer:
    """Waits in get(); each item is the producer's time.monotonic() at put (system-wide clock)."""

    def ready(self, src) -> bool:
        return src.qsize() >= 0  # started, and has talked to the channel once

    def hops(self, src, n: int):
        out = []
        for _ in range(n):
            sent = src.get()
            out.append(time.monotonic() - sent)
        return out


@ray.remote(num_cpus=0)
class Producer:
    def put_items(self, sink, n: int, batch: int, kind: str):
        if batch == 1:
            for i in range(n):
                sink.put(i)
        else:
            for start in range(0, n, batch):
                items = list(range(start, min(n, start + batch)))
                if kind == "channel":
                    sink.put_batch(items)
                else:
                    sink.put_nowait_batch(items)
        return n

    def put_arrays(self, sink, nbytes: int, n: int):
        arr = np.ones(nbytes, dtype=np.uint8)
        for _ in range(n):
            sink.put(arr)
        return n


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


PACE_S = 0.003  # pause between hop samples, so the consumer is parked in get() when an item arrives


def bench_raw_call(n: int, pace_s: float = 0.0) -> float:
    """p50 round trip of a no-op actor call; ``pace_s`` spaces calls like the hop samples."""
    echo = Echo.remote()
    ray.get(echo.ping.remote(0))
    samples = []
    for i in range(n):
        t = time.perf_counter()
        ray.get(echo.ping.remote(i))
        samples.append(time.perf_counter() - t)
        if pace_s:
            time.sleep(pace_s)
    ray.kill(echo)
    return p50_ms(samples)


def bench_hop(n: int, kind: str) -> float:
    """One-way latency producer put -> consumer get returns, with the consumer already waiting."""
    src = Channel.create(f"hop-{time.time_ns()}") if kind == "channel" else Queue()
    consumer = Consumer.remote()
    ray.get(consumer.ready.remote(src))  # the actor process is up before the clock starts
    warm = 20
    done = consumer.hops.remote(src, n + warm)
    for _ in range(n + warm):
        src.put(time.monotonic())
        time.sleep(PACE_S)  # let the consumer get back into get() before the next item
    samples = ray.get(done)[warm:]
    ray.kill(consumer)
    return p50_ms(samples)


def bench_items(n: int, kind: str, batch: int) -> float:
    sink = Channel.create(f"items-{time.time_ns()}") if kind == "channel" else Queue()
    prod = Producer.remote()
    ray.get(prod.put_items.remote(sink, 1, 1, kind))  # warm both ends
    sink.get()
    t = time.perf_counter()
    done = prod.put_items.remote(sink, n, batch, kind)
    got = 0
    while got < n:
        if batch == 1:
            sink.get()
            got += 1
        else:
            want = min(batch, n - got)
            if kind == "channel":
                got += len(sink.get_batch(want))
            else:
                # Queue has no blocking batch get: wait for the first, then take what is there.
                first = sink.get()
                rest = sink.get_nowait_batch(min(want - 1, sink.qsize())) if want > 1 else []
                got += 1 + len(rest)
    ray.get(done)
    elapsed = time.perf_counter() - t
    ray.kill(prod)
    return n / elapsed


def bench_raw_call_rate(n: int) -> float:
    echo = Echo.remote()
    ray.get(echo.ping.remote(0))
    t = time.perf_counter()
    for i in range(n):
        ray.get(echo.ping.remote(i))
    elapsed = time.perf_counter() - t
    ray.kill(echo)
    return n / elapsed


def bench_arrays(nbytes: int, reps: int) -> tuple[float, float, float]:
    arr = np.ones(nbytes, dtype=np.uint8)
    # raw: ray.put + ray.get in one process
    ray.get(ray.put(arr))
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        out = ray.get(ray.put(arr))
        assert out.nbytes == nbytes
        del out
        samples.append(time.perf_counter() - t)
    raw = nbytes / statistics.median(samples)
    # channel: put + get in one process
    ch = Channel.create(f"arr-{time.time_ns()}")
    ch.put(arr)
    ch.get()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        ch.put(arr)
        out = ch.get()
        assert out.nbytes == nbytes
        del out
        samples.append(time.perf_counter() - t)
    chan = nbytes / statistics.median(samples)
    # channel, streaming: a producer actor puts while the driver gets (bounded, so memory is bounded)
    sch = Channel.create(f"arrs-{time.time_ns()}", maxsize=4)
    prod = Producer.remote()
    ray.get(prod.put_arrays.remote(sch, nbytes, 1))
    sch.get()
    t = time.perf_counter()
    done = prod.put_arrays.remote(sch, nbytes, reps)
    for _ in range(reps):
        out = sch.get()
        del out
    ray.get(done)
    stream = nbytes * reps / (time.perf_counter() - t)
    ray.kill(prod)
    return raw, chan, stream


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    args = ap.parse_args(argv)
    n_lat = 100 if args.quick else 400
    n_items = 300 if args.quick else 1000
    n_batched = 5000 if args.quick else 50000
    reps = 3 if args.quick else 8

    ray.init(address="local", num_cpus=4, include_dashboard=False, namespace="rlhw",
             object_store_memory=1 << 30, log_to_driver=False)
    try:
        raw = bench_raw_call(n_lat)
        raw_paced = bench_raw_call(n_lat, PACE_S)
        hop_ch = bench_hop(n_lat, "channel")
        hop_q = bench_hop(n_lat, "queue")
        rate_raw = bench_raw_call_rate(n_items)
        rate_ch = bench_items(n_items, "channel", 1)
        rate_q = bench_items(n_items, "queue", 1)
        brate_ch = bench_items(n_batched, "channel", 100)
        brate_q = bench_items(n_batched, "queue", 100)
        print(f"\nsmall items (cores: {ray.cluster_resources().get('CPU')}, one node)")
        print(f"{'path':<34}{'p50 hop ms':>12}{'items/s':>12}{'batched/s':>12}")
        print(f"{'raw actor call (round trip)':<34}{raw:>12.3f}{rate_raw:>12.0f}{'-':>12}")
        print(f"{'raw actor call, paced like hops':<34}{raw_paced:>12.3f}{'-':>12}{'-':>12}")
        print(f"{'rlhw Channel':<34}{hop_ch:>12.3f}{rate_ch:>12.0f}{brate_ch:>12.0f}")
        print(f"{'ray.util.queue.Queue':<34}{hop_q:>12.3f}{rate_q:>12.0f}{brate_q:>12.0f}")
        print(f"Channel hop / raw call = {hop_ch / raw:.2f}x back-to-back, {hop_ch / raw_paced:.2f}x paced alike "
              f"(goal <= 1.5x); Channel hop / Queue hop = {hop_ch / hop_q:.2f}x; "
              f"batched {brate_ch:.0f}/s (goal >= 20000)")
        print(f"\n{'array':>8}{'raw put+get GB/s':>18}{'channel GB/s':>14}{'ratio':>8}{'streaming GB/s':>16}{'ratio':>8}")
        for mb in (1, 10, 100):
            raw_bw, ch_bw, st_bw = bench_arrays(mb * 1_000_000, reps)
            print(f"{mb:>6}MB{raw_bw / 1e9:>18.2f}{ch_bw / 1e9:>14.2f}{ch_bw / raw_bw:>8.0%}"
                  f"{st_bw / 1e9:>16.2f}{st_bw / raw_bw:>8.0%}")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
