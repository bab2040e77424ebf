"""torchrun across two hosts: two network namespaces (infra/cluster/netns.sh) with their own
addresses and private /tmp, one node (one rank) on each, rendezvous and gloo over the bridge.
The step equals a single process's. A long test (root, ~1 min): RATCHET_LONG_TESTS=1, which
`npm run test:long` sets; skipped loudly otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

import dist_worker
from helpers import REPO, make_cfg, make_samples
from ratchet_trainer.core import Trainer, write_batch

NETNS = REPO / "infra" / "cluster" / "netns.sh"
# A set of hosts of its own, apart from the multi-host test's (names, bridge, subnet, veths).
HOST_ENV = {"RATCHET_NETNS_PREFIX": "rtmn-", "RATCHET_NETNS_BRIDGE": "rtbrmn", "RATCHET_NETNS_SUBNET": "10.79.0",
            "RATCHET_NETNS_VETH": "rtmv"}


def _skip_reason() -> str | None:
    if os.environ.get("RATCHET_LONG_TESTS") != "1":
        return "a long test (two network namespaces, root): run it with npm run test:long (RATCHET_LONG_TESTS=1)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "iproute2 and util-linux (ip, unshare) are missing: apt-get install iproute2 util-linux"
    return None


@pytest.mark.skipif(_skip_reason() is not None, reason=f"SKIPPED LOUDLY: {_skip_reason()}")
def test_torchrun_across_two_hosts_gives_the_single_process_step():
    home = Path(os.environ.get("RATCHET_HOME", REPO / ".ratchet"))
    # Outside /tmp, which each host has of its own: the batch and the result are read on both.
    shared = home / "test-multinode" / uuid.uuid4().hex[:8]
    shared.mkdir(parents=True)
    env = {**os.environ, **HOST_ENV, "RATCHET_NETNS_DIR": str(shared / "hosts")}
    vocab = 256
    refs = write_batch(shared, "b", make_samples(vocab), {"run_id": "run", "step": 0, "vocab_size": vocab})
    torch.save(refs, shared / "refs.pt")
    single = dist_worker.run_step(Trainer("run", make_cfg("tiny", optim={"max_grad_norm": 0.0})), refs)

    subprocess.run(["bash", str(NETNS), "up"], env=env, check=True)
    try:
        master = subprocess.run(["bash", str(NETNS), "addr", "control"], env=env, check=True,
                                capture_output=True, text=True).stdout.strip()
        nodes = []
        for rank, host in enumerate(("control", "trainer")):
            cmd = ["bash", str(NETNS), "exec", host, "env", "GLOO_SOCKET_IFNAME=eth0",
                   f"PYTHONPATH={REPO / 'trainer'}", sys.executable, "-m", "torch.distributed.run",
                   "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1",
                   "--master-addr", master, "--master-port", "29531",
                   str(REPO / "trainer" / "tests" / "multinode_worker.py"), str(shared)]
            nodes.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for p in nodes:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0, out[-3000:]
    finally:
        subprocess.run(["bash", str(NETNS), "down"], env=env, check=False)

    dual = torch.load(shared / "rank0.pt", weights_only=False)
    assert dual["hosts"] == ["control", "trainer"]  # one rank on each host
    dist_worker.assert_same_step(single, dual)
    shutil.rmtree(shared, ignore_errors=True)
