"""Setup's proof that hivemind works here: two DecentralizedAveragers on loopback average one tensor."""
import sys
import time

import torch
import hivemind
from hivemind.compression import NoCompression


def main() -> int:
    started = time.perf_counter()
    first = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    second = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                          initial_peers=[str(a) for a in first.get_visible_maddrs()])
    averagers = [
        hivemind.averaging.DecentralizedAverager(
            [torch.full((1000,), float(value))], dht=dht, prefix="bench_smoke", target_group_size=2,
            min_group_size=2, compression=NoCompression(), start=True)
        for dht, value in ((first, 1.0), (second, 3.0))
    ]
    controls = [a.step(wait=False, timeout=60) for a in averagers]
    groups = [c.result() for c in controls]
    ok = all(g is not None for g in groups)
    for averager in averagers:
        with averager.get_tensors() as tensors:
            ok = ok and bool(torch.allclose(tensors[0], torch.full((1000,), 2.0)))
    for averager in averagers:
        averager.shutdown()
    second.shutdown()
    first.shutdown()
    print(f"hivemind smoke: 2 averagers on loopback {'averaged correctly' if ok else 'FAILED'} "
          f"in {time.perf_counter() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
