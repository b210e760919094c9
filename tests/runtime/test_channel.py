"""Channel: named FIFO backed by one async Ray actor (single-node Ray started by rlhw's Cluster)."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import numpy as np
import pytest
import ray

from rlhw.config import load_config_dict
from rlhw.runtime.channel import Channel, ChannelError, ChannelTimeout
from rlhw.runtime.cluster import Cluster
from rlhw.runtime.payload import LARGE_PAYLOAD_BYTES, StoredRef

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

_names = iter(range(10**6))


def fresh(maxsize: int = 0, **kw) -> Channel:
    return Channel.create(f"t{next(_names)}-{time.monotonic_ns()}", maxsize=maxsize, **kw)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    cfg = load_config_dict({"cluster": {"num_nodes": 1, "component_placement": {"w": "0"}}})
    cluster = Cluster(cfg, ray_init={"num_cpus": 2, "object_store_memory": 300 * 1024 * 1024, "log_to_driver": False})
    assert cluster.nodes[0].node_rank == 0  # the embedded Ray is node rank 0
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def producer():
    """One producer actor shared by the tests (actor start-up is the slow part on a busy machine)."""
    p = Producer.remote()
    ray.get(p.ready.remote(), timeout=180)
    return p


def plasma_objects() -> int:
    from ray._private.internal_api import memory_summary

    # Name our GCS explicitly: other Ray instances on the machine would make auto-detection fail.
    text = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    m = re.search(r"Plasma memory usage \d+ MiB, (\d+) objects", text)
    return int(m.group(1))


def wait_plasma_objects(target: int, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    n = plasma_objects()
    while n > target and time.monotonic() < deadline:
        time.sleep(0.2)  # a polling interval (each poll asks the GCS); the deadline bounds the wait
        n = plasma_objects()
    return n


@ray.remote(num_cpus=0)
class Producer:
    def ready(self) -> bool:
        return True

    def put_many(self, name: str, items: list, key=None) -> int:
        ch = Channel.connect(name, timeout_s=10)
        for x in items:
            ch.put(x, key=key)
        return len(items)

    def put_arrays(self, ch: Channel, n: int, nbytes: int) -> int:
        for i in range(n):
            ch.put(np.full(nbytes, i % 250, dtype=np.uint8))
        return n


def test_items_come_out_in_put_order_and_sizes_are_reported():
    ch = fresh(maxsize=3)
    assert ch.empty() and not ch.full()
    ch.put("a")
    ch.put_batch(["b", "c"])
    assert ch.qsize() == 3 and ch.full()
    assert [ch.get(), ch.get(), ch.get()] == ["a", "b", "c"]
    assert ch.empty()


def test_full_channel_makes_put_wait_and_never_drops(producer):
    ch = fresh(maxsize=2)
    done = producer.put_many.remote(ch.name, list(range(40)))
    seen, max_qsize = [], 0
    while len(seen) < 40:
        max_qsize = max(max_qsize, ch.qsize())
        seen.append(ch.get(timeout=30))
    assert ray.get(done, timeout=30) == 40
    assert seen == list(range(40))
    assert max_qsize <= 2


def test_put_on_full_channel_times_out_with_a_clear_error():
    ch = fresh(maxsize=1)
    ch.put(1)
    t = time.monotonic()
    with pytest.raises(ChannelTimeout, match=rf"channel '{ch.name}' stayed full \(maxsize=1\) for 0.3s"):
        ch.put(2, timeout=0.3)
    assert 0.25 < time.monotonic() - t < 5
    assert ch.get() == 1 and ch.empty()  # the timed-out item was not added


def test_blocked_put_proceeds_as_soon_as_a_consumer_makes_room():
    ch = fresh(maxsize=1)
    ch.put("first")
    threading.Timer(0.3, ch.get).start()
    t = time.monotonic()
    ch.put("second", timeout=10)
    assert 0.2 < time.monotonic() - t < 5
    assert ch.get(timeout=5) == "second"


def test_get_on_empty_channel_times_out_and_consumes_nothing():
    ch = fresh()
    with pytest.raises(ChannelTimeout, match=rf"channel '{ch.name}': get found too little data within 0.2s"):
        ch.get(timeout=0.2)
    ch.put("later")
    assert ch.get(timeout=5) == "later"


def test_keys_are_separate_fifos():
    ch = fresh(maxsize=2)
    ch.put("a1", key="a")
    ch.put("b1", key="b")
    ch.put("a2", key="a")
    assert ch.full(key="a") and not ch.full(key="b") and ch.empty()
    assert ch.get(key="b") == "b1"
    assert [ch.get(key="a"), ch.get(key="a")] == ["a1", "a2"]
    with pytest.raises(ChannelTimeout):
        ch.get(key="b", timeout=0.1)


def test_get_batch_by_count_waits_for_the_whole_batch():
    ch = fresh()
    ch.put_batch([1, 2])
    threading.Timer(0.3, lambda: ch.put(3)).start()
    assert ch.get_batch(3, timeout=10) == [1, 2, 3]
    with pytest.raises(ChannelTimeout):
        ch.get_batch(2, timeout=0.1)


def test_get_batch_by_weight_returns_items_until_the_budget_is_reached():
    ch = fresh()
    ch.put_batch(["a", "b", "c", "d"], weights=[1.0, 2.0, 3.0, 4.0])
    assert ch.get_batch(weight=2.5) == ["a", "b"]  # 1 + 2 >= 2.5
    assert ch.get_batch(weight=3.0) == ["c"]
    ch.put("e", weight=0.5)
    assert ch.get_batch(weight=4.5, timeout=5) == ["d", "e"]


def test_get_batch_by_weight_on_a_full_bounded_key_returns_what_is_there():
    ch = fresh(maxsize=2)
    ch.put_batch(["x", "y"])
    assert ch.get_batch(weight=10.0, timeout=5) == ["x", "y"]


def test_bad_arguments_are_clear_errors():
    ch = fresh(maxsize=4)
    with pytest.raises(ChannelError, match="count=5 can never be ready with maxsize=4"):
        ch.get_batch(5)
    with pytest.raises(ChannelError, match="count or weight, not both"):
        ch.get_batch(2, weight=1.0)
    with pytest.raises(ChannelError, match="count must be an int >= 1"):
        ch.get_batch(0)
    with pytest.raises(ChannelError, match="2 items but 1 weights"):
        ch.put_batch([1, 2], weights=[1.0])
    with pytest.raises(ChannelError, match="weights must be finite and >= 0"):
        ch.put(1, weight=-1.0)
    with pytest.raises(ChannelError, match="maxsize must be an int >= 0"):
        Channel.create("bad-maxsize", maxsize=-1)


def test_async_forms():
    ch = fresh(maxsize=2)

    async def main():
        getters = [asyncio.ensure_future(ch.get_async(timeout=10)) for _ in range(3)]
        await asyncio.sleep(0.2)
        await ch.put_async("a")
        await ch.put_batch_async(["b", "c"])
        got = await asyncio.gather(*getters)
        await ch.put_batch_async([1, 2], weights=[1.0, 1.0])
        assert await ch.full_async()
        batch = await ch.get_batch_async(weight=2.0, timeout=5)
        with pytest.raises(ChannelTimeout):
            await ch.get_async(timeout=0.1)
        return got, batch, await ch.empty_async(), await ch.qsize_async()

    got, batch, empty, size = asyncio.run(main())
    assert sorted(got) == ["a", "b", "c"]  # three parked getters each got one item
    assert batch == [1, 2] and empty and size == 0


def test_connect_by_name_from_a_worker_and_from_the_driver(producer):
    ch = fresh()
    again = Channel.connect(ch.name, timeout_s=5)
    assert again.maxsize == 0
    assert ray.get(producer.put_many.remote(ch.name, ["w1", "w2"], "k"), timeout=60) == 2
    assert again.get_batch(2, key="k", timeout=5) == ["w1", "w2"]


def test_connect_waits_for_a_late_creator_and_fails_clearly_when_there_is_none():
    name = f"late-{time.monotonic_ns()}"
    threading.Timer(0.3, lambda: Channel.create(name)).start()
    assert Channel.connect(name, timeout_s=10).name == name
    with pytest.raises(ChannelError, match="channel 'nobody-made-me' not found after 0.3s; create it first"):
        Channel.connect("nobody-made-me", timeout_s=0.3)


def test_creating_an_existing_name_is_an_error():
    ch = fresh()
    with pytest.raises(ChannelError, match="already exists; use Channel.connect"):
        Channel.create(ch.name)


def test_destroyed_channel_fails_blocked_getters_instead_of_hanging():
    ch = fresh()
    threading.Timer(0.3, ch.destroy).start()
    with pytest.raises(ChannelError, match="is gone"):
        ch.get(timeout=30)


def test_large_arrays_travel_by_reference_and_arrive_zero_copy():
    ch = fresh()
    big = np.arange(LARGE_PAYLOAD_BYTES, dtype=np.uint8)  # exactly at the threshold
    small = np.arange(100, dtype=np.uint8)
    ch.put({"img": big, "meta": 1})
    ch.put(small)
    # What the channel actor holds: a handle for the big one, the small one inline.
    held = ray.get(ch._actor.get.remote(2, None, None, 5.0))[1]
    assert isinstance(held[0], StoredRef) and isinstance(held[1], np.ndarray)
    ch.put({"img": big, "meta": 1})
    got = ch.get()
    assert np.array_equal(got["img"], big) and got["meta"] == 1
    assert not got["img"].flags.writeable  # a view of shared memory, not a copy


def test_torch_tensors_go_through_the_object_store_too():
    import torch

    ch = fresh()
    t = torch.arange(50_000, dtype=torch.float32)  # 200 KB
    ch.put(t)
    held = ray.get(ch._actor.get.remote(1, None, None, 5.0))[1]
    assert isinstance(held[0], StoredRef)
    ch.put(t)
    assert torch.equal(ch.get(), t)


def test_object_store_returns_to_baseline_after_consumption(producer):
    baseline = wait_plasma_objects(0)
    ch = fresh(maxsize=3)
    n = 12
    done = producer.put_arrays.remote(ch, n, 1_000_000)
    for i in range(n):
        assert ch.qsize() <= 3  # the producer is never more than maxsize items ahead
        arr = ch.get(timeout=30)
        assert arr[0] == i % 250
        del arr
    assert ray.get(done, timeout=30) == n
    # Every array is freed once consumed and dropped (no leaked refs). Ray's borrower protocol
    # reports releases asynchronously, so this can lag by a second or more on a busy machine.
    assert wait_plasma_objects(baseline, timeout=30) == baseline


def test_large_item_whose_producer_died_is_a_clear_error_not_a_hang():
    ch = fresh()
    producer = Producer.remote()  # its own: this test kills it
    assert ray.get(producer.put_arrays.remote(ch, 1, 1_000_000), timeout=180) == 1
    stored = plasma_objects()
    ray.kill(producer, no_restart=True)
    # Wait for Ray to learn of the owner's death, which frees its object from the store (the process
    # being gone is not enough: until then a get still finds the object in the store).
    assert wait_plasma_objects(stored - 1, timeout=30) < stored, "Ray kept the dead producer's object"
    with pytest.raises(ChannelError, match="producer owns it and probably died"):
        ch.get(timeout=30)


def test_more_blocked_getters_than_threads_do_not_starve_puts():
    ch = fresh()
    n = 70  # the channel actor has 64 get threads; the rest wait in Ray's queue
    parked = [ch.get_async(timeout=30) for _ in range(n)]

    async def main():
        tasks = [asyncio.ensure_future(p) for p in parked]
        await asyncio.sleep(0.5)
        await ch.put_batch_async(list(range(n)), timeout=10)
        return await asyncio.gather(*tasks)

    assert sorted(asyncio.run(main())) == list(range(n))
