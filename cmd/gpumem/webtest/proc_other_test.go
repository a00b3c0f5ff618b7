//go:build !linux

package webtest

import "os/exec"

// dieWithTest does nothing where the kernel cannot kill a child with its
// parent: the test's Cleanup stops the service.
func dieWithTest(*exec.Cmd) {}
