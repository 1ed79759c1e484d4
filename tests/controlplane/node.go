package main

// The optional node of `up --node`: kube-scheduler, and a kubelet whose Pods
// run in containerd (Debian's containerd, runc and CNI plugins), so that Pods
// are scheduled and really run on this host.
//
// Nothing of it is host-wide for longer than the cluster lives:
//   - containerd and the kubelet run in one private mount namespace (a
//     `unshare` holder that both are `nsenter`ed into): their mounts (volumes,
//     overlay snapshots, Pod network namespaces) vanish with it, and the
//     kernel settings the kubelet would change (kernel.panic, ...) are files
//     bind-mounted over /proc/sys inside it;
//   - containerd's root, state and runc root and the CNI configuration and
//     address store are under DIR/node (containerd's sockets under
//     /run/vpol-<tag>: a socket's path is short); the kubelet's root, Pod logs
//     and libcni's cache are at their usual paths inside the namespace, where
//     directories under DIR/node are mounted over them;
//   - the cgroups are under a root of this cluster's own (/vpol-<tag>), the
//     bridge and the network are named after the cluster (vpol<tag>), and the
//     one iptables rule (Pods to the API server) carries the network's name;
//   - Services: kube-proxy (iptables mode) routes cluster IPs, and a cluster
//     DNS of the supervisor's own (dns.go) on the bridge's address answers
//     their names. kube-proxy's chains (KUBE-*) have fixed names, so a host
//     runs one node at a time (a lock, /run/vpol-node.lock, held by the
//     supervisor); they are removed with `kube-proxy --cleanup`;
//     cleanupNode removes all of them (and the mount points it had to make),
//     and is also what `cluster stop` runs after a supervisor that was killed.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// The Pod sandbox image, built from pause/ and imported at start (with vpol.local/echo:1, from echo/).
	pauseImage = "vpol.local/pause:1"
	// Where the kubelet and the CNI plugins look for plugins (Debian's containernetworking-plugins).
	cniBinDir = "/usr/lib/cni"
)

// The settings the kubelet writes under /proc/sys when it starts (its
// protectKernelDefaults=false behaviour): faked inside the node's namespace.
var kubeletSysctls = []string{
	"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// hostLock is held by the supervisor of the one node a host runs (see the package comment on kube-proxy).
const hostLock = "/run/vpol-node.lock"

// nodePorts are the loopback ports of the node's components.
type nodePorts struct {
	api, scheduler, kubelet, kubeletHealthz, proxyHealthz, proxyMetrics int
}

// nodeMounts are the host paths the node writes under no matter what it is
// told: in the node's namespace, each is a directory under DIR/node.
var nodeMounts = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni"}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, line)
	return err
}

// nodeName is the name the node registers under: the host's name, which the
// API server could dial, lower-cased as a Node name must be.
func nodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "vpol-node"
	}
	return strings.ToLower(h)
}

// nodeIdentity holds the host-wide names of one cluster's node, derived from
// its state directory so that two clusters on a host never share them.
type nodeIdentity struct {
	dir     string // DIR/node
	tag     string
	bridge  string
	network string
	subnet  string
	gateway string // the bridge's address: the Pods' gateway and nameserver
	cgroup  string // the kubelet's cgroupRoot
}

func identityOf(clusterDir string) nodeIdentity {
	sum := sha256.Sum256([]byte(clusterDir))
	tag := hex.EncodeToString(sum[:])[:6]
	return nodeIdentity{
		dir:     filepath.Join(clusterDir, "node"),
		tag:     tag,
		bridge:  "vpol" + tag,
		network: "vpol-" + tag,
		subnet:  fmt.Sprintf("10.88.%d.0/24", sum[3]),
		gateway: fmt.Sprintf("10.88.%d.1", sum[3]),
		cgroup:  "/vpol-" + tag,
	}
}

func (n nodeIdentity) path(parts ...string) string {
	return filepath.Join(append([]string{n.dir}, parts...)...)
}

type node struct {
	nodeIdentity
	holder, containerd, kubelet, scheduler, proxy *child
	dns                                           *clusterDNS
	lock                                          *os.File
}

