// A local OCI registry for vpol's image verification tests: go-containerregistry's registry (the one `crane
// registry serve` runs) with the OCI 1.1 referrers API turned on, and optionally behind token authentication as
// public registries do it (a 401 with a Bearer challenge, a token endpoint taking basic credentials).
//
//	registry --address 127.0.0.1:PORT [--user NAME --password SECRET] [--no-referrers]
//
// It prints "listening on ADDRESS" once it accepts connections. Everything is kept in memory.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/registry"
)

type tokens struct {
	mu     sync.Mutex
	issued map[string]bool
}

func (t *tokens) issue() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.issued[token] = true
	return token
}

func (t *tokens) valid(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.issued[token]
}

func main() {
	address := flag.String("address", "127.0.0.1:0", "where to listen")
	user := flag.String("user", "", "require this user (with --password) through token authentication")
	password := flag.String("password", "", "the user's password")
	noReferrers := flag.Bool("no-referrers", false, "serve no referrers API (clients fall back to the tag schema)")
	flag.Parse()

	handler := registry.New(registry.WithReferrersSupport(!*noReferrers))
	if *user != "" {
		issued := &tokens{issued: map[string]bool{}}
		inner := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/token" {
				u, p, ok := r.BasicAuth()
				if !ok || u != *user || p != *password {
					http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]string{"token": issued.issue()})
				return
			}
			auth := r.Header.Get("Authorization")
			if !strings.HasPrefix(auth, "Bearer ") || !issued.valid(strings.TrimPrefix(auth, "Bearer ")) {
				realm := fmt.Sprintf("http://%s/token", r.Host)
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q,service="vpol-test-registry"`, realm))
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`,
					http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	listener, err := net.Listen("tcp", *address)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on %s\n", listener.Addr())
	log.Fatal(http.Serve(listener, handler))
}
