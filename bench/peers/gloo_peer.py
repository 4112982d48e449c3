"""torch.distributed all_reduce (gloo backend, unencrypted C++) as a benchmark peer.

Rank 0 picks a free port on 127.0.0.1 and registers it; every rank joins through tcp://host:port.
One round = all_reduce(SUM) then divide by the world size, i.e. the mean, as the averagers compute.
"""
import os
import socket

import bench_peer


class GlooPeer:
    def __init__(self, env: bench_peer.Env) -> None:
        import torch
        self.torch, self.env = torch, env
        # In a network namespace of its own (bench/links.ts) a peer reaches the others over eth0, not lo.
        host = os.environ.get("BENCH_HOST", "127.0.0.1")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo" if host == "127.0.0.1" else "eth0")
        self.address = ""
        if env.rank == 0:
            with socket.socket() as probe:
                probe.bind((host, 0))
                self.address = f"{host}:{probe.getsockname()[1]}"
        self.tensor = torch.empty(env.elements, dtype=torch.float32)

    def connect(self, addrs) -> None:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://{addrs[0]}", rank=self.env.rank, world_size=self.env.world)
        self.dist = dist

    def prepare(self, round_index: int) -> None:
        bench_peer.fill_initial(self.torch, self.tensor, self.env.rank)

    def all_reduce(self, round_index: int):
        self.dist.all_reduce(self.tensor, op=self.dist.ReduceOp.SUM)
        self.tensor.div_(self.env.world)
        return None

    def check(self):
        return bench_peer.max_abs_error(self.torch, self.tensor, self.env.world)

    def note(self):
        compression = "" if self.env.compression == "none" else f"; compression {self.env.compression} not supported, ran uncompressed"
        return f"torch {self.torch.__version__} gloo{compression}"

    def close(self) -> None:
        self.dist.destroy_process_group()


if __name__ == "__main__":
    bench_peer.run(GlooPeer)
