//go:build tools

// Package tools pins the kwok command in this module's requirements.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
