"""A node switched between the DRA driver and the device plugin (docs/dra.md, switching a node):
the agent never lets the device plugin advertise a GPU while a ResourceSlice of its driver in the
API server may still offer it (the scheduler would allocate a claim on it: the same GPU twice).

- Restarted without --dra after a run with it: the agent deletes the node's slices of the driver
  itself (the kubelet would only about 30 s after the plugin went), and the Node's allocatable
  nvidia.com/gpu appears only once they are gone (sampled: the Node first, then the slices); the
  agent cannot reach the API server (its own loopback proxy to it, paused) for its first 8 s, so
  that the GPUs are seen held.
- A live policy change taking GPU 1 out of gpuslice.dra.gpus while the agent cannot reach the
  API server (the proxy paused): GPU 1 stays out of allocatable while the
  slices still offer gpu-1; the proxy resumed, the slices lose gpu-1 first, then GPU 1 is
  allocatable.
- Restarted without --dra while the API server does not answer it: the GPUs are held for the
  bounded wait (30 s, a warning), then served; the slices are deleted once the API server
  answers again (if the kubelet has not deleted them by then).
Without --dra the agent looks for the slices only where a run with --dra left the driver's
directory under the kubelet's plugins directory (--kubelet-plugins-dir).
The conftest's teardown deletes an agent's slices only after the test: none of these rely on it."""
import os
import socket
import threading
import time

from dra_util import DRIVER, dra_args, slice_devices, slices
from e2e import E2EError, wait

FLAGS = "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
BOTH = FLAGS + "gpuslice:\n  dra:\n    gpus: [\"0\", \"1\"]\n"
ONLY0 = BOTH.replace('[\"0\", \"1\"]', '[\"0\"]')
RES = "nvidia.com/gpu"
HOLD_S = 30  # src/dra/handover.h: DRA_HANDOVER_WAIT_MS


class Proxy:
    """A loopback TCP proxy to the API server for the agent alone (the kubelet and the scheduler
    keep their own connections): paused, it drops its connections and refuses new ones, as an API
    server the node cannot reach."""

    def __init__(self, port, target):
        self.port, self.target = port, target
        self.lock = threading.Lock()
        self.conns = []
        self.listener = None
        self.resume()

    def resume(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self.listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, s):
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def pause(self):
        if self.listener is None:
            return
        for x in [self.listener] + self.conns:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()
        self.listener = None
        with self.lock:
            self.conns = []


def proxied_kubeconfig(cluster, port):
    """The cluster's kubeconfig with the API server's address replaced by the proxy's (the
    server's certificate names 127.0.0.1, whatever the port)."""
    with open(cluster.kubeconfig) as f:
        text = f.read()
    api = f"https://127.0.0.1:{cluster.port_base + 443}"
    assert api in text, f"{cluster.kubeconfig} does not name {api}"
    path = os.path.join(cluster.dir, f"switch-{port}.kubeconfig")
    with open(path, "w") as f:
        f.write(text.replace(api, f"https://127.0.0.1:{port}"))
    return path


def with_kubeconfig(args, kubeconfig):
    args = list(args)
    args[args.index("--kubeconfig") + 1] = kubeconfig
    return args


def without_dra(cluster, kubeconfig):
    """The agent's flags without --dra: the API server, the Node's name, and the kubelet's plugins
    directory where the run with --dra left the driver's directory (the sign of that run)."""
    return ["--kubeconfig", kubeconfig, "--node-name", cluster.node_name,
            "--kubelet-plugins-dir", os.path.join(cluster.kubelet_dir, "plugins"), "--cdi-hook", ""]


def allocatable(cluster):
    return cluster.resources().get(RES, 0)


def sample_until(cluster, done, timeout, what):
    """(seconds, the Node's allocatable nvidia.com/gpu, the slices' devices) until done(alloc,
    devices): the Node read first, so a device the slices list after an allocatable read was listed
    when that allocatable was already there."""
    samples = []
    t0 = time.monotonic()

    def step():
        alloc = allocatable(cluster)
        devs = slice_devices(slices(cluster))
        samples.append((round(time.monotonic() - t0, 1), alloc, devs))
        return done(alloc, devs) or E2EError(f"allocatable {RES} {alloc}, slices {devs}")
    wait(step, timeout, what, interval=0.1)
    return samples


def delete_slices(cluster):
    cluster.kubectl("delete", "resourceslices", "--wait=true", "--ignore-not-found", "--field-selector",
                    f"spec.nodeName={cluster.node_name},spec.driver={DRIVER}", check=False, timeout=90)


def dra_agent(cluster, agent, port):
    """(proxy, its kubeconfig, the agent with --dra through it under BOTH), once the slices offer
    both GPUs and the device plugin none."""
    proxy = Proxy(port, ("127.0.0.1", cluster.port_base + 443))
    kc = proxied_kubeconfig(cluster, port)
    a = agent("t4x2.yaml", BOTH, with_kubeconfig(dra_args(cluster), kc) + ["--cdi-hook", ""])
    wait(lambda: slice_devices(slices(cluster)) == ["gpu-0", "gpu-1"], 120, "the slices of both GPUs")
    wait(lambda: allocatable(cluster) == 0 or E2EError(f"allocatable {allocatable(cluster)}"), 120,
         f"no {RES} allocatable while DRA has every GPU")
    return proxy, kc, a