// startNode starts the scheduler and the node; the API server runs already.
func (u *upper) startNode(ctx context.Context, self string, ports nodePorts) error {
	n := &node{nodeIdentity: identityOf(u.dir)}
	u.node = n
	self, err := filepath.Abs(self)
	if err != nil {
		return err
	}
	if n.lock, err = lockHost(u.dir); err != nil {
		return err
	}
	cleanupNode(u.dir, true) // what a killed supervisor of the same DIR may have left
	for _, d := range []string{"containerd/root", "containerd/state", "runc", "cni/net.d", "cni/ipam", "sysctl",
		"logs"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(n.runDir(), 0o700); err != nil {
		return err
	}

	if n.scheduler, err = startChild(self, "kube-scheduler", append(
		u.componentArgs("pki/scheduler.kubeconfig", ports.scheduler), "--v="+strconv.Itoa(u.verbosity)),
		u.path("kube-scheduler.log")); err != nil {
		return err
	}

	// The bridge exists before any Pod so that Pods reach the API server
	// (10.0.0.1:443, in its certificate) from the first: a DNAT to its
	// loopback port, which route_localnet lets through.
	if err := run("ip", "link", "add", n.bridge, "type", "bridge"); err != nil {
		return err
	}
	// Its address is the host-local IPAM's gateway (the first of the subnet), set before any Pod so that the
	// cluster DNS can listen on it.
	if err := run("ip", "addr", "add", n.gateway+"/24", "dev", n.bridge); err != nil {
		return err
	}
	if err := run("ip", "link", "set", n.bridge, "up"); err != nil {
		return err
	}
	if n.dns, err = startClusterDNS(n.gateway, u.serviceAddresses); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+n.bridge+"/route_localnet", []byte("1"), 0o644); err != nil {
		return err
	}
	if err := run(append([]string{"iptables", "-t", "nat", "-A"}, n.apiRule(ports.api)...)...); err != nil {
		return err
	}

	if n.holder, err = startProcess("mount-namespace", []string{"unshare", "--mount", "--propagation", "private",
		"--", "sleep", "infinity"}, n.path("logs/holder.log")); err != nil {
		return err
	}
	holderPID := strconv.Itoa(n.holder.cmd.Process.Pid)
	var namespace string
	if err := waitFor(ctx, "the node's mount namespace", n.holder, func() bool {
		mine, _ := os.Readlink("/proc/self/ns/mnt")
		namespace, _ = os.Readlink("/proc/" + holderPID + "/ns/mnt")
		return namespace != "" && namespace != mine
	}); err != nil {
		return err
	}
	// Recorded for cleanupNode: every process left in this namespace is the node's (containerd's shims).
	if err := os.WriteFile(n.path("namespace"), []byte(namespace+"\n"), 0o644); err != nil {
		return err
	}
	// The host paths the kubelet and the CNI plugins write whatever they are told (the kubelet's certificates
	// and device plugins, the container log links, libcni's cache): directories of the node's own, mounted over
	// them inside the namespace. A path the host lacks is made as a mount point, and removed again by cleanupNode.
	for _, target := range nodeMounts {
		source := n.path("mnt", strings.ReplaceAll(strings.TrimPrefix(target, "/"), "/", "-"))
		if err := os.MkdirAll(source, 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(target); os.IsNotExist(err) {
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			if err := appendLine(n.path("made-mount-points"), target); err != nil {
				return err
			}
		}
		if err := run(n.enter("mount", "--bind", source, target)...); err != nil {
			return err
		}
	}
	for _, key := range kubeletSysctls {
		fake := n.path("sysctl", strings.ReplaceAll(key, "/", "."))
		value, err := os.ReadFile("/proc/sys/" + key)
		if err != nil {
			continue // not on this kernel
		}
		if err := os.WriteFile(fake, value, 0o644); err != nil {
			return err
		}
		if err := run(n.enter("mount", "--bind", fake, "/proc/sys/"+key)...); err != nil {
			return err
		}
	}

	if err := os.WriteFile(n.path("containerd.toml"), []byte(n.containerdConfig()), 0o644); err != nil {
		return err
	}
	if n.containerd, err = startProcess("containerd", n.enter("containerd", "--config", n.path("containerd.toml")),
		u.path("containerd.log")); err != nil {
		return err
	}
	if err := waitFor(ctx, "containerd", n.containerd, func() bool {
		return exec.Command("ctr", "--address", n.socket(), "version").Run() == nil
	}); err != nil {
		return err
	}
	for _, image := range []string{"pause", "echo"} {
		if err := n.importProgram(filepath.Join(filepath.Dir(self), image), image); err != nil {
			return err
		}
	}
	// The sandbox image is pinned: never collected.
	if _, err := n.ctr("images", "label", pauseImage, "io.cri-containerd.pinned=pinned"); err != nil {
		return fmt.Errorf("pin %s: %w", pauseImage, err)
	}

	// The kubelet's cgroupRoot must exist in every hierarchy (cpuset's with the CPUs and memory nodes of its parent).
	for _, hierarchy := range cgroupHierarchies() {
		root := filepath.Join(hierarchy, n.cgroup)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			if value, err := os.ReadFile(filepath.Join(hierarchy, file)); err == nil {
				if err := os.WriteFile(filepath.Join(root, file), value, 0o644); err != nil {
					return err
				}
			}
		}
	}
	if err := os.WriteFile(n.path("cni/net.d/10-vpol.conflist"), []byte(n.cniConfig()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(n.path("kubelet.yaml"), []byte(n.kubeletConfig(ports.kubelet, ports.kubeletHealthz)), 0o644); err != nil {
		return err
	}
	// Recorded before the kubelet and kube-proxy start, for cleanupNode: the chains they make are host-wide.
	if err := os.WriteFile(n.path("kube-chains"), nil, 0o644); err != nil {
		return err
	}
	if n.kubelet, err = startProcess("kubelet", n.enter(self, "kubelet",
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+u.path("pki/kubelet.kubeconfig"),
		"--hostname-override="+nodeName(),
		"--v="+strconv.Itoa(u.verbosity),
	), u.path("kubelet.log")); err != nil {
		return err
	}
	if err := waitFor(ctx, "node "+nodeName()+" Ready", n.kubelet, func() bool { return u.nodeReady() }); err != nil {
		return err
	}

	// kube-proxy, in the node's namespace too (what it would write under /proc/sys is not asked of it: see its
	// configuration); its rules are in the host's network namespace, where the Pods' packets are routed.
	if err := os.WriteFile(n.path("kube-proxy.yaml"), []byte(n.proxyConfig(u.path("pki/kube-proxy.kubeconfig"),
		ports.proxyHealthz, ports.proxyMetrics)), 0o644); err != nil {
		return err
	}
	if n.proxy, err = startProcess("kube-proxy", n.enter(self, "kube-proxy", "--config="+n.path("kube-proxy.yaml"),
		"--v="+strconv.Itoa(u.verbosity)), u.path("kube-proxy.log")); err != nil {
		return err
	}
	return u.waitHTTP(ctx, "kube-proxy synced (/healthz)", http.DefaultClient,
		fmt.Sprintf("http://127.0.0.1:%d/healthz", ports.proxyHealthz), n.proxy)
}

// lockHost takes the host's node lock for the cluster in dir, or says whose node holds it.
func lockHost(dir string) (*os.File, error) {
	f, err := os.OpenFile(hostLock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(hostLock)
		f.Close()
		return nil, fmt.Errorf("this host already runs the node of the cluster in %s (one node per host: "+
			"kube-proxy's iptables chains are host-wide); stop it first", strings.TrimSpace(string(holder)))
	}
	if err := f.Truncate(0); err != nil {
		return nil, err
	}
	if _, err := f.WriteAt([]byte(dir+"\n"), 0); err != nil {
		return nil, err
	}
	return f, nil // held until the supervisor exits
}

// enter is argv run inside the node's mount namespace.
func (n *node) enter(argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(n.holder.cmd.Process.Pid), "-m", "--"}, argv...)
}

