//go:build tools

// Package tools pins the development-only binaries (the Temporal CLI with its
// dev server and Web UI) in a module of their own, so the service's go.mod
// stays free of the Temporal server's dependency tree.
package tools

import _ "github.com/temporalio/cli/cmd/temporal"
