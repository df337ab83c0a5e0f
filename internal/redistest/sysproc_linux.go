package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group and has the
// kernel kill it if the test binary dies, so no server outlives a test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
