"""A kubelet emulator for device-plugin integration tests (Device Plugin API v1beta1).

It behaves like the kubelet's device manager as the Kubernetes documentation ("Device Plugins",
kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/device-plugins/) and the
kubelet's pkg/kubelet/cm/devicemanager describe it:

* serves `v1beta1.Registration/Register` on `<dir>/kubelet.sock`;
* Register checks the version ("v1beta1") and the extended resource name, then, synchronously
  inside the RPC, dials `<dir>/<endpoint>` and calls `GetDevicePluginOptions` (a plugin that cannot
  answer while its own Register call is pending deadlocks here, as with the real kubelet), stores
  the options, returns Empty, and starts a thread calling `ListAndWatch`, keeping every message
  with a `time.monotonic()` receive time;
* a later Register for the same resource replaces the previous connection;
* `restart()` is a kubelet restart: stop serving, drop every plugin connection, remove every unix
  socket in the directory (CleanupPluginDirectory), listen on kubelet.sock again.

Only Debian's python3-grpcio / python3-grpc-tools are used (run with /usr/bin/python3). The
_pb2/_pb2_grpc modules are generated at import time from kubelet/api.proto (our own copy of the
API, written from the documented field numbers) into a temporary directory.

All waits are bounded, all threads are daemon threads, and only unix sockets are used.

Run as a program, it is a kubelet for a plugin started by hand (see main() and --help):
  /usr/bin/python3 tests/integration/kubelet_emulator.py --dir /tmp/k --allocate nvidia.com/gpu=GPU-...
"""
import atexit
import collections
import concurrent.futures
import dataclasses
import importlib
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time

import grpc

PROTO_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubelet", "api.proto")
VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"


def _generate_modules():
    """Compiles kubelet/api.proto with grpc_tools.protoc into a private temporary directory and
    imports the generated modules under names of our own (so nothing else called api_pb2 clashes)."""
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="gs-kpb-")
    atexit.register(shutil.rmtree, out, True)
    name = "gs_kubelet_v1beta1_api"
    shutil.copyfile(PROTO_PATH, os.path.join(out, name + ".proto"))
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = ["grpc_tools.protoc", "-I" + out, "-I" + include, "--python_out=" + out,
            "--grpc_python_out=" + out, os.path.join(out, name + ".proto")]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({rc}) on {PROTO_PATH}")
    sys.path.insert(0, out)
    try:
        pb2 = importlib.import_module(name + "_pb2")
        pb2_grpc = importlib.import_module(name + "_pb2_grpc")
    finally:
        sys.path.remove(out)
    return pb2, pb2_grpc


pb, pb_grpc = _generate_modules()


class EmulatorError(Exception):
    """A wait timed out, or the emulator was asked for something it cannot do."""


@dataclasses.dataclass(frozen=True)
class Device:
    """One device of a ListAndWatch message."""
    id: str
    health: str
    numa: tuple = ()

    @property
    def healthy(self):
        return self.health == HEALTHY


@dataclasses.dataclass(frozen=True)
class Message:
    """One ListAndWatch message as received: the full device list of the resource."""
    resource: str
    devices: tuple          # of Device, in the order sent
    time: float             # time.monotonic() at receipt
    generation: int         # which registration (connection) of the resource sent it

    @property
    def ids(self):
        return [d.id for d in self.devices]

    def health(self):
        return {d.id: d.health for d in self.devices}


@dataclasses.dataclass
class Registration:
    """One Register request as the emulator saw it."""
    resource_name: str
    endpoint: str
    version: str
    request_options: object         # DevicePluginOptions from the RegisterRequest
    received_at: float              # time.monotonic() when the request arrived
    options: object = None          # DevicePluginOptions returned by GetDevicePluginOptions
    options_at: float = None        # when that answer arrived (inside the Register RPC)
    returned_at: float = None       # when Register returned (with or without error)
    error: str = None               # the error returned to the plugin, None on success
    generation: int = 0

    @property
    def ok(self):
        return self.returned_at is not None and self.error is None


