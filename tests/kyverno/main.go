// The Kyverno oracle of vpol's differential test (tests/differential): Kyverno's own CEL policy engine,
// none of its CLI's commands (only the CLI's resolution of mocked GlobalContextEntries). It imports the
// ValidatingPolicy and MutatingPolicy compilers and engines of the kyverno/kyverno module (pinned in
// go.mod) with their fake context provider, and evaluates every policy of one case on every resource of it.
//
// Input (stdin, JSON): one case
//
//	validating, namespacedValidating, mutating, exceptions
//	             policy documents as written (apiVersion and kind kept)
//	resources    [{object, namespaced}]  namespaced: the kind is namespaced (the test harness knows the
//	             kinds; an object of a namespaced kind without a namespace is placed in "default" as
//	             Kyverno's CLI does)
//	operation    CREATE (default), UPDATE or DELETE, shaped as Kyverno's CLI shapes them
//	userInfo     the admission user (authentication/v1 UserInfo)
//	namespaces   [Namespace]  what namespaceObject resolves to (nil for any other namespace, as in
//	             Kyverno's CLI, which knows only the namespaces of its values file)
//	context      {resources: [object], images: [image as in a CLI Context file],
//	             httpMocks: {"GET:url": {body, statusCode}},
//	             globalContextEntries: [a Kyverno CLI test's globalContextEntries, resourceFiles already read
//	             into resources]: validated and resolved by Kyverno's CLI code (its apis and store packages,
//	             not its commands), then handed to the fake context provider as the CLI hands them,
//	             clusterGlobalContext: [{entry: a GlobalContextEntry object, objects: [what its
//	             kubernetesResource lists], response: the answer of its apiCall urlPath, error: or its
//	             failure}]: real store entries (Kyverno's k8sresource entry over a fake dynamic client,
//	             its externalapi entry over a canned API client) behind Kyverno's own context provider,
//	             which answers globalContext.Get in place of the fake one}
//
// Output (stdout, JSON): {"error": compile error} or {"results": [per resource {"policies": [{"policy",
// "rules": [{"status", "message"}]}], "patched": object or null, "error"}]}. A policy appears once per
// compiled variant (autogen variants share the policy's name); variants that did not match have no rules.
//
// With "generate": true the case is not evaluated: for every ValidatingPolicy and MutatingPolicy the oracle
// builds the native admission policy and binding Kyverno's admission policy generator would write for it
// (generate.go), and prints {"generated": [{"kind", "name", "skip": why none, "objects": [...]}]}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	policiesv1beta1 "github.com/kyverno/api/api/policies.kyverno.io/v1beta1"
	kyvernov2beta1 "github.com/kyverno/kyverno/api/kyverno/v2beta1"
	clitest "github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/apis/v1alpha1"
	clistore "github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/store"
	celengine "github.com/kyverno/kyverno/pkg/cel/engine"
	"github.com/kyverno/kyverno/pkg/cel/libs"
	"github.com/kyverno/kyverno/pkg/cel/matching"
	mpolcompiler "github.com/kyverno/kyverno/pkg/cel/policies/mpol/compiler"
	mpolengine "github.com/kyverno/kyverno/pkg/cel/policies/mpol/engine"
	vpolcompiler "github.com/kyverno/kyverno/pkg/cel/policies/vpol/compiler"
	vpolengine "github.com/kyverno/kyverno/pkg/cel/policies/vpol/engine"
	"github.com/kyverno/kyverno/pkg/config"
	engineapi "github.com/kyverno/kyverno/pkg/engine/api"
	"github.com/kyverno/kyverno/pkg/engine/jmespath"
	"github.com/kyverno/kyverno/pkg/event"
	"github.com/kyverno/kyverno/pkg/globalcontext/externalapi"
	"github.com/kyverno/kyverno/pkg/globalcontext/k8sresource"
	gctxstore "github.com/kyverno/kyverno/pkg/globalcontext/store"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/kubectl-validate/pkg/openapiclient"
)

type resourceCase struct {
	Object     map[string]any `json:"object"`
	Namespaced bool           `json:"namespaced"`
}

// imageData has the fields (and JSON names) of an image in a Kyverno CLI Context file: the CLI hands each
// image to the context provider as the map its JSON form decodes to, and so does this oracle.
type imageData struct {
	Image         string `json:"image"`
	ResolvedImage string `json:"resolvedImage"`
	Registry      string `json:"registry"`
	Repository    string `json:"repository"`
	Tag           string `json:"tag,omitempty"`
	Digest        string `json:"digest,omitempty"`
	ImageIndex    any    `json:"imageIndex,omitempty"`
	Manifest      any    `json:"manifest,omitempty"`
	ConfigData    any    `json:"config,omitempty"`
}