// socket is containerd's socket: under /run, in a directory of the node's own, because a unix socket's path
// (with the ".ttrpc" containerd adds for its second socket) must be short and DIR need not be.
func (n nodeIdentity) socket() string { return filepath.Join(n.runDir(), "containerd.sock") }

func (n nodeIdentity) runDir() string { return "/run/vpol-" + n.tag }

// apiRule is the nat PREROUTING rule that takes Pods to the API server.
func (n nodeIdentity) apiRule(apiPort int) []string {
	return []string{"PREROUTING", "-i", n.bridge, "-d", serviceIP, "-p", "tcp", "--dport", "443",
		"-m", "comment", "--comment", n.network, "-j", "DNAT", "--to-destination",
		"127.0.0.1:" + strconv.Itoa(apiPort)}
}

func (n *node) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Root here has no CAP_SYS_RESOURCE: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = %q
      SystemdCgroup = false
`, n.path("containerd/root"), n.path("containerd/state"), n.socket(), pauseImage, cniBinDir,
		n.path("cni/net.d"), n.path("runc"))
}

func (n *node) cniConfig() string {
	cfg := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.network,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.bridge, "isGateway": true, "ipMasq": true, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": n.subnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": n.path("cni/ipam"),
			},
		}},
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	return string(data)
}

// proxyConfig is kube-proxy's: iptables mode; every Service connection masqueraded (replies from a Pod on the
// bridge come back through the host, without br_netfilter); NodePorts on the bridge's address only, never on
// the host's loopback (which would set route_localnet host-wide); conntrack settings left as the host has them.
func (n *node) proxyConfig(kubeconfig string, healthzPort, metricsPort int) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: ["%s/32"]
iptables:
  masqueradeAll: true
  localhostNodePorts: false
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, nodeName(), n.subnet, healthzPort, metricsPort, n.gateway)
}

func (n *node) kubeletConfig(port, healthzPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 only; root here has no CAP_SYS_RESOURCE and swap may be on.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
# No host-wide iptables chains of the kubelet's own (KUBE-IPTABLES-HINT, KUBE-FIREWALL: kube-proxy makes the latter).
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
# The images are imported, never pulled: nothing to collect, nothing to evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi"}
serializeImagePulls: false
# The cluster DNS (dns.go) on the bridge's address.
clusterDNS: [%s]
clusterDomain: %s
`, n.cgroup, n.socket(), port, healthzPort, n.gateway, clusterDomain)
}

