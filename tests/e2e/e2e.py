"""The harness of the e2e tests: a one-node Kubernetes cluster (tests/e2e/cluster.sh, real
kube-apiserver, scheduler, controller-manager, kubelet, containerd 2 and runc) and gpuslice's
agent on a simulated node, started as a host process that registers with the real kubelet.

Everything goes through the real components: the Node's capacity and allocatable are read from
the API server with kubectl, pods are created there and scheduled by kube-scheduler, admitted and
run by the kubelet and containerd; what a container saw comes back through the API server as its
termination message (the container writes /dev/termination-log). Every wait is bounded; on a
failure the waits say what they saw and the logs under the cluster's DIR/logs are kept.

Environment (set by meson, tests/e2e/meson.build): GPUSLICE, GPUSLICE_SIM_LIB, GS_GUARD_LIB,
GS_SOURCE_ROOT; GS_E2E_DIR reuses a cluster that is already up (cluster.sh up DIR), for work on
the tests; GS_E2E_KEEP=1 keeps the cluster's directory after the run."""
import json
import os
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request

from cluster_agent import host_args, read_env  # noqa: F401 (read_env: the harness's, for bench/)

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
GUARD_LIB = os.environ.get("GS_GUARD_LIB", "")
CLUSTER_SH = os.path.join(ROOT, "tests", "e2e", "cluster.sh")
NODES = os.path.join(ROOT, "examples", "nodes")
NS = "gs-e2e"
POLL_MS = 200


class E2EError(AssertionError):
    pass


def wait(pred, timeout, what, interval=0.25):
    """pred() until it returns a true value (returned), at most timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = pred()
            if last and not isinstance(last, Exception):  # an exception returned: why not yet
                return last
        except E2EError as e:
            last = e
        if time.monotonic() > deadline:
            raise E2EError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")
        time.sleep(interval)


class Cluster:
    def __init__(self, dir):
        self.dir = dir
        env = read_env(os.path.join(dir, "env"))
        self.kubeconfig = env["KUBECONFIG"]
        self.bin = env["PATH"].replace(":$PATH", "")
        self.node_name = env["GS_E2E_NODE"]
        self.kubelet_dir = env["GS_E2E_KUBELET_DIR"]
        self.cdi_dir = env["GS_E2E_CDI_DIR"]
        self.pod_logs = env["GS_E2E_POD_LOGS"]  # the kubelet's podLogsDir
        self.image = env["GS_E2E_TEST_IMAGE"]
        self.port_base = int(env["GS_E2E_PORT_BASE"])
        self.env = dict(os.environ, PATH=self.bin + ":" + os.environ.get("PATH", ""), KUBECONFIG=self.kubeconfig)

    # ------------------------------------------------------------------ kubectl

    def kubectl(self, *args, input=None, check=True, timeout=60):
        p = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True,
                           timeout=timeout, env=self.env)
        if check and p.returncode != 0:
            raise E2EError(f"kubectl {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def get(self, *args):
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def node(self):
        return self.get("node", self.node_name)

    def resources(self, field="allocatable", prefix=("nvidia.com/", "gpuslice.")):
        """The node's extended resources (capacity or allocatable) as {name: int}."""
        st = self.node()["status"].get(field, {})
        return {k: int(v) for k, v in st.items() if k.startswith(prefix)}

    def nonzero(self, field="allocatable"):
        return {k: v for k, v in self.resources(field).items() if v}

    def wait_allocatable(self, want, timeout=60, field="allocatable"):
        """Waits until the node's nonzero extended allocatable (or capacity) is exactly want."""
        return wait(lambda: self.nonzero(field) == want or E2EError(f"{field} {self.nonzero(field)}"),
                    timeout, f"{field} {want}")

    # ------------------------------------------------------------------ pods

    def pod_yaml(self, name, resources, script, restart="Never", image=None, out=None, env=None):
        """OUT: a host directory mounted at /out (what a running pod saw, read with written());
        ENV: {name: value} of the container."""
        limits = "".join(f"\n          {k}: {v}" for k, v in resources.items())
        extra = "".join(f"\n    - name: {k}\n      value: {json.dumps(v)}" for k, v in (env or {}).items())
        extra = f"\n    env:{extra}" if extra else ""
        if out:
            extra += "\n    volumeMounts:\n    - {name: out, mountPath: /out}"
        return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {NS}
