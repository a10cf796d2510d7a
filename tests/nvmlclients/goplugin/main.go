// goplugin walks the NVML paths NVIDIA's device plugin (github.com/NVIDIA/k8s-device-plugin,
// whose module the Go module proxy does not serve) walks, with the libraries it is built on,
// github.com/NVIDIA/go-nvml and github.com/NVIDIA/go-nvlib, and prints what it found as JSON:
//
//   - whole GPUs (internal/rm/nvml_devices.go: UUID, minor number and /dev/nvidiaN, memory, PCI bus
//     ID and NUMA node from sysfs, compute capability), through go-nvlib's VisitDevices;
//   - MIG devices (go-nvlib's VisitMigDevices and GetProfile, and the plugin's GetPaths: the
//     capability devices from /proc/driver/nvidia-caps/mig-minors);
//   - the topology GetPreferredAllocation reads (NVIDIA/go-gpuallocator, not served either):
//     nvmlDeviceGetTopologyCommonAncestor for every pair, nvmlDeviceGetNvLinkState and
//     nvmlDeviceGetNvLinkRemotePciInfo_v2 for every link up to NVML_NVLINK_MAX_LINKS;
//   - health (internal/rm/health.go): an event set with Xid events on every GPU, one wait.
//
// go-nvml dlopens libnvidia-ml.so.1: point LD_LIBRARY_PATH at the simulated node's driver lib
// directory. Flags: -root DIR (where proc/ and sys/ are), -wait-ms N (how long to wait for an Xid;
// "ready" is printed on stderr once the event set is registered).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type migInfo struct {
	UUID    string   `json:"uuid"`
	GI      int      `json:"gi_id"`
	CI      int      `json:"ci_id"`
	Profile string   `json:"profile"`
	Memory  uint64   `json:"memory_total"`
	Paths   []string `json:"paths"`
}

type gpuInfo struct {
	Index      int       `json:"index"`
	UUID       string    `json:"uuid"`
	Name       string    `json:"name"`
	Minor      int       `json:"minor"`
	Paths      []string  `json:"paths"`
	Memory     uint64    `json:"memory_total"`
	BusID      string    `json:"pci_bus_id"`
	Numa       int       `json:"numa_node"`
	CC         string    `json:"compute_capability"`
	Arch       string    `json:"architecture"`
	MigEnabled bool      `json:"mig_enabled"`
	NvLinks    int       `json:"nvlinks"`
	NvLinkErr  string    `json:"nvlink_error"`
	Remotes    []string  `json:"nvlink_remotes"`
	Mig        []migInfo `json:"mig"`
}

type report struct {
	Driver   string    `json:"driver_version"`
	Cuda     int       `json:"cuda_driver_version"`
	Gpus     []gpuInfo `json:"gpus"`
	Topology [][]int   `json:"topology"`
	Xid      *uint64   `json:"xid"`
	XidGPU   string    `json:"xid_uuid"`
	WaitErr  string    `json:"wait_error"`
}

func check(ret nvml.Return, what string) {
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "goplugin: %s: %v\n", what, nvml.ErrorString(ret))
		os.Exit(1)
	}
}

func fail(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: %v\n", err)
		os.Exit(1)
	}
}

// migCapPaths is the plugin's internal/mig GetMigCapabilityDevicePaths: mig-minors lines
// "gpu0/gi1/access 12" as /proc/driver/nvidia/capabilities/gpu0/mig/gi1/access -> /dev/nvidia-caps/nvidia-cap12.
func migCapPaths(root string) (map[string]string, error) {
	f, err := os.Open(filepath.Join(root, "proc/driver/nvidia-caps/mig-minors"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		var gpu, gi, ci, minor int
		line := s.Text()
		if n, _ := fmt.Sscanf(line, "gpu%d/gi%d/ci%d/access %d", &gpu, &gi, &ci, &minor); n == 4 {
			out[fmt.Sprintf("/proc/driver/nvidia/capabilities/gpu%d/mig/gi%d/ci%d/access", gpu, gi, ci)] =
				fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor)
		} else if n, _ := fmt.Sscanf(line, "gpu%d/gi%d/access %d", &gpu, &gi, &minor); n == 3 {
			out[fmt.Sprintf("/proc/driver/nvidia/capabilities/gpu%d/mig/gi%d/access", gpu, gi)] =
				fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor)
		}
	}
	return out, s.Err()
}

