// A local OCI registry for vpol's image verification tests: go-containerregistry's registry (the one `crane
// registry serve` runs) with the OCI 1.1 referrers API turned on, and optionally behind token authentication as
// public registries do it (a 401 with a Bearer challenge, a token endpoint taking basic credentials).
//
//	registry --address 127.0.0.1:PORT [--user NAME --password SECRET] [--no-referrers]
//
// It prints "listening on ADDRESS" once it accepts connections. Everything is kept in memory. GET /_requests
// answers how many requests it served (JSON, by kind: manifest, blob, referrers, tags, other), so that benchmarks
// count every client's registry round trips the same way.
//
// The referrers API answers as the OCI distribution spec 1.1 says (go-containerregistry's reports a manifest's
// config media type as its artifactType and ignores the artifactType filter): each descriptor carries the
// manifest's own artifactType when it has one, and ?artifactType= filters (with the OCI-Filters-Applied header).
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
	"net/http/httptest"
	"regexp"
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

var referrersPath = regexp.MustCompile(`^/v2/(.+)/referrers/(sha256:[a-f0-9]{64})$`)

// compliantReferrers answers the referrers API from the inner registry's answer, with each descriptor's
// artifactType read from its manifest and the artifactType filter applied.
func compliantReferrers(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := referrersPath.FindStringSubmatch(r.URL.Path)
		if m == nil || r.Method != http.MethodGet {
			inner.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		var index map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &index); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		want := r.URL.Query().Get("artifactType")
		kept := []any{}
		manifests, _ := index["manifests"].([]any)
		for _, item := range manifests {
			desc, ok := item.(map[string]any)
			if !ok {
				continue
			}
			get := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/v2/%s/manifests/%v", m[1], desc["digest"]), nil)
			get.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json")
			one := httptest.NewRecorder()
			inner.ServeHTTP(one, get)
			var manifest map[string]any
			if json.Unmarshal(one.Body.Bytes(), &manifest) == nil {
				if t, ok := manifest["artifactType"].(string); ok && t != "" {
					desc["artifactType"] = t
				}
			}
			if want == "" || desc["artifactType"] == want {
				kept = append(kept, desc)
			}
		}
		index["manifests"] = kept
		w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
		if want != "" {
			w.Header().Set("OCI-Filters-Applied", "artifactType")
		}
		_ = json.NewEncoder(w).Encode(index)
	})
}

type counter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *counter) wrap(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_requests" {
			c.mu.Lock()
			defer c.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(c.counts)
			return
		}
		kind := "other"
		for _, k := range []string{"/manifests/", "/blobs/", "/referrers/", "/tags/"} {
			if strings.Contains(r.URL.Path, k) {
				kind = strings.Trim(k, "/")
			}
		}
		c.mu.Lock()
		c.counts[kind]++
		c.mu.Unlock()
		inner.ServeHTTP(w, r)
	})
}

func main() {
	address := flag.String("address", "127.0.0.1:0", "where to listen")
	user := flag.String("user", "", "require this user (with --password) through token authentication")
	password := flag.String("password", "", "the user's password")
	noReferrers := flag.Bool("no-referrers", false, "serve no referrers API (clients fall back to the tag schema)")
	flag.Parse()

	handler := registry.New(registry.WithReferrersSupport(!*noReferrers))
	if !*noReferrers {
		handler = compliantReferrers(handler)
	}
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
	handler = (&counter{counts: map[string]int{}}).wrap(handler)
	listener, err := net.Listen("tcp", *address)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on %s\n", listener.Addr())
	log.Fatal(http.Serve(listener, handler))
}