type caseContext struct {
	Resources            []map[string]any                  `json:"resources"`
	Images               []imageData                       `json:"images"`
	HTTPMocks            map[string]any                    `json:"httpMocks"`
	GlobalContextEntries []clitest.GlobalContextEntryValue `json:"globalContextEntries"`
	ClusterGlobalContext []clusterEntry                    `json:"clusterGlobalContext"`
}

// clusterEntry is a GlobalContextEntry as a cluster holds it, with what it reads there.
type clusterEntry struct {
	Entry    json.RawMessage  `json:"entry"`
	Objects  []map[string]any `json:"objects"`
	Response json.RawMessage  `json:"response"`
	Error    string           `json:"error"`
}

type noEvents struct{}

func (noEvents) Add(...event.Info) {}

// cannedAPI answers an apiCall entry's urlPath call with the case's response (or error).
type cannedAPI struct{ entry clusterEntry }

func (c cannedAPI) RawAbsPath(context.Context, string, string, io.Reader) ([]byte, error) {
	if c.entry.Error != "" {
		return nil, errors.New(c.entry.Error)
	}
	return c.entry.Response, nil
}

// withClusterGlobalContext is the fake context provider with globalContext.Get answered by Kyverno's own
// context provider over real store entries.
type withClusterGlobalContext struct {
	*libs.FakeContextProvider
	cluster libs.Context
}

func (w *withClusterGlobalContext) GetGlobalReference(name, projection string) (any, error) {
	return w.cluster.GetGlobalReference(name, projection)
}

