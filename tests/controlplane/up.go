package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/version"
)

// controllers run by kube-controller-manager. Only what the tests rely on
// (garbage collection, namespace deletion, service accounts and their
// tokens, the kube-root-ca.crt config maps, aggregated cluster roles and the
// ValidatingAdmissionPolicy type-checking status); no workload, node or
// volume controllers unless there is a node (nodeControllers).
var controllers = []string{
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller",
	"validatingadmissionpolicy-status-controller",
}

// nodeControllers run too with `--node`: Deployments make Pods, Services get
// endpoints (which the API server dials for webhooks), PodDisruptionBudgets
// hold, the node's taints follow its conditions.
var nodeControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"endpointslice-controller",
	"disruption-controller",
	// A new node is tainted not-ready until this controller sees it Ready.
	"node-lifecycle-controller",
}

func (u *upper) controllers() []string {
	if u.withNode {
		return append(append([]string{}, controllers...), nodeControllers...)
	}
	return controllers
}

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1" // first address of serviceCIDR: the kubernetes.default service
	issuer      = "https://kubernetes.default.svc.cluster.local"
	contextName = "vpol-controlplane"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// readyInfo is written to DIR/ready.json once the cluster is usable.
type readyInfo struct {
	PID        int            `json:"pid"`
	Version    string         `json:"version"`
	Server     string         `json:"server"`
	Kubeconfig string         `json:"kubeconfig"`
	Ports      map[string]int `json:"ports"`
	ChildPIDs  map[string]int `json:"child_pids"`
	Node       string         `json:"node,omitempty"`
	// What the node made on the host (and cleanupNode removes): bridge, network, cgroup root, Pod subnet,
	// containerd's socket (`cluster import` loads images through it).
	NodeHost        map[string]string `json:"node_host,omitempty"`
	StartupSeconds  float64           `json:"startup_seconds"`
	StartedUnixTime int64             `json:"started_unix_time"`
}