# IsExtendedResourceName (k8s.io/apimachinery validation), as the kubelet applies it.
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def resource_name_error(name):
    """Returns why `name` is not a valid extended resource name, or None."""
    if "/" not in name or "kubernetes.io/" in name:
        return f"resource name {name!r} is not an extended resource name (needs a domain prefix, not kubernetes.io)"
    if name.startswith("requests."):
        return f"resource name {name!r} must not start with 'requests.'"
    prefix, _, short = ("requests." + name).partition("/")
    if "/" in short:
        return f"resource name {name!r} has more than one '/'"
    if len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
        return f"resource name {name!r}: prefix is not a DNS-1123 subdomain"
    if len(short) > 63 or not _QUALIFIED_NAME.match(short):
        return f"resource name {name!r}: name part must be at most 63 characters matching [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
    return None


class _Endpoint:
    """The emulator's connection to one registered plugin (one resource)."""

    def __init__(self, resource, path, channel, generation):
        self.resource = resource
        self.path = path
        self.channel = channel
        self.stub = pb_grpc.DevicePluginStub(channel)
        self.generation = generation
        self.options = None
        self.stream = None           # the ListAndWatch call, for cancel()
        self.connected = True        # False once the stream ended or was dropped
        self.end_status = None       # how the stream ended
        self.thread = None

    def close(self):
        stream = self.stream
        if stream is not None:
            try:
                stream.cancel()
            except Exception:
                pass
        try:
            self.channel.close()
        except Exception:
            pass


class _RegistrationServicer(pb_grpc.RegistrationServicer):
    def __init__(self, emulator):
        self._emu = emulator

    def Register(self, request, context):
        return self._emu._register(request, context)


