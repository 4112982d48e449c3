#!/usr/bin/env bash
# npm run bench:setup — installs the peers the benchmark compares against, pinned, into bench/.venv:
#   torch (CPU, with gloo) from Debian's python3-torch, hivemind 1.1.12 and its dependencies from PyPI,
#   and hivemind's p2pd daemon (shipped in hivemind's wheel; built with Go only if it is missing).
# Idempotent: each step checks first and skips what is already there. Nothing is installed with pip
# outside the venv; apt is the only system-wide step (Debian's torch, as apt packages do).
set -euo pipefail
cd "$(dirname "$0")"
HIVEMIND_VERSION=1.1.12
# The go-libp2p-daemon version hivemind 1.1.x builds in its setup.py. Only used if the wheel lacks p2pd;
# hivemind 1.1.12's manylinux wheel ships it, and on 2026-11-22 the Go module proxy did not serve this
# fork (403), so the fallback is a best effort that fails with a clear message.
P2PD_VERSION=v0.5.0.hivemind1
PY=/usr/bin/python3
VENV=.venv
say() { printf '[bench:setup %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# 1. CPU torch with gloo, from Debian (apt). PyPI's Linux torch pulls multi-GB nvidia-* wheels.
if "$PY" -c 'import torch, torch.distributed as d, psutil; assert d.is_gloo_available()' 2>/dev/null; then
  say "torch $("$PY" -c 'import torch; print(torch.__version__)') with gloo already installed (Debian python3-torch)"
else
  command -v apt-get >/dev/null || { echo "bench:setup needs apt-get (Debian) to install python3-torch" >&2; exit 1; }
  say "installing Debian's python3-torch and python3-psutil with apt-get (a few minutes)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends python3-torch python3-psutil python3-venv
fi

# 2. The venv, over Debian's python so that it sees Debian's torch and numpy.
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  say "venv $VENV already there"
else
  say "creating venv $VENV (--system-site-packages over $PY)"
  rm -rf "$VENV"
  "$PY" -m venv --system-site-packages "$VENV"
fi

# 3. hivemind and its dependencies, pinned.
if "$VENV/bin/python" -c "import hivemind, sys; sys.exit(hivemind.__version__ != '$HIVEMIND_VERSION')" 2>/dev/null; then
  say "hivemind $HIVEMIND_VERSION already installed"
else
  say "installing hivemind $HIVEMIND_VERSION and pinned dependencies from PyPI (bench/requirements.txt)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt
fi

# 4. p2pd: hivemind looks for it at hivemind/hivemind_cli/p2pd inside its package.
P2PD="$("$VENV/bin/python" -c 'import hivemind, os; print(os.path.join(os.path.dirname(hivemind.__file__), "hivemind_cli", "p2pd"))')"
if [ -x "$P2PD" ] && "$P2PD" -h >/dev/null 2>&1; then
  say "p2pd present in hivemind's wheel ($P2PD)"
else
  command -v go >/dev/null || { echo "hivemind's p2pd is missing and Go is not installed to build it" >&2; exit 1; }
  say "building p2pd $P2PD_VERSION with Go into $P2PD"
  tmp="$(mktemp -d)"
  GOBIN="$tmp" go install "github.com/learning-at-home/go-libp2p-daemon/p2pd@$P2PD_VERSION" \
    || { echo "could not build p2pd $P2PD_VERSION from the Go module proxy; install a hivemind wheel that ships it" >&2; exit 1; }
  install -m 0755 "$tmp/p2pd" "$P2PD"
  rm -rf "$tmp"
fi

# 5. Proof: versions, and two averagers averaging on loopback.
say "versions: $("$VENV/bin/python" -c 'import hivemind, torch; print("hivemind", hivemind.__version__, "torch", torch.__version__)')"
"$VENV/bin/python" peers/hivemind_smoke.py
say "done"
