// GeneratingPolicies and DeletingPolicies in the Kyverno oracle, evaluated as Kyverno's CLI evaluates them
// (cmd/cli/kubectl-kyverno: processor/policy_processor.go for generating policies, commands/test/test.go
// applyDeletingPolicies for deleting ones) with the case's fake context: each resource is a trigger of every
// generating policy (the case's operation), whose generated objects are those the fake context records; each
// resource is a candidate of every deleting policy: pass ("resource matched", it would be deleted), fail ("resource
// did not match") or error, and no row when the policy's constraints do not select it.
package main

import (
	"context"
	"encoding/json"

	policiesv1beta1 "github.com/kyverno/api/api/policies.kyverno.io/v1beta1"
	celengine "github.com/kyverno/kyverno/pkg/cel/engine"
	"github.com/kyverno/kyverno/pkg/cel/libs"
	"github.com/kyverno/kyverno/pkg/cel/matching"
	dpolcompiler "github.com/kyverno/kyverno/pkg/cel/policies/dpol/compiler"
	dpolengine "github.com/kyverno/kyverno/pkg/cel/policies/dpol/engine"
	gpolcompiler "github.com/kyverno/kyverno/pkg/cel/policies/gpol/compiler"
	gpolengine "github.com/kyverno/kyverno/pkg/cel/policies/gpol/engine"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type lifecycleResult struct {
	Policy    string           `json:"policy"`
	Rules     []rule           `json:"rules"`
	Generated []map[string]any `json:"generated"`
}

// generating evaluates every generating policy on one trigger.
func generating(pols []*policiesv1beta1.GeneratingPolicy, exceptions []*policiesv1beta1.PolicyException,
	fake *libs.FakeContextProvider, resolve func(string) *corev1.Namespace, obj *unstructured.Unstructured,
	operation string, user authenticationv1.UserInfo) ([]lifecycleResult, error) {
	compiler := gpolcompiler.NewCompiler()
	engine := gpolengine.NewEngine(func(name string) *corev1.Namespace { return resolve(name) }, matching.NewMatcher())
	gvk := obj.GroupVersionKind()
	op, object, old := shape(operation, obj)
	request := celengine.Request(fake, gvk, gvr(gvk), "", obj.GetName(), obj.GetNamespace(), op, user, object, old,
		false, nil)
	out := []lifecycleResult{}
	for _, pol := range pols {
		compiled, errs := compiler.Compile(pol, exceptions)
		if len(errs) > 0 {
			return nil, errs.ToAggregate()
		}
		resp, err := engine.Handle(request, gpolengine.Policy{Policy: pol, CompiledPolicy: compiled}, false)
		if err != nil {
			return nil, err
		}
		for _, res := range resp.Policies {
			if res.Result == nil {
				continue
			}
			r := lifecycleResult{Policy: pol.GetName(), Rules: rules(nil), Generated: []map[string]any{}}
			r.Rules = append(r.Rules, rule{Status: string(res.Result.Status()), Message: res.Result.Message()})
			for _, g := range res.Result.GeneratedResources() {
				r.Generated = append(r.Generated, g.Object)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// mapper knows the kinds of the case's resources (their plurals guessed as Kyverno's CLI guesses them).
func mapper(resources []resourceCase) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, rc := range resources {
		u := &unstructured.Unstructured{Object: rc.Object}
		scope := meta.RESTScopeRoot
		if rc.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		gvk := u.GroupVersionKind()
		m.AddSpecific(gvk, gvr(gvk), schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version,
			Resource: gvr(gvk).Resource[:len(gvr(gvk).Resource)-1]}, scope)
	}
	return m
}

// deleting evaluates every deleting policy on one object.
func deleting(pols []*policiesv1beta1.DeletingPolicy, exceptions []*policiesv1beta1.PolicyException,
	fake *libs.FakeContextProvider, resolve func(string) *corev1.Namespace, obj *unstructured.Unstructured,
	resources []resourceCase) ([]lifecycleResult, error) {
	likes := make([]policiesv1beta1.DeletingPolicyLike, 0, len(pols))
	for _, p := range pols {
		likes = append(likes, p)
	}
	provider, err := dpolengine.NewProvider(dpolcompiler.NewCompiler(), likes, exceptions)
	if err != nil {
		return nil, err
	}
	engine := dpolengine.NewEngine(func(name string) *corev1.Namespace { return resolve(name) }, mapper(resources),
		fake, matching.NewMatcher())
	policies, err := provider.Fetch(context.Background())
	if err != nil {
		return nil, err
	}
	out := []lifecycleResult{}
	for _, pol := range policies {
		r := lifecycleResult{Policy: pol.Policy.GetName(), Rules: []rule{}, Generated: []map[string]any{}}
		resp, err := engine.Handle(context.TODO(), pol, *obj)
		switch {
		case err != nil:
			r.Rules = append(r.Rules, rule{Status: "error", Message: err.Error()})
		case resp.Match:
			r.Rules = append(r.Rules, rule{Status: "pass", Message: "resource matched"})
		case resp.PolicyMatched:
			r.Rules = append(r.Rules, rule{Status: "fail", Message: "resource did not match"})
		default:
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// lifecycleDocs decodes the case's generating and deleting policies.
func lifecycleDocs(gen, del []json.RawMessage) ([]*policiesv1beta1.GeneratingPolicy, []*policiesv1beta1.DeletingPolicy,
	error) {
	gpols, err := decode[policiesv1beta1.GeneratingPolicy](gen)
	if err != nil {
		return nil, nil, err
	}
	dpols, err := decode[policiesv1beta1.DeletingPolicy](del)
	return gpols, dpols, err
}