// importProgram imports the static program at path as the one-layer image
// vpol.local/<name>:1 whose entrypoint it is (/<name>).
func (n *node) importProgram(path, name string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s (built by `cluster build`): %w", name, err)
	}
	archive, err := imageArchive("vpol.local/"+name+":1", []string{"/" + name}, map[string][]byte{name: data})
	if err != nil {
		return err
	}
	tarPath := n.path(name + ".tar")
	if err := os.WriteFile(tarPath, archive, 0o644); err != nil {
		return err
	}
	defer os.Remove(tarPath)
	if out, err := n.ctr("images", "import", tarPath); err != nil {
		return fmt.Errorf("import %s: %v: %s", name, err, out)
	}
	return nil
}

// imageArchive is a docker-archive (what `docker save` writes and `ctr images
// import` reads) of one image: the files at the root of one layer.
func imageArchive(ref string, entrypoint []string, files map[string][]byte) ([]byte, error) {
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for name, content := range files {
		if err := lw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)),
			ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := lw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := lw.Close(); err != nil {
		return nil, err
	}
	diff := sha256.Sum256(layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref},
		"Layers": []string{"layer.tar"}}})
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{"layer.tar", layer.Bytes()}, {"config.json", config}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)),
			ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (u *upper) nodeReady() bool {
	var obj struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if found, err := u.getJSON("/api/v1/nodes/"+nodeName(), &obj); !found || err != nil {
		return false
	}
	for _, c := range obj.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// stopNode ends every Pod, then the kubelet, containerd and the namespace,
// and removes what they left on the host. The API server still runs.
func (u *upper) stopNode() {
	n := u.node
	if n.scheduler != nil {
		n.scheduler.stop(5 * time.Second)
	}
	if n.proxy != nil {
		n.proxy.stop(5 * time.Second)
	}
	if n.dns != nil {
		n.dns.stop()
	}
	if n.kubelet != nil {
		// Pods end through the kubelet (their networks are torn down by CNI)
		// before it stops: every Pod deleted at once, then waited for.
		u.deleteAllPods()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && n.runningTasks() > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		n.kubelet.stop(10 * time.Second)
	}
	if n.containerd != nil {
		n.removeContainers()
		n.containerd.stop(10 * time.Second)
	}
	if n.holder != nil {
		n.holder.stop(5 * time.Second)
	}
	cleanupNode(u.dir, true)
}

func (u *upper) deleteAllPods() {
	var list struct {
		Items []struct {
			Metadata struct{ Name, Namespace string } `json:"metadata"`
		} `json:"items"`
	}
	if found, err := u.getJSON("/api/v1/pods", &list); !found || err != nil {
		return
	}
	for _, p := range list.Items {
		url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0", u.server,
			p.Metadata.Namespace, p.Metadata.Name)
		if req, err := http.NewRequest(http.MethodDelete, url, nil); err == nil {
			if resp, err := u.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
}

func (n *node) ctr(args ...string) ([]byte, error) {
	return exec.Command("ctr", append([]string{"--address", n.socket(), "-n", "k8s.io"}, args...)...).Output()
}

func (n *node) runningTasks() int {
	out, err := n.ctr("tasks", "ls", "-q")
	if err != nil {
		return 0
	}
	return len(strings.Fields(string(out)))
}

// removeContainers kills and deletes every container containerd still has,
// so that no shim outlives it.
func (n *node) removeContainers() {
	out, err := n.ctr("containers", "ls", "-q")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		_, _ = n.ctr("tasks", "kill", "-s", "SIGKILL", id)
		_, _ = n.ctr("tasks", "rm", "-f", id)
		_, _ = n.ctr("containers", "rm", id)
	}
}

// cleanupNode removes, idempotently, everything host-wide a node of the
// cluster in clusterDir may have left: processes in its mount namespace or
// cgroups, the cgroups, the bridge, iptables rules and chains, CNI caches;
// the KUBE-* chains only when ownsChains (it holds hostLock).
func cleanupNode(clusterDir string, ownsChains bool) {
	n := identityOf(clusterDir)
	// Processes of the node: in its mount namespace and naming its directories (containerd's shims, which
	// outlive a killed containerd; a namespace's number alone could be another's by now), or in its cgroups
	// (containers). When they are gone, so is the namespace, with every mount made in it.
	if data, err := os.ReadFile(n.path("namespace")); err == nil {
		namespace := strings.TrimSpace(string(data))
		mine, _ := os.Readlink("/proc/self/ns/mnt")
		if namespace != "" && namespace != mine {
			for attempt := 0; attempt < 50 && killWhere(func(pid string) bool {
				ns, _ := os.Readlink("/proc/" + pid + "/ns/mnt")
				cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
				return ns == namespace && (bytes.Contains(cmdline, []byte(n.dir)) ||
					bytes.Contains(cmdline, []byte(n.runDir())))
			}) > 0; attempt++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	for _, hierarchy := range cgroupHierarchies() {
		root := filepath.Join(hierarchy, n.cgroup)
		if _, err := os.Stat(root); err != nil {
			continue
		}
		for attempt := 0; attempt < 20; attempt++ {
			killCgroup(root)
			if removeCgroup(root) == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	_ = os.RemoveAll(n.runDir())
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
	removeIPTables(n.network)
	if _, err := os.Stat(n.path("kube-chains")); err == nil && !ownsChains {
		log.Printf("left the KUBE-* iptables chains: another cluster's node runs on this host now")
	} else if err == nil {
		// kube-proxy's own teardown of its chains (iptables, and the nftables and IPVS modes' if any), then what
		// it leaves: KUBE-FIREWALL, the chain it shares with kubelets (which make it, KUBE-IPTABLES-HINT and
		// KUBE-KUBELET-CANARY unless makeIPTablesUtilChains is false, as here). Every KUBE-* chain is this
		// node's: a host runs one node at a time (hostLock).
		if self, err := os.Executable(); err == nil {
			if out, err := exec.Command(self, "kube-proxy", "--cleanup").CombinedOutput(); err != nil {
				log.Printf("kube-proxy --cleanup: %v\n%s", err, out)
			}
		}
		for _, binary := range []string{"iptables", "ip6tables"} {
			for _, table := range []string{"filter", "nat", "mangle"} {
				removeChains(binary, table, func(rule string) bool { return strings.Contains(rule, " -j KUBE-") },
					"KUBE-")
			}
		}
		_ = os.Remove(n.path("kube-chains"))
	}
	// The mount points made on the host (empty: what was written went to DIR/node).
	if data, err := os.ReadFile(n.path("made-mount-points")); err == nil {
		made := strings.Fields(string(data))
		for i := len(made) - 1; i >= 0; i-- {
			_ = os.Remove(made[i]) // fails when not empty: someone else's now
		}
		_ = os.Remove(n.path("made-mount-points"))
	}
}

// killWhere sends SIGKILL to every process that matches; it returns how many matched.
func killWhere(match func(pid string) bool) int {
	entries, _ := os.ReadDir("/proc")
	found := 0
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() || !match(e.Name()) {
			continue
		}
		found++
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return found
}

func cgroupHierarchies() []string {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

func killCgroup(root string) {
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, pid := range strings.Fields(string(data)) {
			if p, err := strconv.Atoi(pid); err == nil {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		return nil
	})
}

// removeCgroup removes a cgroup directory tree, deepest first (a cgroup
// directory is removed with rmdir, never by deleting its files).
func removeCgroup(root string) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !os.IsNotExist(err) {
			last = err
		}
	}
	return last
}

// removeIPTables deletes the nat rules commented with the network's name (the
// API server's DNAT, the bridge plugin's masquerading) and the chains they jump to.
func removeIPTables(network string) {
	removeChains("iptables", "nat", func(rule string) bool { return strings.Contains(rule, network) }, "CNI-")
}

// removeChains deletes the rules of table that match (outside the chains it deletes), and the chains named
// with prefix that they jump to (prefix "KUBE-" and a rule matching " -j KUBE-": every chain of that prefix).
func removeChains(binary, table string, match func(rule string) bool, prefix string) {
	out, err := exec.Command(binary, "-t", table, "-S").Output()
	if err != nil {
		return
	}
	var chains []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		if fields[0] == "-N" && prefix == "KUBE-" && strings.HasPrefix(fields[1], prefix) {
			chains = append(chains, fields[1])
		}
		if fields[0] != "-A" || strings.HasPrefix(fields[1], prefix) || !match(line) {
			continue
		}
		for i, f := range fields {
			if f == "-j" && i+1 < len(fields) && strings.HasPrefix(fields[i+1], prefix) {
				chains = append(chains, fields[i+1])
			}
		}
		// The rule as iptables -S printed it, deleted: its quoted comment re-split by a shell.
		_ = exec.Command("sh", "-c", binary+" -t "+table+" -D "+strings.TrimPrefix(line, "-A ")).Run()
	}
	for _, chain := range chains { // flushed first: a chain is deleted only once nothing jumps to it
		_ = exec.Command(binary, "-t", table, "-F", chain).Run()
	}
	for _, chain := range chains {
		_ = exec.Command(binary, "-t", table, "-X", chain).Run()
	}
}

func run(argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// waitFor polls ready until it holds, failing early when owner exits.
func waitFor(ctx context.Context, what string, owner *child, ready func() bool) error {
	for !ready() {
		select {
		case <-owner.done:
			return fmt.Errorf("%s exited while waiting for %s: %v (see %s)", owner.name, what, owner.err, owner.log)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