spec:
  hostNetwork: true
  dnsPolicy: Default
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  enableServiceLinks: false
  containers:
  - name: main
    image: {image or self.image}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", {json.dumps(script)}]
    terminationMessagePolicy: File
    resources:
      limits:{limits or " {}"}{extra}
""" + (f"  volumes:\n  - name: out\n    hostPath: {{path: {out}, type: Directory}}\n" if out else "")

    def create_pod(self, name, resources, script, restart="Never", image=None, out=None, env=None):
        self.kubectl("apply", "-f", "-", input=self.pod_yaml(name, resources, script, restart, image, out, env))

    def pod(self, name):
        return self.get("pod", "-n", NS, name)

    def wait_phase(self, name, phases, timeout=90):
        def check():
            p = self.pod(name)
            ph = p["status"].get("phase")
            if ph in phases:
                return p
            if ph in ("Failed", "Succeeded") and ph not in phases:
                raise E2EError(f"pod {name} is {ph}: {json.dumps(p['status'])[:2000]}")
            return E2EError(f"phase {ph}, conditions {p['status'].get('conditions')}")
        return wait(check, timeout, f"pod {name} {phases}")

    def wait_unschedulable(self, name, timeout=60):
        """The pod's PodScheduled condition once the scheduler reports it Unschedulable."""
        def check():
            conds = {c["type"]: c for c in self.pod(name)["status"].get("conditions", [])}
            c = conds.get("PodScheduled")
            return (c and c.get("reason") == "Unschedulable" and c) or E2EError(f"conditions {list(conds.values())}")
        return wait(check, timeout, f"pod {name} Unschedulable")

    def termination_message(self, name, timeout=90):
        p = self.wait_phase(name, ("Succeeded", "Failed"), timeout)
        st = p["status"]["containerStatuses"][0]["state"].get("terminated", {})
        return p["status"]["phase"], st.get("exitCode"), st.get("message", "")

    def run_pod(self, name, resources, script, timeout=90, image=None):
        """Runs SCRIPT in a pod with RESOURCES; returns what it wrote to /dev/termination-log.
        The pod must succeed."""
        self.create_pod(name, resources, script + "\n", image=image)
        phase, code, msg = self.termination_message(name, timeout)
        if phase != "Succeeded":
            raise E2EError(f"pod {name}: {phase}, exit {code}\n{msg}")
        return msg

    def delete_pods(self, timeout=90):
        self.kubectl("delete", "pods", "-n", NS, "--all", "--grace-period=1", "--wait=false")
        wait(lambda: not self.get("pods", "-n", NS)["items"], timeout, "the test pods to be gone")

    def events(self, name):
        ev = self.get("events", "-n", NS, "--field-selector", f"involvedObject.name={name}")
        return [e.get("message", "") for e in ev["items"]]

    # ------------------------------------------------------------------ the cluster's processes

    def cluster(self, cmd, *args, timeout=300):
        """cluster.sh CMD DIR ARGS..."""
        p = subprocess.run(["bash", CLUSTER_SH, cmd, self.dir, *args], capture_output=True, text=True,
                           timeout=timeout, env=self.env)
        if p.returncode != 0:
            raise E2EError(f"cluster.sh {cmd} {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def pid(self, name):
        with open(os.path.join(self.dir, "run", f"{name}.pid")) as f:
            return int(f.read().split()[0])

    def log(self, name):
        with open(os.path.join(self.dir, "logs", f"{name}.log"), errors="replace") as f:
            return f.read()


def written(out, name, timeout=180):
    """The text a running pod wrote to /out/NAME (its host directory OUT), once it ends in "done\\n"."""
    path = os.path.join(out, name)

    def done():
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            if text.endswith("done\n"):
                return text
        return None
    return wait(done, timeout, f"what a pod wrote to {path}")


def proc_start(pid):
    """Field 22 of /proc/PID/stat, or None when PID is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def terminate(proc, timeout):
    """SIGTERM, then SIGKILL after timeout seconds; True if it exited on SIGTERM."""
    if proc.poll() is not None:
        return True
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return False


class HostProc:
    """A host process beside the cluster (kwok, a device plugin): in a session of its own, its
    output in DIR/logs/NAME.log, its pid and start time in DIR/run/NAME.pid (so that `cluster.sh
    down` stops it if the test dies). stop() ends it by that pid: True if it exited on SIGTERM."""

    def __init__(self, cluster, name, cmd, env=None):
        self.pidfile = os.path.join(cluster.dir, "run", f"{name}.pid")
        self.log_path = os.path.join(cluster.dir, "logs", f"{name}.log")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        with open(self.pidfile, "w") as f:
            f.write(f"{self.proc.pid} {proc_start(self.proc.pid)}\n")

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout=10):
        ok = terminate(self.proc, timeout)
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        return ok


def extender_certs(cluster):
    """The extender's TLS files in the cluster's pki/ (`cluster.sh extender-certs`: its own CA, its
    serving certificate for 127.0.0.1, kube-scheduler's client certificate), made if missing;
    returns {name: path}."""
    p = subprocess.run(["bash", CLUSTER_SH, "extender-certs", cluster.dir], capture_output=True, text=True,
                       timeout=60, env=dict(cluster.env, GS_E2E_PORT_BASE=str(cluster.port_base)))
    if p.returncode != 0:
        raise E2EError(f"cluster.sh extender-certs: exit {p.returncode}\n{p.stderr[-2000:]}")
    pki = os.path.join(cluster.dir, "pki")
    return {k: os.path.join(pki, f) for k, f in (("ca", "extender-ca.crt"), ("cert", "extender.crt"),
                                                 ("key", "extender.key"), ("client_cert", "extender-scheduler.crt"),
                                                 ("client_key", "extender-scheduler.key"))}


def start_extender(cluster, name, addr, policy="gpuslice"):
    """`gpuslice extender --kubeconfig` (its model from the cluster's API server) on ADDR over
    HTTPS, answering only kube-scheduler's client certificate (extender_certs): a HostProc NAME."""
    c = extender_certs(cluster)
    return HostProc(cluster, name, [GPUSLICE, "extender", "--kubeconfig", cluster.kubeconfig, "--listen", addr,
                                    "--tls-cert-file", c["cert"], "--tls-key-file", c["key"],
                                    "--client-ca-file", c["ca"], "--allowed-client-name", "kube-scheduler",
                                    "--policy", policy])


def extender_open(cluster, addr, path, body=None, timeout=10):
    """A request to the extender at ADDR (https) with the scheduler's client certificate, as the
    scheduler makes it: GET PATH, or POST BODY (an object, as JSON). The response (urllib's)."""
    c = extender_certs(cluster)
    ctx = ssl.create_default_context(cafile=c["ca"])
    ctx.load_cert_chain(c["client_cert"], c["client_key"])
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"https://{addr}{path}", data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    return urllib.request.urlopen(req, timeout=timeout, context=ctx)


def write_sched_config(path, cluster, url, managed=()):
    """Writes to PATH (returned) the KubeSchedulerConfiguration naming the extender at URL (https)
    as filter, prioritize and bind (nodeCacheCapable, not ignorable), over TLS with the
    scheduler's client certificate and the extender's CA (extender_certs), for `cluster.sh
    restart-scheduler`. MANAGED: the extended resources it manages (not ignored by the scheduler);
    none: the scheduler sends it every pod."""
    c = extender_certs(cluster)
    text = f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {cluster.dir}/scheduler.kubeconfig
leaderElection:
  leaderElect: false
extenders:
- urlPrefix: "{url}"
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 5
  nodeCacheCapable: true
  enableHTTPS: true
  tlsConfig:
    certFile: "{c["client_cert"]}"
    keyFile: "{c["client_key"]}"
    caFile: "{c["ca"]}"
  httpTimeout: 5s
  ignorable: false
"""
    if managed:
        text += "  managedResources:\n" + "".join(f"  - name: {r}\n    ignoredByScheduler: false\n" for r in managed)
    with open(path, "w") as f:
        f.write(text)
    return path


class Agent:
    """gpuslice's agent on a simulated node, a host process with the real kubelet's sockets.
    Its pid is in DIR/run/agent.pid, so `cluster.sh down` stops it too."""

    count = 0

    def __init__(self, cluster, node, policy_text, extra=()):
        Agent.count += 1
        self.c = cluster
        self.node = node if os.path.isabs(node) else os.path.join(NODES, node)
        os.makedirs(os.path.join(cluster.dir, "agent"), exist_ok=True)
        self.base = tempfile.mkdtemp(prefix=f"{Agent.count}.", dir=os.path.join(cluster.dir, "agent"))
        self.sim_state = os.path.join(self.base, "sim")
        self.policy = os.path.join(self.base, "policy.yaml")
        self.guard_root = os.path.join(self.base, "guard")
        self.metrics = f"127.0.0.1:{cluster.port_base + 402}"
        self.extra = list(extra)
        self.write_policy(policy_text)
        self.proc = None
        self.start()

    def write_policy(self, text):
        tmp = self.policy + ".new"  # replaced whole, as the kubelet updates a ConfigMap volume
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, self.policy)

    def sim(self, *args, check=True):
        p = subprocess.run([GPUSLICE, "--sim", self.node, "--sim-state", self.sim_state, *args],
                           capture_output=True, text=True, timeout=60)
        if check and p.returncode != 0:
            raise E2EError(f"gpuslice {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def apply_json(self):
        """What `gpuslice apply` says the policy advertises: {resource: healthy devices}."""
        out = json.loads(self.sim("apply", "--config", self.policy, "--json").stdout)
        return {r["name"]: sum(1 for d in r["devices"] if d["health"] == "Healthy") for r in out["resources"]}

    def start(self):
        args = [GPUSLICE, "--sim", self.node, "--sim-state", self.sim_state, "agent",
                "--config", self.policy, *host_args(self.c.kubelet_dir, self.c.cdi_dir, self.base, self.metrics, POLL_MS),
                *self.extra]
        env = dict(os.environ)
        if GUARD_LIB:
            env["GPUSLICE_GUARD_LIB"] = GUARD_LIB
        self.log_path = os.path.join(self.c.dir, "logs", f"agent-{os.path.basename(self.base)}.log")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        with open(os.path.join(self.c.dir, "run", "agent.pid"), "w") as f:
            f.write(f"{self.proc.pid} {proc_start(self.proc.pid)}\n")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout=10):
        if self.proc is not None and not terminate(self.proc, timeout):
            raise E2EError(f"agent still running {timeout} s after SIGTERM\n{self.log()[-4000:]}")
        try:
            os.unlink(os.path.join(self.c.dir, "run", "agent.pid"))
        except FileNotFoundError:
            pass

    def restart(self):
        self.stop()
        self.start()

    def scrape(self):
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5) as r:
            return r.read().decode()

    def samples(self):
        out = {}
        for line in self.scrape().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def uuids(self):
        return [g["uuid"] for g in json.loads(self.sim("inspect", "--json").stdout)["gpus"]]