func runUp(argv []string) int {
	// Children are started from this goroutine with Pdeathsig set; pin it to
	// the main OS thread so that "parent thread exited" only ever means
	// "supervisor exited".
	runtime.LockOSThread()

	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory (required)")
	verbosity := fs.Int("v", 1, "log verbosity of kube-apiserver and kube-controller-manager")
	timeout := fs.Duration("timeout", 180*time.Second, "give up if the cluster is not ready within this time")
	withNode := fs.Bool("node", false, "also run kube-scheduler and a node (kubelet and containerd) whose Pods run here")
	etcdQuota := fs.Int64("etcd-quota-bytes", 0, "etcd's backend size limit (0: etcd's default, 2 GiB); large benchmarks "+
		"(100,000 Pods and their reports) need more")
	var apiExtra, kcmExtra stringList
	fs.Var(&apiExtra, "apiserver-arg", "extra kube-apiserver flag, e.g. --apiserver-arg=--feature-gates=X=true (repeatable)")
	fs.Var(&kcmExtra, "controller-manager-arg", "extra kube-controller-manager flag (repeatable)")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "up: --dir is required")
		return 2
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("[vpol-controlplane] ")

	u := &upper{start: time.Now(), verbosity: *verbosity, apiExtra: apiExtra, kcmExtra: kcmExtra, withNode: *withNode,
		etcdQuota: *etcdQuota}
	var err error
	if u.dir, err = filepath.Abs(*dir); err != nil {
		log.Print(err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	stopping := make(chan os.Signal, 1)
	go func() {
		s := <-sigs
		log.Printf("received %v, shutting down", s)
		stopping <- s
		cancel()
	}()

	defer u.shutdown()
	startCtx, startCancel := context.WithTimeout(ctx, *timeout)
	defer startCancel()
	if err := u.bringUp(startCtx); err != nil {
		if ctx.Err() != nil {
			return 0 // stopped while starting
		}
		log.Printf("start failed: %v", err)
		return 1
	}

	var kubeletDone, containerdDone <-chan struct{}
	if u.node != nil {
		kubeletDone, containerdDone = u.node.kubelet.done, u.node.containerd.done
	}
	select {
	case <-stopping:
		return 0
	case <-kubeletDone:
		log.Printf("kubelet exited unexpectedly: %v (see kubelet.log)", u.node.kubelet.err)
	case <-containerdDone:
		log.Printf("containerd exited unexpectedly: %v (see containerd.log)", u.node.containerd.err)
	case <-u.apiserver.done:
		log.Printf("kube-apiserver exited unexpectedly: %v (see kube-apiserver.log)", u.apiserver.err)
	case <-u.kcm.done:
		log.Printf("kube-controller-manager exited unexpectedly: %v (see kube-controller-manager.log)", u.kcm.err)
	case err := <-u.etcd.Err():
		log.Printf("etcd failed: %v (see etcd.log)", err)
	}
	return 1
}

type upper struct {
	start     time.Time
	dir       string
	verbosity int
	apiExtra  []string
	kcmExtra  []string
	withNode  bool
	node      *node
	etcdQuota int64

	pki       *pki
	etcd      *embed.Etcd
	apiserver *child
	kcm       *child
	client    *http.Client
	server    string
}

func (u *upper) path(name string) string { return filepath.Join(u.dir, name) }

func (u *upper) phase(msg string) {
	log.Printf("%-44s (+%.2fs)", msg, time.Since(u.start).Seconds())
}

func (u *upper) bringUp(ctx context.Context) error {
	if err := os.MkdirAll(u.dir, 0o755); err != nil {
		return err
	}
	// A fresh cluster every time: drop state of a previous run in DIR.
	for _, name := range []string{"etcd", "pki", "apiserver-certs", "ready.json", "kubeconfig"} {
		if err := os.RemoveAll(u.path(name)); err != nil {
			return err
		}
	}

	u.pki = newPKI(u.path("pki"))
	if err := u.pki.generate(net.ParseIP(serviceIP), nodeName()); err != nil {
		return fmt.Errorf("generate certificates: %w", err)
	}
	u.phase("certificates generated")

	ports, err := freePorts(9)
	if err != nil {
		return fmt.Errorf("pick free ports: %w", err)
	}
	etcdClientPort, etcdPeerPort, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	schedulerPort, kubeletPort, kubeletHealthzPort := ports[4], ports[5], ports[6]
	proxyHealthzPort, proxyMetricsPort := ports[7], ports[8]
	u.server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	etcdURL, err := u.startEtcd(ctx, etcdClientPort, etcdPeerPort)
	if err != nil {
		return err
	}
	u.phase("etcd ready at " + etcdURL)

	if err := u.writeKubeconfigs(); err != nil {
		return err
	}
	if u.client, err = u.adminHTTPClient(); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	apiArgs := []string{
		"--advertise-address=127.0.0.1",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + u.path("apiserver-certs"),
		"--tls-cert-file=" + u.pki.ServingCert,
		"--tls-private-key-file=" + u.pki.ServingKey,
		"--client-ca-file=" + u.pki.CACert,
		// front proxy, as kubeadm sets it up: aggregated APIs work and
		// delegating components find the requestheader CA they look for
		"--requestheader-client-ca-file=" + u.pki.FrontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + u.pki.FrontProxyCert,
		"--proxy-client-key-file=" + u.pki.FrontProxyKey,
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + u.pki.SAPub,
		"--service-account-signing-key-file=" + u.pki.SAKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		// The lease endpoint reconciler refuses a loopback advertise address
		// (and would publish it as the endpoint of the kubernetes Service,
		// which nothing in-cluster could reach anyway): no kubelet, no pods.
		"--endpoint-reconciler-type=none",
		"--authorization-mode=Node,RBAC",
		// On top of the default plugins (which already include
		// ValidatingAdmissionPolicy); named explicitly because the tests
		// depend on it.
		"--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=" + strconv.Itoa(u.verbosity),
	}
	if u.withNode {
		apiArgs = append(apiArgs,
			// Webhooks and aggregated APIs behind Services are dialled at their endpoints: kube-proxy routes
			// the node's Pods, not the host's processes (as in a cluster whose API server is off the nodes).
			"--enable-aggregator-routing=true",
			// The kubelet is reached at the address it reports, not by a host name DNS may not know.
			"--kubelet-preferred-address-types=InternalIP,Hostname")
	}
	apiArgs = append(apiArgs, u.apiExtra...)
	if u.apiserver, err = startChild(self, "kube-apiserver", apiArgs, u.path("kube-apiserver.log")); err != nil {
		return err
	}
	if err := u.waitHTTP(ctx, "kube-apiserver /readyz", u.client, u.server+"/readyz", u.apiserver); err != nil {
		return err
	}
	u.phase("kube-apiserver ready at " + u.server)

	kcmArgs := append(u.componentArgs("pki/controller-manager.kubeconfig", kcmPort),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+u.pki.SAKey,
		"--root-ca-file="+u.pki.CACert,
		"--controllers="+strings.Join(u.controllers(), ","),
		"--kube-api-qps=100",
		"--kube-api-burst=200",
		"--v="+strconv.Itoa(u.verbosity),
	)
	kcmArgs = append(kcmArgs, u.kcmExtra...)
	if u.kcm, err = startChild(self, "kube-controller-manager", kcmArgs, u.path("kube-controller-manager.log")); err != nil {
		return err
	}
	// The controller-manager is serving and its controllers are running once
	// the service-account controller has created the "default" account.
	kcmHealth := fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort)
	if err := u.waitHTTP(ctx, "kube-controller-manager /healthz", u.client, kcmHealth, u.kcm); err != nil {
		return err
	}
	if err := u.waitHTTP(ctx, "serviceaccount default/default", u.client,
		u.server+"/api/v1/namespaces/default/serviceaccounts/default", u.kcm); err != nil {
		return err
	}
	u.phase("kube-controller-manager ready")

	if u.withNode {
		if err := u.startNode(ctx, self, nodePorts{api: apiPort, scheduler: schedulerPort, kubelet: kubeletPort,
			kubeletHealthz: kubeletHealthzPort, proxyHealthz: proxyHealthzPort, proxyMetrics: proxyMetricsPort}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		u.phase("kube-scheduler and node " + nodeName() + " ready")
	}

	info := readyInfo{
		PID:        os.Getpid(),
		Version:    version.Get().GitVersion,
		Server:     u.server,
		Kubeconfig: u.path("kubeconfig"),
		Ports: map[string]int{
			"etcd-client": etcdClientPort, "etcd-peer": etcdPeerPort,
			"kube-apiserver": apiPort, "kube-controller-manager": kcmPort,
		},
		ChildPIDs: map[string]int{
			"kube-apiserver":          u.apiserver.cmd.Process.Pid,
			"kube-controller-manager": u.kcm.cmd.Process.Pid,
		},
		Node:            "",
		StartupSeconds:  time.Since(u.start).Seconds(),
		StartedUnixTime: u.start.Unix(),
	}
	if u.node != nil {
		info.Node = nodeName()
		info.NodeHost = map[string]string{"bridge": u.node.bridge, "network": u.node.network,
			"cgroup": u.node.cgroup, "subnet": u.node.subnet, "containerd": u.node.socket(),
			"dns": u.node.gateway}
		info.Ports["kube-scheduler"], info.Ports["kubelet"] = schedulerPort, kubeletPort
		info.ChildPIDs["kube-scheduler"] = u.node.scheduler.cmd.Process.Pid
		info.ChildPIDs["kubelet"] = u.node.kubelet.cmd.Process.Pid
		info.ChildPIDs["containerd"] = u.node.containerd.cmd.Process.Pid
		info.ChildPIDs["kube-proxy"] = u.node.proxy.cmd.Process.Pid
	}
	data, _ := json.MarshalIndent(info, "", "  ")
	tmp := u.path("ready.json.tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, u.path("ready.json")); err != nil {
		return err
	}
	u.phase("cluster ready")
	return nil
}

func (u *upper) startEtcd(ctx context.Context, clientPort, peerPort int) (string, error) {
	cfg := embed.NewConfig()
	cfg.Name = "vpol"
	cfg.Dir = u.path("etcd")
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	cfg.InitialClusterToken = fmt.Sprintf("vpol-%d", os.Getpid())
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{u.path("etcd.log")}
	// Throw-away test data: durability is not worth the fsync latency.
	cfg.UnsafeNoFsync = true
	if u.etcdQuota > 0 {
		cfg.QuotaBackendBytes = u.etcdQuota
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", fmt.Errorf("start etcd: %w", err)
	}
	u.etcd = e
	select {
	case <-e.Server.ReadyNotify():
		return clientURL.String(), nil
	case err := <-e.Err():
		return "", fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		return "", fmt.Errorf("etcd not ready: %w", ctx.Err())
	}
}

// componentArgs are the flags kube-controller-manager and kube-scheduler share: their kubeconfig (also for
// delegated authentication and authorization), serving on the loopback with the cluster's serving certificate,
// no leader election.
func (u *upper) componentArgs(kubeconfig string, port int) []string {
	path := u.path(kubeconfig)
	return []string{
		"--kubeconfig=" + path,
		"--authentication-kubeconfig=" + path,
		"--authorization-kubeconfig=" + path,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + u.pki.ServingCert,
		"--tls-private-key-file=" + u.pki.ServingKey,
		"--leader-elect=false",
	}
}

func (u *upper) writeKubeconfigs() error {
	caPEM, err := os.ReadFile(u.pki.CACert)
	if err != nil {
		return err
	}
	write := func(path, user, certPath, keyPath string) error {
		cert, err := os.ReadFile(certPath)
		if err != nil {
			return err
		}
		key, err := os.ReadFile(keyPath)
		if err != nil {
			return err
		}
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: u.server, CertificateAuthorityData: caPEM}
		cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
		cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: user, Namespace: "default"}
		cfg.CurrentContext = contextName
		return clientcmd.WriteToFile(*cfg, path)
	}
	if err := write(u.path("pki/controller-manager.kubeconfig"), "system:kube-controller-manager",
		u.pki.ControllerCert, u.pki.ControllerKey); err != nil {
		return err
	}
	if err := write(u.path("pki/scheduler.kubeconfig"), "system:kube-scheduler",
		u.pki.SchedulerCert, u.pki.SchedulerKey); err != nil {
		return err
	}
	if err := write(u.path("pki/kubelet.kubeconfig"), "system:node:"+nodeName(), u.pki.NodeCert, u.pki.NodeKey); err != nil {
		return err
	}
	if err := write(u.path("pki/kube-proxy.kubeconfig"), "system:kube-proxy", u.pki.ProxyCert, u.pki.ProxyKey); err != nil {
		return err
	}
	// Written last-but-atomically so that a present DIR/kubeconfig is complete.
	tmp := u.path("kubeconfig.tmp")
	if err := write(tmp, "vpol-admin", u.pki.AdminCert, u.pki.AdminKey); err != nil {
		return err
	}
	return os.Rename(tmp, u.path("kubeconfig"))
}

