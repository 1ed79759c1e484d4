package main

// The node's cluster DNS: what CoreDNS answers in a real cluster, for the
// names the node's Pods use (no CoreDNS module is served here, and a whole
// CoreDNS would be more than the tests need). It runs in the supervisor, on
// the bridge's address (the Pods' gateway: reached without kube-proxy), and
// the kubelet gives Pods that address as their nameserver:
//
//	<service>.<namespace>.svc.<domain>  A: the Service's cluster IPs; for a
//	                                    headless Service, the ready endpoints'
//	                                    addresses (from its EndpointSlices)
//	other names under <domain>          NXDOMAIN
//	names outside <domain>              forwarded to the host's first nameserver
//
// UDP only (what resolvers use for answers this small). Messages are parsed
// and built with golang.org/x/net/dns/dnsmessage.

import (
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const clusterDomain = "cluster.local"

type clusterDNS struct {
	conn     *net.UDPConn
	domain   string // "cluster.local."
	upstream string // host:53, or "" when the host has none
	// lookup answers the addresses of Service name in namespace ns; found is false when there is no such Service.
	lookup func(ns, name string) (addrs []net.IP, found bool, err error)
}

func startClusterDNS(address string, lookup func(ns, name string) ([]net.IP, bool, error)) (*clusterDNS, error) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(address), Port: 53})
	if err != nil {
		return nil, fmt.Errorf("cluster DNS on %s:53: %w", address, err)
	}
	d := &clusterDNS{conn: conn, domain: clusterDomain + ".", upstream: hostNameserver(), lookup: lookup}
	go d.serve()
	return d, nil
}

func (d *clusterDNS) stop() { _ = d.conn.Close() }

func (d *clusterDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, peer, err := d.conn.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		query := append([]byte(nil), buf[:n]...)
		go func() {
			if answer := d.answer(query); answer != nil {
				_, _ = d.conn.WriteToUDP(answer, peer)
			}
		}()
	}
}

// answer is the reply to one query (nil: none, the query could not be read).
func (d *clusterDNS) answer(query []byte) []byte {
	var p dnsmessage.Parser
	header, err := p.Start(query)
	if err != nil {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(question.Name.String())
	if name != d.domain && !strings.HasSuffix(name, "."+d.domain) {
		return d.forward(query, header, question)
	}
	rcode, addrs := dnsmessage.RCodeNameError, []net.IP(nil)
	if labels := strings.Split(strings.TrimSuffix(name, "."+d.domain), "."); len(labels) == 3 && labels[2] == "svc" {
		found, err := false, error(nil)
		addrs, found, err = d.lookup(labels[1], labels[0])
		switch {
		case err != nil:
			log.Printf("cluster DNS: %s: %v", name, err)
			rcode = dnsmessage.RCodeServerFailure
		case found:
			rcode = dnsmessage.RCodeSuccess
		}
	}
	return reply(header, question, rcode, func(b *dnsmessage.Builder) error {
		if question.Type != dnsmessage.TypeA && question.Type != dnsmessage.TypeALL {
			return nil // the name exists, without addresses of that type
		}
		for _, ip := range addrs {
			if v4 := ip.To4(); v4 != nil {
				rh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 5}
				if err := b.AResource(rh, dnsmessage.AResource{A: [4]byte(v4)}); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func reply(query dnsmessage.Header, question dnsmessage.Question, rcode dnsmessage.RCode,
	answers func(*dnsmessage.Builder) error) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: query.ID, Response: true, Authoritative: rcode != dnsmessage.RCodeServerFailure,
		RecursionDesired: query.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(question) != nil || b.StartAnswers() != nil || answers(&b) != nil {
		return nil
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// forward relays a query for a name outside the cluster to the host's nameserver (SERVFAIL without one).
func (d *clusterDNS) forward(query []byte, header dnsmessage.Header, question dnsmessage.Question) []byte {
	failed := func() []byte {
		return reply(header, question, dnsmessage.RCodeServerFailure, func(*dnsmessage.Builder) error { return nil })
	}
	if d.upstream == "" {
		return failed()
	}
	conn, err := net.DialTimeout("udp", d.upstream, 2*time.Second)
	if err != nil {
		return failed()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write(query); err != nil {
		return failed()
	}
	buf := make([]byte, 65535)
	n, err := conn.Read(buf)
	if err != nil {
		return failed()
	}
	return buf[:n]
}

// hostNameserver is the first nameserver of the host's /etc/resolv.conf, as host:53.
func hostNameserver() string {
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "nameserver" {
			return net.JoinHostPort(fields[1], "53")
		}
	}
	return ""
}

// serviceAddresses is the cluster DNS's lookup against the API server.
func (u *upper) serviceAddresses(ns, name string) ([]net.IP, bool, error) {
	var svc struct {
		Spec struct {
			ClusterIPs []string `json:"clusterIPs"`
		} `json:"spec"`
	}
	found, err := u.getJSON(fmt.Sprintf("/api/v1/namespaces/%s/services/%s", url.PathEscape(ns), url.PathEscape(name)), &svc)
	if err != nil || !found {
		return nil, false, err
	}
	var addrs []net.IP
	for _, ip := range svc.Spec.ClusterIPs {
		if parsed := net.ParseIP(ip); parsed != nil {
			addrs = append(addrs, parsed)
		}
	}
	if len(addrs) > 0 {
		return addrs, true, nil
	}
	// Headless: the addresses of its ready endpoints.
	var slices struct {
		Items []struct {
			Endpoints []struct {
				Addresses  []string `json:"addresses"`
				Conditions struct {
					Ready *bool `json:"ready"`
				} `json:"conditions"`
			} `json:"endpoints"`
		} `json:"items"`
	}
	selector := url.QueryEscape("kubernetes.io/service-name=" + name)
	if _, err := u.getJSON(fmt.Sprintf("/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?labelSelector=%s",
		url.PathEscape(ns), selector), &slices); err != nil {
		return nil, false, err
	}
	for _, slice := range slices.Items {
		for _, endpoint := range slice.Endpoints {
			if endpoint.Conditions.Ready != nil && !*endpoint.Conditions.Ready {
				continue
			}
			for _, a := range endpoint.Addresses {
				if parsed := net.ParseIP(a); parsed != nil {
					addrs = append(addrs, parsed)
				}
			}
		}
	}
	return addrs, true, nil
}
