// Command pause is the process of the test bed's sandbox image: as the sandbox's
// PID 1 it reaps orphans and exits 0 on SIGTERM or SIGINT, which is all a pod
// sandbox's infra container has to do. Built static (CGO_ENABLED=0) so the image
// needs no libc.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
