"""hivemind 1.1.12's state download (DecentralizedAverager.load_state_from_peers) as bench/state-download.ts's
comparison: one donor process, one newcomer process, over loopback.

  bench/.venv/bin/python bench/peers/hivemind_state.py --role donor --mib N
      Prints {"addrs": [...]} (its DHT's visible multiaddrs), serves its state until a line arrives on
      stdin, then prints {"cpuSeconds": s}: its CPU time since it printed its addresses.
  bench/.venv/bin/python bench/peers/hivemind_state.py --role newcomer --mib N --peers '["/ip4/..."]'
      Times one load_state_from_peers(), checks every value, prints {"seconds": s, "cpuSeconds": s}.

The tensors are state-download.ts's layout()/valueAt(): float32 tensors of 16 Mi elements, value i of
tensor t = ((i % 1021) - 510) / 256 + t. hivemind's defaults otherwise: no state compression, and the
state streamed in parts of hivemind.utils.streaming's 64 KiB (STREAMING_CHUNK_SIZE_BYTES), one
DownloadData message each. CPU seconds are user + system of this process and all its descendants:
hivemind runs the DHT and the averager in child processes and p2pd as the DHT process's child, and all
of them work on a download. An error prints one line on stderr and exits with 1.
"""
import argparse
import json
import os
import sys
import time

# hivemind logs every download at INFO on stderr, which the benchmark's table shares; keep warnings and errors.
os.environ.setdefault("HIVEMIND_LOGLEVEL", "WARNING")

import numpy as np
import psutil

PREFIX = "avs_bench_state"
TENSOR_ELEMENTS = 16 * 1024 * 1024  # state-download.ts's TENSOR_ELEMENTS
ATTEMPTS = 40  # the donor's all_averagers entry may not have reached the newcomer's DHT yet


def sizes(mib: int):
    total = mib * 1024 * 1024 // 4
    return [min(TENSOR_ELEMENTS, total - at) for at in range(0, total, TENSOR_ELEMENTS)]


def values(t: int, n: int) -> np.ndarray:
    # Computed in float64, then rounded to float32 once, as Float32Array stores valueAt()'s double.
    return (((np.arange(n) % 1021) - 510) / 256 + t).astype(np.float32)


def cpu_by_pid() -> dict:
    """user + system seconds of this process and each descendant (a child that exits between two
    snapshots drops out of the delta; none does during a measurement)."""
    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            times = p.cpu_times()
            out[p.pid] = times.user + times.system  # not children_*: the descendants are counted themselves
        except psutil.NoSuchProcess:
            pass
    return out


def cpu_since(before: dict) -> float:
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in cpu_by_pid().items())


def say(obj) -> None:
    print(json.dumps(obj), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["donor", "newcomer"], required=True)
    parser.add_argument("--mib", type=int, required=True)
    parser.add_argument("--peers", help="the donor's multiaddrs, a JSON list (newcomer only)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (a network namespace's own, on shaped links)")
    args = parser.parse_args()
    if args.mib < 1:
        raise ValueError("--mib must be >= 1")

    import torch
    import hivemind

    lengths = sizes(args.mib)
    host_maddrs = [f"/ip4/{args.host}/tcp/0"]
    if args.role == "donor":
        tensors = [torch.from_numpy(values(t, n)) for t, n in enumerate(lengths)]
        dht = hivemind.DHT(start=True, host_maddrs=host_maddrs)
    else:
        if not args.peers:
            raise ValueError("--role newcomer needs --peers")
        tensors = [torch.zeros(n, dtype=torch.float32) for n in lengths]
        dht = hivemind.DHT(start=True, host_maddrs=host_maddrs, initial_peers=json.loads(args.peers))
    averager = None
    try:
        averager = hivemind.averaging.DecentralizedAverager(
            tensors, dht=dht, prefix=PREFIX, target_group_size=2, start=True)
        if args.role == "donor":
            before = cpu_by_pid()
            say({"addrs": [str(a) for a in dht.get_visible_maddrs()]})
            sys.stdin.readline()  # the parent's "stop" (or EOF if it died)
            say({"cpuSeconds": cpu_since(before)})
        else:
            newcomer(averager, lengths)
    finally:
        if averager is not None:
            averager.shutdown()
        dht.shutdown()


def newcomer(averager, lengths) -> None:
    for attempt in range(ATTEMPTS):
        if attempt > 0:
            time.sleep(0.25)
        before = cpu_by_pid()
        started = time.perf_counter()
        # hivemind's default: no timeout, neither for the whole download nor for each part.
        state = averager.load_state_from_peers()
        seconds = time.perf_counter() - started
        cpu = cpu_since(before)
        if state is not None:
            break
    else:
        raise RuntimeError(f"load_state_from_peers found no donor in {ATTEMPTS} attempts")
    _metadata, received = state
    if len(received) != len(lengths):
        raise RuntimeError(f"received {len(received)} tensors, sent {len(lengths)}")
    for t, (tensor, n) in enumerate(zip(received, lengths)):
        got, sent = tensor.numpy(), values(t, n)
        if got.dtype != np.float32 or got.shape != sent.shape:
            raise RuntimeError(f"tensor {t} is {got.dtype} {got.shape}, sent float32 {sent.shape}")
        wrong = np.flatnonzero(got != sent)
        if wrong.size:
            i = wrong[0]
            raise RuntimeError(f"value {i} of tensor {t} is {got[i]}, sent {sent[i]}")
    say({"seconds": seconds, "cpuSeconds": cpu})


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one clear line for the benchmark, not a traceback
        print(f"hivemind_state.py: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
