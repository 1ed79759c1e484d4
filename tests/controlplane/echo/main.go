// Command echo is the test node's workload image (vpol.local/echo:1): an HTTP
// server for Pods that must really run, and a one-shot client for what a Pod
// must reach.
//
//	/echo [--listen :8080]     serve: GET answers {"host", "path", "query"}; POST
//	                           answers {"received": <the JSON body>}; /healthz answers ok
//	/echo --fetch URL          GET URL once (TLS not verified), print the status
//	                           line and body, exit 0 on a 2xx answer
//	/echo --resolve NAME       print NAME's addresses (the Pod's resolver), one per line
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	fetch := flag.String("fetch", "", "GET this URL once and exit")
	resolve := flag.String("resolve", "", "print this name's addresses and exit")
	flag.Parse()
	if *fetch != "" {
		os.Exit(get(*fetch))
	}
	if *resolve != "" {
		addrs, err := net.LookupHost(*resolve)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(strings.Join(addrs, "\n"))
		return
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			var body any
			if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
				http.Error(w, `{"error": "the body is not JSON"}`, http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"received": body, "host": host})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"host": host, "path": r.URL.Path, "query": r.URL.Query()})
	})
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := server.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(url string) int {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a probe of reachability only
	}}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	fmt.Printf("%s\n%s\n", resp.Status, body)
	if resp.StatusCode/100 != 2 {
		return 1
	}
	return 0
}
