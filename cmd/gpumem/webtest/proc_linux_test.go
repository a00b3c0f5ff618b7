package webtest

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes cmd killed when the test process dies, so that a
// crashed test leaves no gpumem serve behind.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
