"""hivemind's DecentralizedAverager as a Moshpit benchmark host (bench/moshpit.ts).

One process hosts several ranks (BENCH_RANKS, comma-separated): 64 separate Python processes that
each import torch do not fit 24 GiB beside their helpers. Every rank still has its own hivemind.DHT
(its own forked DHT process and its own p2pd daemon) and its own DecentralizedAverager (its own forked
averager process), exactly as separate peers would; only the Python parent that drives step() is
shared. Settings: target_group_size = BENCH_GROUP_SIZE, min_group_size = BENCH_MIN_GROUP_SIZE,
initial_group_bits from the coordinator (hivemind's grid test: bin(rank // group_size)),
min_matchmaking_time = BENCH_MATCHMAKING_TIME, request_timeout = BENCH_REQUEST_TIMEOUT,
allreduce_timeout = BENCH_ALLREDUCE_TIMEOUT, no compression, part size 64 KiB (hivemind's default),
one step(weight=1) per round with timeout BENCH_STEP_TIMEOUT.

A victim rank crashes: in the kill round its step is started with require_trigger=True, so once
matchmaking has assembled its group it waits (stage AWAITING_TRIGGER) instead of running its part of
the all-reduce; then its averager process, its DHT process and its p2pd get SIGKILL (the stage is
polled every 0.2 ms). If its step ends without a group, it is crashed right after. Host protocol: bench/lib/moshpit-coordinator.ts.
"""
import json
import os
import signal
import sys
import threading
import time
import traceback
import urllib.request

COORD = os.environ.get("BENCH_COORD", "")
HOST = int(os.environ.get("BENCH_HOST", "-1"))
RANKS = [int(r) for r in os.environ.get("BENCH_RANKS", "").split(",") if r != ""]


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')} hivemind host {HOST}] {msg}\n")
    sys.stderr.flush()


def post(path: str, body: dict) -> dict:
    request = urllib.request.Request(COORD + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=None) as response:
        text = response.read().decode()
        return json.loads(text) if text else {}


class Rank:
    def __init__(self, rank: int, dht) -> None:
        self.rank, self.dht, self.averager, self.alive = rank, dht, None, True

    def crash(self, when: str) -> dict:
        """SIGKILL this rank's averager process, DHT process and the DHT's p2pd (its children)."""
        import psutil
        pids = [self.averager.pid, self.dht.pid]
        try:
            pids += [child.pid for child in psutil.Process(self.dht.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.alive = False
        log(f"rank {self.rank} crashed on purpose {when}")
        return {"rank": self.rank, "when": when}


def main() -> int:
    import torch
    import hivemind
    from hivemind.averaging.control import AveragingStage

    group_size = int(os.environ.get("BENCH_GROUP_SIZE", "4"))
    step_timeout = env_float("BENCH_STEP_TIMEOUT", 30)
    maddr = ["/ip4/127.0.0.1/tcp/0"]
    ranks = {}
    addrs = {}
    if 0 in RANKS:  # the first DHT, through which every other rank joins
        ranks[0] = Rank(0, hivemind.DHT(start=True, host_maddrs=maddr))
        addrs[0] = str(ranks[0].dht.get_visible_maddrs()[0])
    hello = post("/hello", {"host": HOST, "ranks": RANKS, "addrs": addrs})
    for rank in RANKS:
        if rank not in ranks:
            ranks[rank] = Rank(rank, hivemind.DHT(start=True, host_maddrs=maddr, initial_peers=[hello["addrs"][0]]))
    for rank in RANKS:
        start = hello["start"][str(rank)]
        ranks[rank].averager = hivemind.averaging.DecentralizedAverager(
            [torch.tensor(start["vector"], dtype=torch.float32)], dht=ranks[rank].dht, prefix="moshpit", start=True,
            target_group_size=group_size, min_group_size=int(os.environ.get("BENCH_MIN_GROUP_SIZE", "2")),
            initial_group_bits=start["bits"], min_matchmaking_time=env_float("BENCH_MATCHMAKING_TIME", 5),
            request_timeout=env_float("BENCH_REQUEST_TIMEOUT", 3),
            allreduce_timeout=env_float("BENCH_ALLREDUCE_TIMEOUT", 20))
    log(f"ranks {RANKS} ready (hivemind {hivemind.__version__}, torch {torch.__version__})")
    post("/ready", {"host": HOST})

    round_index, reports, kills = -1, [], []
    while True:
        nxt = post("/round", {"host": HOST, "round": round_index, "reports": reports, "kills": kills})
        if nxt["stop"]:
            break
        round_index, reports, kills = nxt["round"], [], []
        live = [r for r in ranks.values() if r.alive]
        started = time.perf_counter()
        victims = [ranks[v] for v in nxt["kill"] if v in ranks and ranks[v].alive]
        # A victim's step waits for a trigger once its group is assembled, so it is crashed at exactly
        # the point where ours crashes (group assembled, its all-reduce not begun); the others run freely.
        controls = {r.rank: r.averager.step(weight=1.0, gather=r.rank, wait=False, timeout=step_timeout,
                                            require_trigger=r in victims) for r in live}

        def watch():  # crash each victim as soon as its group is assembled
            pending = list(victims)
            while pending:
                for victim in list(pending):
                    control = controls[victim.rank]
                    stage = control.stage
                    if stage == AveragingStage.AWAITING_TRIGGER or control.done():
                        when = ("after its step ended" if control.done() else f"with its group assembled (stage {stage.name})")
                        kills.append(victim.crash(when))
                        pending.remove(victim)
                time.sleep(0.0002)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for r in live:
            if r in victims:
                continue
            report = {"rank": r.rank, "ok": False}
            try:
                group = controls[r.rank].result(timeout=step_timeout + 60)
                if group is None:
                    report["error"] = "step found no group"
                else:
                    report.update(ok=True, groupSize=len(group))
            except Exception as err:
                report["error"] = f"{type(err).__name__}: {err}"[:300]
            report["stepMs"] = (time.perf_counter() - started) * 1000
            with r.averager.get_tensors() as tensors:
                report["vector"] = tensors[0].tolist()
            reports.append(report)
        watcher.join()
        oks = sum(1 for report in reports if report["ok"])
        log(f"round {round_index + 1}: {oks}/{len(reports)} ranks averaged, {len(kills)} crashed")
    for r in ranks.values():
        if r.alive:
            r.averager.shutdown()
            r.dht.shutdown()
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except Exception as error:
        traceback.print_exc()
        try:
            post("/error", {"host": HOST, "message": f"{type(error).__name__}: {error}"})
        except Exception:
            pass
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
