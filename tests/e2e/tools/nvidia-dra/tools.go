//go:build tools

// Package tools pins NVIDIA's DRA kubelet plugin and the toolkit's CDI hook in this module's
// requirements.
package tools

import (
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
	_ "sigs.k8s.io/dra-driver-nvidia-gpu/cmd/gpu-kubelet-plugin"
)