func main() {
	root := flag.String("root", "/", "the node's root (proc/, sys/)")
	waitMs := flag.Int("wait-ms", 0, "how long to wait for an Xid event")
	flag.Parse()

	lib := nvml.New()
	check(lib.Init(), "nvmlInit")
	defer lib.Shutdown()
	var r report
	var ret nvml.Return
	r.Driver, ret = lib.SystemGetDriverVersion()
	check(ret, "nvmlSystemGetDriverVersion")
	r.Cuda, ret = lib.SystemGetCudaDriverVersion()
	check(ret, "nvmlSystemGetCudaDriverVersion")

	devlib := device.New(lib)
	var handles []nvml.Device
	var caps map[string]string
	err := devlib.VisitDevices(func(i int, d device.Device) error {
		g := gpuInfo{Index: i, Numa: -1, Remotes: []string{}, Mig: []migInfo{}}
		var ret nvml.Return
		g.UUID, ret = d.GetUUID()
		check(ret, "nvmlDeviceGetUUID")
		g.Name, ret = d.GetName()
		check(ret, "nvmlDeviceGetName")
		g.Minor, ret = d.GetMinorNumber()
		check(ret, "nvmlDeviceGetMinorNumber")
		g.Paths = []string{fmt.Sprintf("/dev/nvidia%d", g.Minor)}
		mem, ret := d.GetMemoryInfo()
		check(ret, "nvmlDeviceGetMemoryInfo")
		g.Memory = mem.Total
		var err error
		pci, ret := d.GetPciInfo()
		check(ret, "nvmlDeviceGetPciInfo_v3")
		g.BusID = busID(pci)
		// the plugin's GetNumaNode: the bus ID without its leading 0000, lower case, in sysfs
		b, err := os.ReadFile(filepath.Join(*root, "sys/bus/pci/devices", strings.ToLower(strings.TrimPrefix(g.BusID, "0000")), "numa_node"))
		if err == nil {
			g.Numa, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		g.CC, err = d.GetCudaComputeCapabilityAsString()
		fail(err)
		g.Arch, err = d.GetArchitectureAsString()
		fail(err)
		if capable, err := d.IsMigCapable(); err == nil && capable {
			g.MigEnabled, err = d.IsMigEnabled()
			fail(err)
		}
		// go-gpuallocator's NVLink walk
		for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
			state, ret := d.GetNvLinkState(link)
			if ret != nvml.SUCCESS {
				if g.NvLinkErr == "" {
					g.NvLinkErr = nvml.ErrorString(ret)
				}
				continue
			}
			if state != nvml.FEATURE_ENABLED {
				continue
			}
			g.NvLinks++
			pci, ret := d.GetNvLinkRemotePciInfo(link)
			check(ret, "nvmlDeviceGetNvLinkRemotePciInfo_v2")
			g.Remotes = append(g.Remotes, busID(pci))
		}
		if g.MigEnabled {
			migs, err := d.GetMigDevices()
			fail(err)
			for _, m := range migs {
				var mi migInfo
				mi.UUID, ret = m.GetUUID()
				check(ret, "nvmlDeviceGetUUID (MIG)")
				mm, ret := m.GetMemoryInfo()
				check(ret, "nvmlDeviceGetMemoryInfo (MIG)")
				mi.Memory = mm.Total
				p, err := m.GetProfile()
				fail(err)
				mi.Profile = p.String()
				mi.GI, ret = m.GetGpuInstanceId()
				check(ret, "nvmlDeviceGetGpuInstanceId")
				mi.CI, ret = m.GetComputeInstanceId()
				check(ret, "nvmlDeviceGetComputeInstanceId")
				parent, ret := m.GetDeviceHandleFromMigDeviceHandle()
				check(ret, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
				minor, ret := parent.GetMinorNumber()
				check(ret, "nvmlDeviceGetMinorNumber (parent)")
				if caps == nil {
					caps, err = migCapPaths(*root)
					fail(err)
				}
				giCap := fmt.Sprintf("/proc/driver/nvidia/capabilities/gpu%d/mig/gi%d/access", minor, mi.GI)
				ciCap := fmt.Sprintf("/proc/driver/nvidia/capabilities/gpu%d/mig/gi%d/ci%d/access", minor, mi.GI, mi.CI)
				if caps[giCap] == "" || caps[ciCap] == "" {
					fail(fmt.Errorf("missing MIG capability path %s or %s", giCap, ciCap))
				}
				mi.Paths = []string{fmt.Sprintf("/dev/nvidia%d", minor), caps[giCap], caps[ciCap]}
				g.Mig = append(g.Mig, mi)
			}
		}
		h, ret := lib.DeviceGetHandleByUUID(g.UUID)
		check(ret, "nvmlDeviceGetHandleByUUID")
		handles = append(handles, h)
		r.Gpus = append(r.Gpus, g)
		return nil
	})
	fail(err)

	// go-gpuallocator: the PCIe level between every pair
	for _, a := range handles {
		row := []int{}
		for _, b := range handles {
			level, ret := a.GetTopologyCommonAncestor(b)
			check(ret, "nvmlDeviceGetTopologyCommonAncestor")
			row = append(row, int(level))
		}
		r.Topology = append(r.Topology, row)
	}

	// health.go: Xid events on every GPU
	set, ret := lib.EventSetCreate()
	check(ret, "nvmlEventSetCreate")
	defer set.Free()
	for _, h := range handles {
		types, ret := h.GetSupportedEventTypes()
		check(ret, "nvmlDeviceGetSupportedEventTypes")
		check(h.RegisterEvents(types&nvml.EventTypeXidCriticalError, set), "nvmlDeviceRegisterEvents")
	}
	fmt.Fprintln(os.Stderr, "ready")
	if *waitMs > 0 {
		e, ret := set.Wait(uint32(*waitMs))
		if ret == nvml.SUCCESS && e.EventType == nvml.EventTypeXidCriticalError {
			xid := e.EventData
			r.Xid = &xid
			r.XidGPU, ret = e.Device.GetUUID()
			check(ret, "nvmlDeviceGetUUID (event)")
		} else {
			r.WaitErr = nvml.ErrorString(ret)
		}
	}
	out, err := json.MarshalIndent(r, "", "  ")
	fail(err)
	fmt.Println(string(out))
}

func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
