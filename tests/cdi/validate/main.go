// validate: loads CDI spec directories with the CDI reference library, as a container runtime
// does (its registry cache: containerd, CRI-O and podman all use it), and prints what it found
// as JSON: the errors per spec file, the devices it resolved, and, with -inject, the OCI edits
// that injecting the named devices into an empty OCI spec produced.
//
// tests/cdi/build.sh builds this file against each library version the tests use; it rewrites
// the import path for the 0.5.x releases, published under the module's old path.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdi "tags.cncf.io/container-device-interface/pkg/cdi"
)

type dirList []string

func (d *dirList) String() string     { return strings.Join(*d, ",") }
func (d *dirList) Set(v string) error { *d = append(*d, v); return nil }

type result struct {
	Errors      map[string][]string `json:"errors"`
	Devices     []string            `json:"devices"`
	Unresolved  []string            `json:"unresolved"`
	InjectError string              `json:"injectError"`
	Env         []string            `json:"env"`
	Mounts      []oci.Mount         `json:"mounts"`
	DeviceNodes []oci.LinuxDevice   `json:"deviceNodes"`
	Hooks       *oci.Hooks          `json:"hooks"`
}

func main() {
	var dirs dirList
	inject := flag.String("inject", "", "comma-separated qualified device names to inject")
	flag.Var(&dirs, "dir", "a CDI spec directory (repeatable; later ones take precedence)")
	flag.Parse()
	if len(dirs) == 0 {
		fmt.Fprintln(os.Stderr, "usage: validate -dir DIR [-dir DIR...] [-inject KIND=NAME,...]")
		os.Exit(2)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	res := result{Errors: map[string][]string{}, Devices: []string{}}
	if err != nil {
		res.Errors[""] = []string{err.Error()}
	}
	if cache == nil {
		fmt.Fprintln(os.Stderr, "validate: no cache:", err)
		os.Exit(1)
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			res.Errors[path] = append(res.Errors[path], e.Error())
		}
	}
	res.Devices = append(res.Devices, cache.ListDevices()...)
	sort.Strings(res.Devices)
	if *inject != "" {
		spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
		unresolved, err := cache.InjectDevices(spec, strings.Split(*inject, ",")...)
		res.Unresolved = unresolved
		if err != nil {
			res.InjectError = err.Error()
		}
		res.Env = spec.Process.Env
		res.Mounts = spec.Mounts
		res.DeviceNodes = spec.Linux.Devices
		res.Hooks = spec.Hooks
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
}
