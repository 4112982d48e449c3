"""hivemind's DecentralizedAverager (butterfly all-reduce over p2pd) as a benchmark peer.

Rank 0 starts the first DHT and registers its multiaddr; the others join through it. Every rank
runs one DecentralizedAverager with target_group_size = min_group_size = BENCH_GROUP_SIZE (default:
the world), the runner's part
size and compression, allreduce_timeout = BENCH_ALLREDUCE_TIMEOUT (default 60 s, our design's
default; hivemind's own default waits forever), hivemind's defaults otherwise. One round = one
step(). Matchmaking is timed from step() until the step's stage leaves LOOKING_FOR_GROUP (polled
from its shared memory). A round that has not finished after twice the all-reduce timeout plus a
minute is reported as a failure naming the stage it was stuck in, never waited on forever.
"""
import os
import time

import bench_peer

PREFIX = "avs_bench"
# 127.0.0.1, or the peer's own address when the runner gave it a network namespace (bench/links.ts).
HOST = os.environ.get("BENCH_HOST", "127.0.0.1")


def compression_for(name: str):
    from hivemind import compression
    choices = {
        "none": compression.NoCompression,
        "float16": compression.Float16Compression,
        "uniform8bit": compression.Uniform8BitQuantization,
        "blockwise8bit": compression.BlockwiseQuantization,  # needs bitsandbytes, which setup does not install
    }
    if name not in choices:
        raise ValueError(f"compression must be one of {', '.join(choices)}, got {name!r}")
    return choices[name]()


class HivemindPeer:
    def __init__(self, env: bench_peer.Env) -> None:
        import torch
        import hivemind
        self.torch, self.hivemind, self.env = torch, hivemind, env
        self.allreduce_timeout = float(os.environ.get("BENCH_ALLREDUCE_TIMEOUT", "60"))
        self.dht = None
        self.group_ranks = None
        self.address = ""
        if env.rank == 0:
            self.dht = hivemind.DHT(start=True, host_maddrs=[f"/ip4/{HOST}/tcp/0"])
            self.address = str(self.dht.get_visible_maddrs()[0])

    def connect(self, addrs) -> None:
        if self.dht is None:
            self.dht = self.hivemind.DHT(start=True, host_maddrs=[f"/ip4/{HOST}/tcp/0"], initial_peers=[addrs[0]])
        self.averager = self.hivemind.averaging.DecentralizedAverager(
            [self.torch.zeros(self.env.elements, dtype=self.torch.float32)], dht=self.dht, prefix=PREFIX, start=True,
            target_group_size=self.env.group_size, min_group_size=self.env.group_size,
            part_size_bytes=self.env.part_bytes, compression=compression_for(self.env.compression),
            allreduce_timeout=self.allreduce_timeout)

    def prepare(self, round_index: int) -> None:
        with self.averager.get_tensors() as tensors:
            bench_peer.fill_initial(self.torch, tensors[0], self.env.rank)

    def all_reduce(self, round_index: int):
        from hivemind.averaging.control import AveragingStage
        started = time.perf_counter()
        limit = 2 * self.allreduce_timeout + 60
        # Each member gathers its rank, so every peer knows its group's exact mean.
        control = self.averager.step(gather=self.env.rank, wait=False, timeout=self.allreduce_timeout)
        matchmaking_ms = None
        while not control.done() and time.perf_counter() - started < limit:
            if control.stage not in (AveragingStage.IDLE, AveragingStage.LOOKING_FOR_GROUP):
                matchmaking_ms = (time.perf_counter() - started) * 1000
                break
            time.sleep(0.0005)
        try:
            group = control.result(timeout=max(0.0, limit - (time.perf_counter() - started)))
        except TimeoutError:
            raise RuntimeError(f"round {round_index}: hivemind's step did not finish within {limit:.0f} s "
                               f"(stuck in stage {control.stage.name})") from None
        if group is None:
            raise RuntimeError(f"round {round_index}: hivemind's step found no group")
        self.group_ranks = sorted(int(rank) for rank in group.values())
        return matchmaking_ms

    def check(self):
        with self.averager.get_tensors() as tensors:
            return bench_peer.max_abs_error(self.torch, tensors[0], self.env.world, self.group_ranks)

    def note(self):
        return (f"hivemind {self.hivemind.__version__}, torch {self.torch.__version__}, part {self.env.part_bytes} B, "
                f"compression {self.env.compression}, allreduce_timeout {self.allreduce_timeout:.0f} s, "
                f"min_matchmaking_time 5 s (default)")

    def close(self) -> None:
        self.averager.shutdown()
        self.dht.shutdown()


if __name__ == "__main__":
    bench_peer.run(HivemindPeer)