def held_while_slices_offer(cluster, a, gpus, devices, seconds):
    """The agent says it holds GPUS; for SECONDS (the Node's status is updated every 2 s) no
    nvidia.com/gpu is allocatable, while the slices still offer DEVICES."""
    wait(lambda: f"GPU(s) {gpus} held back from the device plugin" in a.log(), 60, f"GPU(s) {gpus} held back")
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        assert allocatable(cluster) == 0, f"{RES} allocatable while the slices offer {devices}"
        time.sleep(0.5)
    assert slice_devices(slices(cluster)) == devices


def test_restart_without_dra_deletes_the_slices_before_the_device_plugin_serves(cluster, agent):
    proxy, kc, a = dra_agent(cluster, agent, cluster.port_base + 422)
    try:
        a.stop()  # its slices stay (a restarted agent finds them; the kubelet deletes them 30 s later)
        assert slice_devices(slices(cluster)) == ["gpu-0", "gpu-1"]
        # restarted without --dra while it cannot reach the API server for a few seconds: the GPUs
        # are held (the Node's status is updated every 2 s), then the slices go first
        proxy.pause()
        a.extra = without_dra(cluster, kc)
        a.start()
        held_while_slices_offer(cluster, a, "0, 1", ["gpu-0", "gpu-1"], 8)
        proxy.resume()
        samples = sample_until(cluster, lambda alloc, devs: alloc == 2, 120, f"{RES} 2 allocatable")
        assert all(not devs for _, alloc, devs in samples if alloc), f"allocatable while slices offer GPUs: {samples}"
        assert slices(cluster) == [], "the slices (an empty pool would do no harm, but none is written)"
        # well before the kubelet's 30 s after the stop: the agent deleted them
        gone = next(t for t, _, devs in samples if not devs)
        assert gone < 15, samples
        log = a.log()
        assert f"no ResourceSlice of driver {DRIVER} is left for node {cluster.node_name}" in log, log[-3000:]
        assert f"no ResourceSlice of driver {DRIVER} offers GPU(s) 0, 1 any more" in log, log[-3000:]
    finally:
        a.stop()
        proxy.pause()
        delete_slices(cluster)


def test_policy_change_republishes_before_the_device_plugin_serves(cluster, agent):
    proxy, _, a = dra_agent(cluster, agent, cluster.port_base + 420)
    try:
        proxy.pause()
        a.write_policy(ONLY0)
        wait(lambda: "Applied the new policy" in a.log(), 60, "the policy reloaded")
        # the API server still has gpu-1 in the slices (the agent cannot reach it): GPU 1 stays out
        held_while_slices_offer(cluster, a, "1", ["gpu-0", "gpu-1"], 12)
        proxy.resume()
        samples = sample_until(cluster, lambda alloc, devs: alloc == 1, 120, f"{RES} 1 allocatable")
        assert all("gpu-1" not in devs for _, alloc, devs in samples if alloc), samples
        assert slice_devices(slices(cluster)) == ["gpu-0"]
        assert f"no ResourceSlice of driver {DRIVER} offers GPU(s) 1 any more" in a.log()
    finally:
        a.stop()
        proxy.pause()
        delete_slices(cluster)


def test_api_server_down_at_start_holds_the_gpus_for_a_bounded_wait(cluster, agent):
    proxy, kc, a = dra_agent(cluster, agent, cluster.port_base + 421)
    try:
        a.stop()
        proxy.pause()
        wait(lambda: allocatable(cluster) == 0 or E2EError(f"allocatable {allocatable(cluster)}"), 120,
             f"no {RES} allocatable before the agent starts again")
        t0 = time.monotonic()
        a.extra = without_dra(cluster, kc)
        a.write_policy(FLAGS)
        a.start()
        while time.monotonic() - t0 < HOLD_S - 10:
            assert allocatable(cluster) == 0, f"{RES} allocatable {time.monotonic() - t0:.1f} s after the start"
            time.sleep(0.5)
        cluster.wait_allocatable({RES: 2}, timeout=120)
        assert time.monotonic() - t0 >= HOLD_S - 10
        log = a.log()
        assert f"go to the device plugin after {HOLD_S} s without knowing that no ResourceSlice of driver " \
               f"{DRIVER}" in log, log[-3000:]
        # the API server answering again: the agent's background retry checks the slices and stops
        proxy.resume()
        wait(lambda: f"no ResourceSlice of driver {DRIVER} is left for node" in a.log(), 120,
             "the slices checked once the API server answers")
        assert slices(cluster) == []
        assert allocatable(cluster) == 2
    finally:
        a.stop()
        proxy.pause()
        delete_slices(cluster)