// getJSON decodes the API server's answer at path into out; found is false on 404.
func (u *upper) getJSON(path string, out any) (bool, error) {
	resp, err := u.client.Get(u.server + path)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, json.NewDecoder(resp.Body).Decode(out)
	case http.StatusNotFound:
		return false, nil
	default:
		return false, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
}

func (u *upper) adminHTTPClient() (*http.Client, error) {
	caPEM, err := os.ReadFile(u.pki.CACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("bad CA certificate")
	}
	cert, err := tls.LoadX509KeyPair(u.pki.AdminCert, u.pki.AdminKey)
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
			DisableKeepAlives: true,
		},
	}, nil
}

// waitHTTP polls url until it answers 200, failing early when the process
// that should serve it exits.
func (u *upper) waitHTTP(ctx context.Context, what string, client *http.Client, url string, owner *child) error {
	var last string
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-owner.done:
			return fmt.Errorf("%s exited while waiting for %s: %v (see %s)", owner.name, what, owner.err, owner.log)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; last answer: %s", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// shutdown stops the scheduler and the controller-manager (nothing makes or
// places Pods any more), then the node, then the apiserver, then etcd.
func (u *upper) shutdown() {
	if u.node != nil && u.node.scheduler != nil {
		u.node.scheduler.stop(5 * time.Second)
	}
	if u.kcm != nil {
		u.kcm.stop(10 * time.Second)
	}
	if u.node != nil {
		u.stopNode()
	}
	if u.apiserver != nil {
		u.apiserver.stop(20 * time.Second)
	}
	if u.etcd != nil {
		done := make(chan struct{})
		go func() { u.etcd.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			log.Print("etcd did not close within 10s")
		}
	}
	if u.dir != "" {
		os.Remove(u.path("ready.json"))
	}
	log.Printf("stopped (+%.2fs)", time.Since(u.start).Seconds())
}

type child struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startChild(self, mode string, args []string, logPath string) (*child, error) {
	return startProcess(mode, append([]string{self, mode}, args...), logPath)
}

// startProcess starts argv as a child named name, its output in logPath.
func startProcess(name string, argv []string, logPath string) (*child, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = f
	cmd.Stderr = f
	// Die with the supervisor even if it is SIGKILLed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		log.Printf("%s did not stop within %v, killing it", c.name, grace)
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// All listeners are held until every port is chosen so the ports differ.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
