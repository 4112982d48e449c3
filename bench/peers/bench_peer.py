"""The benchmark runner protocol for Python peers (see bench/README.md); stdlib only.

A peer module builds a `Peer` object with: address (str), connect(addrs), prepare(round),
all_reduce(round) -> optional matchmaking ms, check() -> max abs error or None, note() -> str or None,
close(), and optionally extra() -> a dict of further figures (numbers or lists) sent as the result's `extra`. `run(make_peer)` drives it exactly as bench/lib/peer-client.ts drives TypeScript peers.
"""
import json
import math
import os
import sys
import time
import traceback
import urllib.request


class Env:
    def __init__(self) -> None:
        def need(name: str) -> str:
            value = os.environ.get(name)
            if not value:
                raise RuntimeError(f"environment variable {name} is required (this program is started by bench/allreduce.ts)")
            return value

        self.rank = int(need("BENCH_RANK"))
        self.world = int(need("BENCH_WORLD"))
        self.group_size = int(os.environ.get("BENCH_GROUP_SIZE") or self.world)
        self.elements = int(need("BENCH_ELEMENTS"))
        self.rounds = int(need("BENCH_ROUNDS"))
        self.warmup = int(os.environ.get("BENCH_WARMUP", "1"))
        self.part_bytes = int(os.environ.get("BENCH_PART_BYTES", "65536"))
        self.compression = os.environ.get("BENCH_COMPRESSION", "none")
        self.coord = need("BENCH_COORD")


def post(env: Env, path: str, body: dict) -> dict:
    """Long-polls the coordinator; no timeout here: the runner bounds the whole run."""
    def clean(value):
        return str(value) if isinstance(value, float) and not math.isfinite(value) else value
    payload = json.dumps({k: clean(v) for k, v in body.items()}).encode()
    request = urllib.request.Request(env.coord + path, data=payload, method="POST",
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=None) as response:
        text = response.read().decode()
        return json.loads(text) if text else {}


CHUNK = 1 << 20  # fill and check in slices, so the harness adds no tensor-sized copies to a peer's memory


def fill_initial(torch, tensor, rank: int) -> None:
    """Element i is rank + 1 + (i mod 1024)/1024: exact in float32 (same as bench/lib/protocol.ts)."""
    for start in range(0, tensor.numel(), CHUNK):
        index = torch.arange(start, min(start + CHUNK, tensor.numel()), dtype=torch.int64)
        tensor[start:start + CHUNK] = (index % 1024).to(torch.float32) / 1024 + float(rank + 1)


def max_abs_error(torch, tensor, world: int, group_ranks=None) -> float:
    """Largest |tensor - exact mean|; the mean of element i over the world is (world + 1)/2 + (i mod 1024)/1024,
    over a group of ranks R it is mean(r + 1 for r in R) + (i mod 1024)/1024."""
    offset = (world + 1) / 2 if group_ranks is None else sum(r + 1 for r in group_ranks) / len(group_ranks)
    worst = 0.0
    for start in range(0, tensor.numel(), CHUNK):
        index = torch.arange(start, min(start + CHUNK, tensor.numel()), dtype=torch.int64)
        expected = (index % 1024).to(torch.float32) / 1024 + offset
        error = (tensor[start:start + CHUNK] - expected).abs().max().item()
        if math.isnan(error):
            return math.inf
        worst = max(worst, error)
    return worst


def process_tree_usage() -> tuple:
    """(cpu seconds, peak rss bytes) of this process and its live descendants (hivemind's averager
    process and its p2pd daemon). Peaks are summed: an upper bound on the tree's peak."""
    import psutil
    me = psutil.Process()
    cpu, peak = 0.0, 0
    for proc in [me] + me.children(recursive=True):
        try:
            times = proc.cpu_times()
            cpu += times.user + times.system
            with open(f"/proc/{proc.pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peak += int(line.split()[1]) * 1024
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            pass
    return cpu, peak


def run(make_peer) -> None:
    env = None
    peer = None
    try:
        env = Env()
        peer = make_peer(env)
        addrs = post(env, "/register", {"rank": env.rank, "addr": peer.address})["addrs"]
        peer.connect(addrs)
        rounds_ms, matchmaking_ms, cpu_seconds, worst = [], [], 0.0, None
        for round_index in range(env.warmup + env.rounds):
            measured = round_index >= env.warmup
            peer.prepare(round_index)
            post(env, "/barrier", {"name": f"round-{round_index}"})
            cpu_before = process_tree_usage()[0]
            started = time.perf_counter()
            matchmaking = peer.all_reduce(round_index)
            elapsed_ms = (time.perf_counter() - started) * 1000
            cpu_used = process_tree_usage()[0] - cpu_before
            # The check and the next round's fill wait until every peer's round is over: started while
            # slower peers still average, they took the shared cores from the round being timed.
            post(env, "/barrier", {"name": f"round-{round_index}-end"})
            if measured:
                rounds_ms.append(elapsed_ms)
                cpu_seconds += cpu_used
                if matchmaking is not None:
                    matchmaking_ms.append(matchmaking)
                error = peer.check()
                if error is not None:
                    worst = error if worst is None else max(worst, error)
        post(env, "/barrier", {"name": "done"})
        result = {"rank": env.rank, "roundsMs": rounds_ms, "cpuSeconds": cpu_seconds,
                  "peakRssBytes": process_tree_usage()[1], "maxAbsError": worst}
        if matchmaking_ms:
            result["matchmakingMs"] = matchmaking_ms
        note = peer.note()
        if note:
            result["note"] = note
        extra = getattr(peer, "extra", None)
        if extra is not None:
            result["extra"] = extra()
        post(env, "/result", result)
        peer.close()
        sys.stdout.flush()
        os._exit(0)  # hivemind's background processes can keep a clean exit waiting
    except Exception as err:  # one sentence to the runner, the trace to stderr for whoever digs
        traceback.print_exc()
        try:
            if peer is not None:
                peer.close()  # its helpers (an agent, hivemind's processes) go with it
        except Exception:
            pass
        if env is not None:
            try:
                post(env, "/error", {"rank": env.rank, "message": f"{type(err).__name__}: {err}"})
            except Exception:
                pass
        sys.stderr.flush()
        os._exit(1)
