"""Channel speed, side by side with ray.util.queue.Queue and a raw Ray actor call, in one run.

    .venv/bin/python tools/bench_channel.py [--quick]

What is measured (all on one node, local Ray started by this script; latency contenders and
array contenders are measured in interleaved rounds, alternating order, so that load swings on a
shared machine and the object store's first-touch page faults hit every contender alike):

* hop p50: one small item from a producer (the driver) to a consumer actor already waiting in
  ``get``: time from the start of ``put`` to ``get`` returning in the consumer (both read the
  system-wide monotonic clock). A hop is two messages (producer -> channel actor -> consumer), like
  the raw baseline: the p50 round trip of a no-op call on a plain actor (request + reply), shown
  back-to-back and paced like the hops (a pause before each call, as the consumer has).
* items/s unbatched: a producer actor puts N small items one call each while the driver gets them.
* items/s batched: the same with put_batch/get_batch of 100 (Queue: put_nowait_batch/get_nowait_batch).
* arrays: bytes/s for one array per step through a channel (put then get, in one process) vs raw
  ``ray.put`` + ``ray.get``; the same with 8 arrays per put_batch/get_batch; streaming: a
  producer actor putting into a bounded channel (maxsize 4) while the driver gets; and the relay
  floor: raw put+get plus two no-op actor calls, a bound no design that relays handles through an
  actor can beat (one call hands the item in, one takes it out); the channel's ceiling: raw put+get
  plus the channel's own put+get of a tiny item (no payload at all), i.e. the share this channel
  could reach if moving the array cost nothing beyond raw; and, for reference only (it is not
  a channel: one fixed writer, one fixed reader), a Ray Compiled Graph carrying the array to an actor
  through Ray's shared-memory channel, the path a relay-free design would use.
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
class Reader:
    def nbytes(self, x) -> int:
        return x.nbytes


def compiled_pipe(nbytes: int):
    """A Compiled Graph driver -> Reader actor with a buffer that fits the array (None if unavailable)."""
    import logging

    from ray.dag import InputNode

    logging.getLogger("ray.dag.compiled_dag_node").setLevel(logging.WARNING)  # teardown chatter
    reader = Reader.remote()
    with InputNode() as inp:
        dag = reader.nbytes.bind(inp)
    try:
        return reader, dag.experimental_compile(_buffer_size_bytes=nbytes + (1 << 20))
    except Exception as e:  # noqa: BLE001 - experimental Ray API: report, do not fail the benchmark
        print(f"(compiled graph unavailable: {type(e).__name__}: {e})")
        ray.kill(reader)
        return None, None


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


def raw_call_samples(echo, n: int, pace_s: float = 0.0) -> list[float]:
    """Round trips of a no-op actor call; ``pace_s`` spaces calls like the hop samples."""
    samples = []
    for i in range(n):
        t = time.perf_counter()
        ray.get(echo.ping.remote(i))
        samples.append(time.perf_counter() - t)
        if pace_s:
            time.sleep(pace_s)
    return samples


def hop_samples(src, consumer, n: int) -> list[float]:
    """One-way latency producer put -> consumer get returns, with the consumer already waiting."""
    warm = 5
    done = consumer.hops.remote(src, n + warm)
    for _ in range(n + warm):
        src.put(time.monotonic())
        time.sleep(PACE_S)  # let the consumer get back into get() before the next item
    return ray.get(done)[warm:]


def bench_latency(n: int, rounds: int = 10) -> dict[str, float]:
    """p50s of raw calls and hops, measured in interleaved rounds so that load swings on a shared
    machine hit every contender alike."""
    echo = Echo.remote()
    consumer = Consumer.remote()
    ch, q = Channel.create(f"hop-{time.time_ns()}"), Queue()
    ray.get([echo.ping.remote(0), consumer.ready.remote(ch), consumer.ready.remote(q)])
    pooled: dict[str, list[float]] = {"raw": [], "raw_paced": [], "channel": [], "queue": []}
    per = max(1, n // rounds)
    for r in range(rounds):
        order = ["raw", "raw_paced", "channel", "queue"]
        if r % 2:
            order.reverse()
        for name in order:
            if name == "raw":
                pooled[name] += raw_call_samples(echo, per)
            elif name == "raw_paced":
                pooled[name] += raw_call_samples(echo, per, PACE_S)
            else:
                pooled[name] += hop_samples(ch if name == "channel" else q, consumer, per)
    ray.kill(echo)
    ray.kill(consumer)
    return {k: p50_ms(v) for k, v in pooled.items()}


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
                sink.get()
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


def bench_arrays(nbytes: int, reps: int) -> tuple[float, float, float, float, float, float, float]:
    arr = np.ones(nbytes, dtype=np.uint8)
    ch = Channel.create(f"arr-{time.time_ns()}")
    echo = Echo.remote()
    ray.get(echo.ping.remote(0))
    reader, pipe = compiled_pipe(nbytes)

    def raw_once() -> float:
        t = time.perf_counter()
        out = ray.get(ray.put(arr))
        assert out.nbytes == nbytes
        del out
        return time.perf_counter() - t

    def channel_once() -> float:
        t = time.perf_counter()
        ch.put(arr)
        out = ch.get()
        assert out.nbytes == nbytes
        del out
        return time.perf_counter() - t

    def empty_once() -> float:
        """The channel's own cost for one item, with no payload to move."""
        t = time.perf_counter()
        ch.put(0)
        ch.get()
        return time.perf_counter() - t

    def floor_once() -> float:
        """The least any relay through an actor can cost: raw put+get plus two no-op actor calls
        (one to hand the item in, one to take it out), with no queue and no reference tracking."""
        t = time.perf_counter()
        ref = ray.put(arr)
        ray.get(echo.ping.remote(0))
        ray.get(echo.ping.remote(0))
        out = ray.get(ref)
        assert out.nbytes == nbytes
        del out
        return time.perf_counter() - t

    def channel_batch_once(k: int = 8) -> float:
        """Per-array time when k arrays share one put_batch and one get_batch call."""
        t = time.perf_counter()
        ch.put_batch([arr] * k)
        outs = ch.get_batch(k)
        assert outs[-1].nbytes == nbytes
        del outs
        return (time.perf_counter() - t) / k

    def compiled_once() -> float:
        t = time.perf_counter()
        assert ray.get(pipe.execute(arr)) == nbytes
        return time.perf_counter() - t

    # Interleaved, alternating order: the object store's first-touch page faults and load swings
    # hit both paths alike.
    batch = nbytes <= 10_000_000  # 8 x 100 MB would not fit the benchmark's object store
    raw_once(), channel_once(), floor_once(), empty_once()
    raw_s, chan_s, batch_s, floor_s, cg_s, empty_s = [], [], [], [], [], []
    if pipe is not None:
        compiled_once()
    for r in range(reps):
        steps = [
            lambda: raw_s.append(raw_once()),
            lambda: chan_s.append(channel_once()),
            lambda: floor_s.append(floor_once()),
            lambda: empty_s.append(empty_once()),
        ]
        if batch:
            steps.append(lambda: batch_s.append(channel_batch_once()))
        if pipe is not None:
            steps.append(lambda: cg_s.append(compiled_once()))
        for step in reversed(steps) if r % 2 else steps:
            step()
    raw = nbytes / statistics.median(raw_s)
    chan = nbytes / statistics.median(chan_s)
    batched = nbytes / statistics.median(batch_s) if batch else float("nan")
    floor = nbytes / statistics.median(floor_s)
    compiled = nbytes / statistics.median(cg_s) if cg_s else float("nan")
    ceiling = nbytes / (statistics.median(raw_s) + statistics.median(empty_s))
    ray.kill(echo)
    if pipe is not None:
        pipe.teardown()
        ray.kill(reader)
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
    return raw, chan, batched, stream, floor, compiled, ceiling


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    args = ap.parse_args(argv)
    n_lat = 100 if args.quick else 400
    n_items = 300 if args.quick else 1000
    n_batched = 5000 if args.quick else 50000
    reps = 3 if args.quick else 8

    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        namespace="rlhw",
        object_store_memory=1 << 30,
        log_to_driver=False,
    )
    try:
        lat = bench_latency(n_lat)
        raw, raw_paced, hop_ch, hop_q = lat["raw"], lat["raw_paced"], lat["channel"], lat["queue"]
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
        print(
            f"Channel hop / raw call = {hop_ch / raw:.2f}x back-to-back, {hop_ch / raw_paced:.2f}x paced alike "
            f"(goal <= 1.5x); Channel hop / Queue hop = {hop_ch / hop_q:.2f}x; "
            f"batched {brate_ch:.0f}/s (goal >= 20000)"
        )
        print(
            f"\n{'array':>8}{'raw put+get':>13}{'channel':>10}{'ratio':>7}{'batch of 8':>12}{'ratio':>7}"
            f"{'streaming':>11}{'ratio':>7}{'relay floor':>13}{'ratio':>7}{'ceiling':>9}{'compiled 1:1':>14}{'ratio':>7}"
            "   (GB/s)"
        )
        for mb in (1, 10, 100):
            raw_bw, ch_bw, b_bw, st_bw, fl_bw, cg_bw, ceil_bw = bench_arrays(mb * 1_000_000, reps)
            b_txt = f"{b_bw / 1e9:>12.2f}{b_bw / raw_bw:>7.0%}" if b_bw == b_bw else f"{'-':>12}{'-':>7}"
            print(
                f"{mb:>6}MB{raw_bw / 1e9:>13.2f}{ch_bw / 1e9:>10.2f}{ch_bw / raw_bw:>7.0%}{b_txt}"
                f"{st_bw / 1e9:>11.2f}{st_bw / raw_bw:>7.0%}{fl_bw / 1e9:>13.2f}{fl_bw / raw_bw:>7.0%}"
                f"{ceil_bw / raw_bw:>9.0%}"
                f"{cg_bw / 1e9:>14.2f}{cg_bw / raw_bw:>7.0%}"
            )
        print(
            "relay floor: raw put+get plus two no-op actor calls, the least any channel through an actor "
            "can cost for one array per put and get"
        )
        print(
            "ceiling: the share of raw this channel could reach one array per call if moving the array cost "
            "nothing beyond raw put+get (raw / (raw + the channel's put+get of a tiny item))"
        )
        print(
            "compiled 1:1: a Ray Compiled Graph moving the array to a fixed reader actor through shared "
            "memory (reference only: not a channel)"
        )
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