class KubeletEmulator:
    """A fake kubelet device manager on `<directory>/kubelet.sock`.

    `directory` defaults to a fresh short temporary directory (removed by stop()).
    `dial_timeout` and `options_timeout` bound the synchronous part of Register (the kubelet uses
    10 s for the dial)."""

    def __init__(self, directory=None, dial_timeout=10.0, options_timeout=10.0, rpc_timeout=10.0):
        self._owns_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="gs-k-", dir="/tmp")
        self.socket_path = os.path.join(self.directory, KUBELET_SOCKET)
        self.dial_timeout = dial_timeout
        self.options_timeout = options_timeout
        self.rpc_timeout = rpc_timeout
        self._cond = threading.Condition()
        self._server = None
        self._endpoints = {}                                  # resource -> _Endpoint
        self._messages = collections.defaultdict(list)       # resource -> [Message]
        self._registrations = []
        self._generation = 0
        self.restarts = []                                    # monotonic times of restart()
        self.started_at = None

    # ----------------------------------------------------------------- life cycle

    def start(self):
        """Creates the directory (0750, like the kubelet) and listens on kubelet.sock."""
        os.makedirs(self.directory, mode=0o750, exist_ok=True)
        self._listen()
        self.started_at = time.monotonic()
        return self

    def _listen(self):
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="kubelet-reg"))
        pb_grpc.add_RegistrationServicer_to_server(_RegistrationServicer(self), server)
        if server.add_insecure_port("unix:" + self.socket_path) == 0:
            raise EmulatorError(f"cannot listen on {self.socket_path}")
        server.start()
        self._server = server

    def _stop_serving(self):
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=0).wait(5)
        with self._cond:
            endpoints = list(self._endpoints.values())
            self._endpoints.clear()
            for ep in endpoints:
                ep.connected = False
            self._cond.notify_all()
        for ep in endpoints:
            ep.close()
        for ep in endpoints:
            if ep.thread is not None:
                ep.thread.join(2)

    def restart(self, gap=0.0):
        """Simulates a kubelet restart: stop serving, drop all plugin connections, remove every
        unix socket in the directory (CleanupPluginDirectory keeps directories, the checkpoint
        and other regular files), wait `gap` seconds (a kubelet that is slow to come up), then
        listen on kubelet.sock again. Returns the time the sockets were removed."""
        self._stop_serving()
        for entry in os.scandir(self.directory):
            try:
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    os.unlink(entry.path)
            except FileNotFoundError:
                pass
        t = time.monotonic()
        with self._cond:
            self.restarts.append(t)
        if gap > 0:
            time.sleep(gap)
        self._listen()
        return t

    def stop(self):
        """Stops serving and drops every connection; removes the directory if it was ours."""
        self._stop_serving()
        if self._owns_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ----------------------------------------------------------------- Register

    def _register(self, request, context):
        reg = Registration(resource_name=request.resource_name, endpoint=request.endpoint,
                           version=request.version, request_options=request.options,
                           received_at=time.monotonic())
        with self._cond:
            self._registrations.append(reg)
            self._cond.notify_all()

        def fail(message):
            with self._cond:
                reg.error = message
                reg.returned_at = time.monotonic()
                self._cond.notify_all()
            context.abort(grpc.StatusCode.UNKNOWN, message)

        if request.version != VERSION:
            fail(f"requested API version {request.version!r} is not supported by kubelet. "
                 f"Supported version is {VERSION!r}")
        why = resource_name_error(request.resource_name)
        if why is not None:
            fail(f"invalid name of device plugin socket: {why}")

        # connectClient: dial (blocking, bounded) and call GetDevicePluginOptions, all inside
        # this RPC, before it returns.
        path = os.path.join(self.directory, request.endpoint)
        channel = grpc.insecure_channel("unix:" + path, options=[("grpc.default_authority", "localhost")])
        try:
            grpc.channel_ready_future(channel).result(timeout=self.dial_timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            fail(f"failed to dial device plugin: context deadline exceeded (endpoint {path})")
        with self._cond:
            self._generation += 1
            generation = self._generation
        ep = _Endpoint(request.resource_name, path, channel, generation)
        try:
            options = ep.stub.GetDevicePluginOptions(pb.Empty(), timeout=self.options_timeout)
        except grpc.RpcError as e:
            channel.close()
            fail(f"failed to get device plugin options: {e.code().name}: {e.details()}")
        with self._cond:
            reg.options = options
            reg.options_at = time.monotonic()
            reg.generation = generation
            ep.options = options
            old = self._endpoints.get(request.resource_name)
            self._endpoints[request.resource_name] = ep
        if old is not None:
            # The newer kubelets replace the client of a re-registered resource.
            with self._cond:
                old.connected = False
            old.close()
        ep.thread = threading.Thread(target=self._watch, args=(ep,), daemon=True,
                                     name=f"law-{request.resource_name}")
        ep.thread.start()
        with self._cond:
            reg.returned_at = time.monotonic()
            self._cond.notify_all()
        return pb.Empty()

    def _watch(self, ep):
        """ListAndWatch loop of one connection: keep every message until the stream ends."""
        status = "OK"
        try:
            stream = ep.stub.ListAndWatch(pb.Empty())
            ep.stream = stream
            if not ep.connected:      # dropped while we were starting
                stream.cancel()
            for response in stream:
                now = time.monotonic()
                devices = tuple(Device(d.ID, d.health, tuple(n.ID for n in d.topology.nodes))
                                for d in response.devices)
                with self._cond:
                    self._messages[ep.resource].append(Message(ep.resource, devices, now, ep.generation))
                    self._cond.notify_all()
        except grpc.RpcError as e:
            status = e.code().name
        except Exception as e:  # never let a watcher thread die noisily
            status = f"error: {e!r}"
        finally:
            with self._cond:
                ep.connected = False
                ep.end_status = status
                self._cond.notify_all()

    # ----------------------------------------------------------------- queries

    @property
    def registrations(self):
        """Every Register request received so far (a copy), oldest first."""
        with self._cond:
            return list(self._registrations)

    def resources(self):
        """Resource names with a current (successful, not replaced) registration."""
        with self._cond:
            return sorted(self._endpoints)

    def connected(self, resource):
        """True while the current ListAndWatch stream of `resource` is open."""
        with self._cond:
            ep = self._endpoints.get(resource)
            return ep is not None and ep.connected

    def messages(self, resource):
        """Every ListAndWatch message received for `resource`, oldest first."""
        with self._cond:
            return list(self._messages.get(resource, ()))

    def devices(self, resource):
        """The latest device list of `resource` ([] if none received)."""
        with self._cond:
            msgs = self._messages.get(resource)
            return list(msgs[-1].devices) if msgs else []

    def options(self, resource):
        """The DevicePluginOptions returned by GetDevicePluginOptions at the current registration."""
        with self._cond:
            ep = self._endpoints.get(resource)
            if ep is None:
                raise EmulatorError(f"resource {resource} is not registered")
            return ep.options

    def _wait(self, what, check, timeout):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = check()
                if result is not None:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EmulatorError(f"timed out after {timeout:.1f} s waiting for {what}")
                self._cond.wait(min(left, 0.5))

    def wait_for(self, resource, predicate, timeout=5.0, after=None):
        """Returns the first ListAndWatch Message of `resource` (received after monotonic time
        `after`, if given) whose device list satisfies predicate(list of Device); waits at most
        `timeout` seconds, else raises EmulatorError showing the latest list."""
        def check():
            for msg in self._messages.get(resource, ()):
                if (after is None or msg.time > after) and predicate(list(msg.devices)):
                    return msg
            return None
        try:
            return self._wait(f"a ListAndWatch message of {resource}", check, timeout)
        except EmulatorError as e:
            with self._cond:
                msgs = self._messages.get(resource, ())
                latest = [(d.id, d.health) for d in msgs[-1].devices] if msgs else None
                n = len(msgs)
            raise EmulatorError(f"{e}; {n} message(s) so far, latest: {latest}") from None

    def wait_registration(self, resource, timeout=5.0, after=None):
        """Returns the first successful Registration of `resource` that arrived after `after`
        (monotonic time) and whose Register call has returned."""
        def check():
            for reg in self._registrations:
                if (reg.resource_name == resource and reg.ok
                        and (after is None or reg.received_at > after)):
                    return reg
            return None
        return self._wait(f"a registration of {resource}", check, timeout)

    def wait_resources(self, names, timeout=5.0):
        """Waits until every resource in `names` is registered and has sent a first message."""
        names = set(names)

        def check():
            if all(n in self._endpoints and any(m.generation == self._endpoints[n].generation
                                                for m in self._messages.get(n, ()))
                   for n in names):
                return True
            return None
        self._wait(f"resources {sorted(names)}", check, timeout)

    def wait_disconnected(self, resource, timeout=5.0):
        """Waits until the ListAndWatch stream of `resource` has ended."""
        def check():
            ep = self._endpoints.get(resource)
            return True if ep is None or not ep.connected else None
        self._wait(f"{resource} to disconnect", check, timeout)

    # ----------------------------------------------------------------- calls into the plugin

    def _stub(self, resource):
        with self._cond:
            ep = self._endpoints.get(resource)
        if ep is None:
            raise EmulatorError(f"resource {resource} is not registered")
        return ep

    def allocate(self, resource, ids, timeout=None):
        """Allocate for one container (as the kubelet always does); returns its
        ContainerAllocateResponse. Raises grpc.RpcError on a plugin error."""
        ep = self._stub(resource)
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])
        response = ep.stub.Allocate(request, timeout=timeout or self.rpc_timeout)
        if len(response.container_responses) != 1:
            raise EmulatorError(f"{resource}: Allocate returned {len(response.container_responses)} "
                                "container responses for 1 container request")
        return response.container_responses[0]

    def preferred(self, resource, available, must_include=(), size=1, timeout=None, force=False):
        """GetPreferredAllocation for one container; returns the preferred device IDs. Like the
        kubelet, refuses unless the plugin's options advertise it (force=True calls anyway)."""
        ep = self._stub(resource)
        if not force and not (ep.options and ep.options.get_preferred_allocation_available):
            raise EmulatorError(f"{resource}: plugin does not offer GetPreferredAllocation")
        request = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=list(available), must_include_deviceIDs=list(must_include),
            allocation_size=size)])
        response = ep.stub.GetPreferredAllocation(request, timeout=timeout or self.rpc_timeout)
        if len(response.container_responses) < 1:
            raise EmulatorError(f"{resource}: GetPreferredAllocation returned no container response")
        return list(response.container_responses[0].deviceIDs)

    def prestart(self, resource, ids, timeout=30.0):
        """PreStartContainer (kubelet timeout 30 s); returns the response."""
        ep = self._stub(resource)
        return ep.stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=list(ids)), timeout=timeout)


