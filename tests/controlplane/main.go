// Command vpol-controlplane is a multi-call binary that provides a small but
// real Kubernetes control plane for vpol's end-to-end tests:
//
//	vpol-controlplane up --dir DIR          supervisor: embedded etcd + kube-apiserver + kube-controller-manager
//	vpol-controlplane kube-apiserver ...    the upstream kube-apiserver command
//	vpol-controlplane kube-controller-manager ...
//	vpol-controlplane kube-scheduler ...    the upstream kube-scheduler (started by `up --node`)
//	vpol-controlplane kubelet ...           the upstream kubelet (the optional node, see README.md)
//	vpol-controlplane kube-proxy ...        the upstream kube-proxy (the node's Service routing)
//	vpol-controlplane kubectl ...           the upstream kubectl of the same release
//
// When invoked through a link whose base name is one of the modes (e.g. a
// symlink named "kubectl"), the mode is taken from argv[0].
//
// The supervisor ("up") runs etcd in its own process and starts the
// apiserver and the controller-manager as child processes of this same
// binary. They are separate processes on purpose: both upstream commands keep
// process-global state (feature gates, component registry, metrics, klog
// flags) that is not meant to be shared by two components in one process.
// See README.md for the choice of release.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as in the upstream mains

	"github.com/spf13/cobra"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/component-base/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl auth plugins, as upstream
)

const usage = `usage: vpol-controlplane MODE [ARGS...]

modes:
  up --dir DIR [--v N] [--node]
                              run etcd, kube-apiserver and kube-controller-manager with state in DIR
                              (--node: also kube-scheduler, and a kubelet with containerd whose Pods run here)
  kube-apiserver ARGS...      upstream kube-apiserver
  kube-controller-manager ... upstream kube-controller-manager
  kube-scheduler ARGS...      upstream kube-scheduler
  kubelet ARGS...             upstream kubelet
  kube-proxy ARGS...          upstream kube-proxy
  kubectl ARGS...             upstream kubectl
  node-cleanup DIR            remove what the node of the cluster in DIR left on the host
  version                     print the Kubernetes version this binary was built from
`

func main() {
	mode := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch mode {
	case "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy":
	default:
		if len(args) == 0 {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		mode, args = args[0], args[1:]
	}

	switch mode {
	case "up":
		os.Exit(runUp(args))
	case "kube-apiserver":
		os.Exit(runCobra(apiserverapp.NewAPIServerCommand(), args))
	case "kube-controller-manager":
		os.Exit(runCobra(kcmapp.NewControllerManagerCommand(), args))
	case "kube-scheduler":
		os.Exit(runCobra(schedulerapp.NewSchedulerCommand(), args))
	case "kubelet":
		os.Exit(runCobra(kubeletapp.NewKubeletCommand(context.Background()), args))
	case "kube-proxy":
		os.Exit(runCobra(proxyapp.NewProxyCommand(), args))
	case "kubectl":
		runKubectl(args)
	case "node-cleanup":
		// What a node of the cluster in DIR left on the host (its supervisor was killed): `cluster stop` runs it.
		if len(args) != 1 {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		dir, err := filepath.Abs(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// The KUBE-* chains are this node's only while no other node runs here (hostLock, released with its
		// supervisor): another one started since holds the lock, and its chains stay.
		_, err = lockHost(dir)
		cleanupNode(dir, err == nil)
	case "version":
		fmt.Println(version.Get().GitVersion)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n\n%s", mode, usage)
		os.Exit(2)
	}
}

// runCobra runs an upstream component command the way its main() does, with
// the arguments that follow the mode.
func runCobra(cmd *cobra.Command, args []string) int {
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

// runKubectl mirrors upstream cmd/kubectl/kubectl.go. kubectl reads os.Args
// itself (plugin lookup, verbosity), so present it with a kubectl-shaped argv.
func runKubectl(args []string) {
	os.Args = append([]string{"kubectl"}, args...)
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
}
