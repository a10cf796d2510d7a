module gpuslice.io/tests/cdi/validate

go 1.21

require (
	github.com/container-orchestrated-devices/container-device-interface v0.5.4
	github.com/opencontainers/runtime-spec v1.0.3-0.20220825212826-86290f6a00fb
)

require (
	github.com/fsnotify/fsnotify v1.5.1 // indirect
	github.com/opencontainers/runc v1.1.2 // indirect
	github.com/opencontainers/runtime-tools v0.9.1-0.20221107090550-2e043c6bd626 // indirect
	github.com/syndtr/gocapability v0.0.0-20200815063812-42c35b437635 // indirect
	golang.org/x/mod v0.4.2 // indirect
	golang.org/x/sys v0.0.0-20211116061358-0a5406a5449c // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	sigs.k8s.io/yaml v1.3.0 // indirect
)