# ----------------------------------------------------------------------------- command line

def _response_dict(r):
    """A ContainerAllocateResponse as plain JSON data."""
    return {
        "envs": dict(r.envs),
        "mounts": [{"container_path": m.container_path, "host_path": m.host_path, "read_only": m.read_only}
                   for m in r.mounts],
        "devices": [{"container_path": d.container_path, "host_path": d.host_path, "permissions": d.permissions}
                    for d in r.devices],
        "annotations": dict(r.annotations),
        "cdi_devices": [d.name for d in r.cdi_devices],
    }


def main(argv=None):
    """Serves as a kubelet for a device plugin started by hand, printing what it sees as JSON lines:
    {"registered": ...} per plugin, {"resource": ..., "devices": [...]} per ListAndWatch message,
    {"allocate": ..., "response": ...} per --allocate. Exits after --allocate unless --watch;
    with --watch, on SIGINT/SIGTERM or after --watch SECONDS. docs/user-guide.md shows it with the
    agent on a simulated node."""
    import argparse
    import json
    import signal

    ap = argparse.ArgumentParser(prog="kubelet_emulator.py", description=main.__doc__)
    ap.add_argument("--dir", required=True, help="the device-plugin directory (the agent's --kubelet-dir)")
    ap.add_argument("--resource", action="append", default=[], metavar="NAME",
                    help="wait until NAME is registered and has sent its devices (repeatable)")
    ap.add_argument("--allocate", action="append", default=[], metavar="NAME=ID[,ID...]",
                    help="call Allocate for one container with these device IDs (repeatable)")
    ap.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                    help="keep printing device lists for SECONDS (0: until SIGINT/SIGTERM)")
    ap.add_argument("--timeout", type=float, default=30.0, help="bound of each wait in seconds (default 30)")
    args = ap.parse_args(argv)
    allocs = []
    for a in args.allocate:
        name, sep, ids = a.partition("=")
        if not sep or not name or not ids:
            ap.error(f"--allocate {a!r}: expected NAME=ID[,ID...]")
        allocs.append((name, ids.split(",")))
    wanted = sorted(set(args.resource) | {name for name, _ in allocs})

    def out(obj):
        print(json.dumps(obj, sort_keys=True), flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emu = KubeletEmulator(os.path.abspath(args.dir)).start()
    out({"listening": emu.socket_path})
    shown = {}

    def show_new():
        for reg in emu.registrations[shown.get("__reg__", 0):]:
            out({"registered": reg.resource_name, "endpoint": reg.endpoint, "error": reg.error})
        shown["__reg__"] = len(emu.registrations)
        for res in emu.resources():
            msgs = emu.messages(res)
            for m in msgs[shown.get(res, 0):]:
                out({"resource": res, "devices": [{"id": d.id, "health": d.health} for d in m.devices]})
            shown[res] = len(msgs)

    status = 0
    try:
        deadline = time.monotonic() + args.timeout
        while wanted and not stop.is_set():
            try:
                emu.wait_resources(wanted, timeout=0.2)
                break
            except EmulatorError:
                show_new()
                if time.monotonic() > deadline:
                    out({"error": f"not registered within {args.timeout} s: "
                                  f"{sorted(set(wanted) - set(emu.resources()))}"})
                    return 1
        show_new()
        for name, ids in allocs:
            try:
                out({"allocate": name, "ids": ids, "response": _response_dict(emu.allocate(name, ids))})
            except grpc.RpcError as e:
                out({"allocate": name, "ids": ids, "error": f"{e.code().name}: {e.details()}"})
                status = 1
        if args.watch is not None:
            end = time.monotonic() + args.watch if args.watch > 0 else None
            while not stop.is_set() and (end is None or time.monotonic() < end):
                stop.wait(0.2)
                show_new()
    finally:
        emu.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
