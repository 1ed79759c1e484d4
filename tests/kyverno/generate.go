// The native admission policies Kyverno's admission policy generator (pkg/controllers/admissionpolicygenerator)
// writes for ValidatingPolicies and MutatingPolicies, built with its own builders (pkg/admissionpolicy).
//
// What the controller decides around the builders is reproduced here from the same fields, since those
// functions are not exported: a ValidatingPolicy gets a VAP only when spec.autogen.validatingAdmissionPolicy
// .enabled is true and it has no pod-controller autogen configs (its status, which Kyverno's policy status
// controller fills from pkg/cel/policies/vpol/autogen); a MutatingPolicy gets a MAP only when
// spec.autogen.mutatingAdmissionPolicy.enabled is true, spec.evaluation.useServerSideApply is false and it has no
// autogen configs. Exceptions are those the controller lists for the policy (getCELExceptions): not expired,
// with a policyRef of the policy's name. The MAP version is v1 (the controller prefers it when served, as it is
// by the test control plane).
//
// The policy's apiVersion is set to v1beta1 before building: the controller's informers deliver v1beta1 objects
// (the version its clientset watches), whatever version a policy was applied with, so the VAP's ownerReference
// names v1beta1 in a cluster.
package main

import (
	"encoding/json"
	"fmt"

	policiesv1beta1 "github.com/kyverno/api/api/policies.kyverno.io/v1beta1"
	"github.com/kyverno/kyverno/pkg/admissionpolicy"
	mpolautogen "github.com/kyverno/kyverno/pkg/cel/policies/mpol/autogen"
	vpolautogen "github.com/kyverno/kyverno/pkg/cel/policies/vpol/autogen"
	engineapi "github.com/kyverno/kyverno/pkg/engine/api"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

type generated struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Skip    string `json:"skip,omitempty"`
	Objects []any  `json:"objects"`
}

// celExceptions are the exceptions the generator lists for a policy of this name.
func celExceptions(name string, exceptions []*policiesv1beta1.PolicyException) []policiesv1beta1.PolicyException {
	var out []policiesv1beta1.PolicyException
	for _, polex := range exceptions {
		if polex.IsExpired() {
			continue
		}
		for _, ref := range polex.Spec.PolicyRefs {
			if ref.Name == name {
				out = append(out, *polex)
			}
		}
	}
	return out
}

// typed is obj (a builder's output) as JSON with its apiVersion and kind, as the API server would return it.
func typed(obj any, kind string) (any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	out["apiVersion"] = admissionregistrationv1.SchemeGroupVersion.String()
	out["kind"] = kind
	return out, nil
}

func generateVAP(pol *policiesv1beta1.ValidatingPolicy, exceptions []*policiesv1beta1.PolicyException) (generated, error) {
	out := generated{Kind: pol.Kind, Name: pol.Name, Objects: []any{}}
	pol.APIVersion = policiesv1beta1.GroupVersion.String()
	if !pol.Spec.GenerateValidatingAdmissionPolicyEnabled() {
		out.Skip = "skip generating ValidatingAdmissionPolicy: not enabled."
		return out, nil
	}
	if configs, err := vpolautogen.Autogen(pol); err != nil {
		return out, err
	} else if len(configs) > 0 {
		out.Skip = "skip generating ValidatingAdmissionPolicy: pod controllers autogen is enabled."
		return out, nil
	}
	generic := engineapi.NewValidatingPolicy(pol)
	var polexs []engineapi.GenericException
	for _, polex := range celExceptions(pol.Name, exceptions) {
		polexs = append(polexs, engineapi.NewCELPolicyException(&polex))
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	vap.Name = "vpol-" + pol.Name
	if err := admissionpolicy.BuildValidatingAdmissionPolicy(nil, vap, generic, polexs); err != nil {
		return out, err
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	binding.Name = vap.Name + "-binding"
	if err := admissionpolicy.BuildValidatingAdmissionPolicyBinding(binding, generic); err != nil {
		return out, err
	}
	for _, o := range []struct {
		obj  any
		kind string
	}{{vap, "ValidatingAdmissionPolicy"}, {binding, "ValidatingAdmissionPolicyBinding"}} {
		t, err := typed(o.obj, o.kind)
		if err != nil {
			return out, err
		}
		out.Objects = append(out.Objects, t)
	}
	return out, nil
}

func generateMAP(pol *policiesv1beta1.MutatingPolicy, exceptions []*policiesv1beta1.PolicyException) (generated, error) {
	out := generated{Kind: pol.Kind, Name: pol.Name, Objects: []any{}}
	pol.APIVersion = policiesv1beta1.GroupVersion.String()
	if !pol.Spec.GenerateMutatingAdmissionPolicyEnabled() {
		out.Skip = "skip generating MutatingAdmissionPolicy: not enabled."
		return out, nil
	}
	if ec := pol.Spec.EvaluationConfiguration; ec != nil && ec.UseServerSideApply {
		out.Skip = "skip generating MutatingAdmissionPolicy: useServerSideApply is enabled."
		return out, nil
	}
	if configs, err := mpolautogen.Autogen(pol); err != nil {
		return out, err
	} else if len(configs) > 0 {
		out.Skip = "skip generating MutatingAdmissionPolicy: pod controllers autogen is enabled."
		return out, nil
	}
	mapol := &admissionregistrationv1.MutatingAdmissionPolicy{}
	mapol.Name = "mpol-" + pol.Name
	admissionpolicy.BuildMutatingAdmissionPolicyV1(mapol, pol, celExceptions(pol.Name, exceptions))
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	binding.Name = mapol.Name + "-binding"
	admissionpolicy.BuildMutatingAdmissionPolicyBindingV1(binding, pol)
	for _, o := range []struct {
		obj  any
		kind string
	}{{mapol, "MutatingAdmissionPolicy"}, {binding, "MutatingAdmissionPolicyBinding"}} {
		t, err := typed(o.obj, o.kind)
		if err != nil {
			return out, err
		}
		out.Objects = append(out.Objects, t)
	}
	return out, nil
}

// guarded runs a builder; a panic (the builders dereference spec.matchConstraints, which a JSON-mode policy may
// lack) is that policy's error, as the controller's worker recovers from it.
func guarded(kind, name string, build func() (generated, error)) (g generated) {
	defer func() {
		if r := recover(); r != nil {
			g = generated{Kind: kind, Name: name, Objects: []any{}, Skip: fmt.Sprintf("the builder panicked: %v", r)}
		}
	}()
	g, err := build()
	if err != nil {
		return generated{Kind: kind, Name: name, Objects: []any{}, Skip: "the builder failed: " + err.Error()}
	}
	return g
}

func generate(vpols []*policiesv1beta1.ValidatingPolicy, mpols []*policiesv1beta1.MutatingPolicy,
	exceptions []*policiesv1beta1.PolicyException) (map[string]any, error) {
	out := make([]generated, 0, len(vpols)+len(mpols))
	for _, pol := range vpols {
		out = append(out, guarded(pol.Kind, pol.Name, func() (generated, error) { return generateVAP(pol, exceptions) }))
	}
	for _, pol := range mpols {
		out = append(out, guarded(pol.Kind, pol.Name, func() (generated, error) { return generateMAP(pol, exceptions) }))
	}
	return map[string]any{"generated": out}, nil
}