func clusterStore(ctx context.Context, entries []clusterEntry) (gctxstore.Store, error) {
	s := gctxstore.New(0)
	jp := jmespath.New(config.NewDefaultConfiguration(false))
	for _, ce := range entries {
		gce := &kyvernov2beta1.GlobalContextEntry{}
		if err := json.Unmarshal(ce.Entry, gce); err != nil {
			return nil, fmt.Errorf("global context entry: %w", err)
		}
		var entry gctxstore.Entry
		var err error
		if kr := gce.Spec.KubernetesResource; kr != nil {
			gvr := schema.GroupVersionResource{Group: kr.Group, Version: kr.Version, Resource: kr.Resource}
			objects := make([]runtime.Object, 0, len(ce.Objects))
			listKind := "List"
			for _, o := range ce.Objects {
				u := &unstructured.Unstructured{Object: o}
				listKind = u.GetKind() + "List"
				objects = append(objects, u)
			}
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{gvr: listKind}, objects...)
			entry, err = k8sresource.New(ctx, gce, noEvents{}, client, logr.Discard(), gvr, kr.Namespace, jp)
		} else if call := gce.Spec.APICall; call != nil {
			if call.RefreshInterval == nil { // the CRD's default
				call.RefreshInterval = &metav1.Duration{Duration: 10 * time.Minute}
			}
			entry, err = externalapi.New(ctx, gce, noEvents{}, nil, nil, logr.Discard(), cannedAPI{ce}, call.APICall,
				call.RefreshInterval.Duration, 10_000_000, 30*time.Second, false, jp)
			// The first call runs in the background: wait until it answered.
			for deadline := time.Now().Add(5 * time.Second); err == nil && time.Now().Before(deadline); {
				if _, getErr := entry.Get(""); getErr == nil || getErr.Error() != "no data available" {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if err != nil {
			return nil, err
		}
		if err := s.Set(gce.Name, entry); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type input struct {
	Validating []json.RawMessage `json:"validating"`
	Namespaced []json.RawMessage `json:"namespacedValidating"`
	Mutating   []json.RawMessage `json:"mutating"`
	// NamespacedMutatingPolicies, run with the MutatingPolicies.
	NamespacedMutating []json.RawMessage         `json:"namespacedMutating"`
	Exceptions         []json.RawMessage         `json:"exceptions"`
	Resources          []resourceCase            `json:"resources"`
	Operation          string                    `json:"operation"`
	UserInfo           authenticationv1.UserInfo `json:"userInfo"`
	Namespaces         []corev1.Namespace        `json:"namespaces"`
	Context            caseContext               `json:"context"`
	Generate           bool                      `json:"generate"`
	Generating         []json.RawMessage         `json:"generating"`
	Deleting           []json.RawMessage         `json:"deleting"`
	// Images whose image.GetMetadata answer is asked for (read from their registries: imagedata.go).
	ImageData []string `json:"imageData"`
}

type rule struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type policyResult struct {
	Policy string `json:"policy"`
	Rules  []rule `json:"rules"`
}

type resourceResult struct {
	Policies   []policyResult    `json:"policies"`
	Patched    map[string]any    `json:"patched"`
	Error      string            `json:"error,omitempty"`
	Generating []lifecycleResult `json:"generating,omitempty"`
	Deleting   []lifecycleResult `json:"deleting,omitempty"`
}

func rules(in []engineapi.RuleResponse) []rule {
	out := make([]rule, 0, len(in))
	for i := range in {
		out = append(out, rule{Status: string(in[i].Status()), Message: in[i].Message()})
	}
	return out
}

// gvr of a kind as Kyverno's CLI finds it without a cluster (no RESTMapper for the kind): the guessed plural.
func gvr(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural
}

func decode[T any](raw []json.RawMessage) ([]*T, error) {
	out := make([]*T, 0, len(raw))
	for _, r := range raw {
		v := new(T)
		if err := json.Unmarshal(r, v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// shape maps the operation to (object, oldObject) as Kyverno's CLI does.
func shape(operation string, obj *unstructured.Unstructured) (admissionv1.Operation, runtime.Object, runtime.Object) {
	switch strings.ToUpper(operation) {
	case "UPDATE":
		return admissionv1.Update, obj, obj.DeepCopy()
	case "DELETE":
		return admissionv1.Delete, nil, obj.DeepCopy()
	default:
		return admissionv1.Create, obj, nil
	}
}

func run(in input) (map[string]any, error) {
	if len(in.ImageData) > 0 {
		return fetchImageData(in.ImageData)
	}
	exceptions, err := decode[policiesv1beta1.PolicyException](in.Exceptions)
	if err != nil {
		return nil, fmt.Errorf("exception: %w", err)
	}
	vpols, err := decode[policiesv1beta1.ValidatingPolicy](in.Validating)
	if err != nil {
		return nil, fmt.Errorf("validating policy: %w", err)
	}
	nvpols, err := decode[policiesv1beta1.NamespacedValidatingPolicy](in.Namespaced)
	if err != nil {
		return nil, fmt.Errorf("namespaced validating policy: %w", err)
	}
	nmpols, err := decode[policiesv1beta1.NamespacedMutatingPolicy](in.NamespacedMutating)
	if err != nil {
		return nil, fmt.Errorf("namespaced mutating policy: %w", err)
	}
	mpols, err := decode[policiesv1beta1.MutatingPolicy](in.Mutating)
	if err != nil {
		return nil, fmt.Errorf("mutating policy: %w", err)
	}
	if in.Generate {
		return generate(vpols, mpols, exceptions)
	}
	fake := libs.NewFakeContextProvider()
	for _, obj := range in.Context.Resources {
		u := &unstructured.Unstructured{Object: obj}
		if err := fake.AddResource(gvr(u.GroupVersionKind()), u); err != nil {
			return nil, err
		}
	}
	for _, image := range in.Context.Images {
		raw, err := json.Marshal(image)
		if err != nil {
			return nil, err
		}
		var data map[string]any
		if err := json.Unmarshal(raw, &data); err != nil {
			return nil, err
		}
		fake.AddImageData(image.Image, data)
	}
	if len(in.Context.HTTPMocks) > 0 {
		fake.SetHTTPMocks(in.Context.HTTPMocks)
	}
	if err := clitest.ValidateGlobalContextEntries(in.Context.GlobalContextEntries); err != nil {
		return map[string]any{"error": err.Error()}, nil
	}
	for _, entry := range in.Context.GlobalContextEntries {
		data, err := clistore.ResolveGlobalContextMockData(entry)
		if err != nil {
			return map[string]any{"error": err.Error()}, nil
		}
		fake.AddGlobalReference(entry.Name, data)
	}
	var libsCtx libs.Context = fake
	if len(in.Context.ClusterGlobalContext) > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		store, err := clusterStore(ctx, in.Context.ClusterGlobalContext)
		if err != nil {
			return map[string]any{"error": err.Error()}, nil
		}
		cluster, err := libs.NewContextProvider(nil, nil, store, nil, false)
		if err != nil {
			return nil, err
		}
		libsCtx = &withClusterGlobalContext{FakeContextProvider: fake, cluster: cluster}
	}
	// The compilers bind the http library (and its mocks) to this package variable, as Kyverno's CLI sets it.
	libs.LibraryContext = libsCtx
	namespaces := map[string]*corev1.Namespace{}
	for i := range in.Namespaces {
		namespaces[in.Namespaces[i].Name] = &in.Namespaces[i]
	}
	resolve := func(name string) *corev1.Namespace { return namespaces[name] }

	likes := make([]policiesv1beta1.ValidatingPolicyLike, 0, len(vpols)+len(nvpols))
	for _, p := range vpols {
		likes = append(likes, p)
	}
	for _, p := range nvpols {
		likes = append(likes, p)
	}
	vprovider, err := vpolengine.NewProvider(vpolcompiler.NewCompiler(), likes, exceptions)
	if err != nil {
		return map[string]any{"error": err.Error()}, nil
	}
	veng := vpolengine.NewEngine(vprovider, resolve, matching.NewMatcher())
	mlikes := make([]policiesv1beta1.MutatingPolicyLike, 0, len(mpols)+len(nmpols))
	for _, p := range mpols {
		mlikes = append(mlikes, p)
	}
	for _, p := range nmpols {
		mlikes = append(mlikes, p)
	}
	mprovider, err := mpolengine.NewProvider(mpolcompiler.NewCompiler(), mlikes, exceptions, fake)
	if err != nil {
		return map[string]any{"error": err.Error()}, nil
	}
	// Kyverno's CLI reads schemas from its embedded built-in definitions when no CRD is given.
	types := mpolcompiler.NewStaticTypeConverterManager(openapiclient.NewHardcodedBuiltins("1.32"))
	meng := mpolengine.NewEngine(mprovider, resolve, matching.NewMatcher(), types, fake)

	gpols, dpols, err := lifecycleDocs(in.Generating, in.Deleting)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	results := make([]resourceResult, 0, len(in.Resources))
	for _, rc := range in.Resources {
		obj := &unstructured.Unstructured{Object: rc.Object}
		if rc.Namespaced && obj.GetNamespace() == "" {
			obj.SetNamespace("default")
		}
		gvk := obj.GroupVersionKind()
		res := resourceResult{Policies: []policyResult{}}
		if len(gpols) > 0 {
			if res.Generating, err = generating(gpols, exceptions, fake, resolve, obj, in.Operation, in.UserInfo); err != nil {
				return map[string]any{"error": err.Error()}, nil
			}
		}
		if len(dpols) > 0 {
			if res.Deleting, err = deleting(dpols, exceptions, fake, resolve, obj, in.Resources); err != nil {
				return map[string]any{"error": err.Error()}, nil
			}
		}
		if len(mlikes) > 0 {
			op, object, old := shape(in.Operation, obj)
			request := celengine.Request(fake, gvk, gvr(gvk), "", obj.GetName(), obj.GetNamespace(), op, in.UserInfo,
				object, old, false, nil)
			resp, err := meng.Handle(ctx, request, nil)
			if err != nil {
				res.Error = err.Error()
				results = append(results, res)
				continue
			}
			for _, p := range resp.Policies {
				res.Policies = append(res.Policies, policyResult{Policy: p.Policy.GetName(), Rules: rules(p.Rules)})
			}
			if resp.PatchedResource != nil {
				res.Patched = resp.PatchedResource.Object
				obj = resp.PatchedResource
			}
		}
		if len(likes) > 0 {
			op, object, old := shape(in.Operation, obj)
			request := celengine.Request(fake, gvk, gvr(gvk), "", obj.GetName(), obj.GetNamespace(), op, in.UserInfo,
				object, old, false, nil)
			resp, err := veng.Handle(ctx, request, nil)
			if err != nil {
				res.Error = err.Error()
			} else {
				for _, p := range resp.Policies {
					res.Policies = append(res.Policies, policyResult{Policy: p.Policy.GetName(), Rules: rules(p.Rules)})
				}
			}
		}
		results = append(results, res)
	}
	return map[string]any{"results": results}, nil
}

// numbers turns the json.Numbers of a decoded value into what Kubernetes' JSON decoding of an object gives
// (unstructured.UnstructuredJSONScheme): int64 when the number is integral, else float64 (asFloats: always
// float64, as encoding/json gives for data Kyverno's CLI reads as plain JSON, such as image data and mocks).
func numbers(v any, asFloats bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e, asFloats)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e, asFloats)
		}
	case json.Number:
		if !asFloats {
			if i, err := x.Int64(); err == nil {
				return i
			}
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

func main() {
	var in input
	dec := json.NewDecoder(os.Stdin)
	// Objects keep integers as int64, as Kyverno's CLI and API server hand them to the engine (YAML or JSON
	// decoded by Kubernetes' scheme), not float64 as encoding/json alone would make them.
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "reading the case:", err)
		os.Exit(2)
	}
	for i := range in.Resources {
		numbers(in.Resources[i].Object, false)
	}
	for i := range in.Context.Resources {
		numbers(in.Context.Resources[i], false)
	}
	for i := range in.Context.ClusterGlobalContext {
		for j := range in.Context.ClusterGlobalContext[i].Objects {
			numbers(in.Context.ClusterGlobalContext[i].Objects[j], false)
		}
	}
	for i := range in.Context.Images {
		img := &in.Context.Images[i]
		img.ImageIndex, img.Manifest, img.ConfigData = numbers(img.ImageIndex, true), numbers(img.Manifest, true),
			numbers(img.ConfigData, true)
	}
	numbers(in.Context.HTTPMocks, true)
	out, err := run(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
