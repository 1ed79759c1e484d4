// Command pause is the sandbox ("pause") container of the test node's Pods:
// it holds the Pod's namespaces, reaps the zombies it inherits, and exits on
// SIGINT or SIGTERM. Built static by `cluster build` next to the control
// plane's binary and imported into the node's containerd as vpol.local/pause:1.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
