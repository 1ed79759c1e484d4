// Package api stands in for github.com/kyverno/policy-reporter-plugins/sdk/api when Policy Reporter UI is
// built by tests/policyreporter/build-ui: the Go module proxy does not serve that module. It declares only
// what the UI compiles against, the JSON a policy plugin (Kyverno's, Trivy's) sends the UI: vpol's tests
// run the UI without plugins, so nothing here is ever filled by a real plugin.
package api

import "context"

// Client is what the UI asks a plugin.
type Client interface {
	GetPolicies(ctx context.Context) ([]PolicyListItem, error)
	GetPolicy(ctx context.Context, name string) (*Policy, error)
	CreateException(ctx context.Context, request ExceptionRequest) (*ExceptionResponse, error)
}

// PolicyListItem is one policy of a plugin's list.
type PolicyListItem struct {
	Name        string `json:"name"`
	Namespace   string `json:"namespace,omitempty"`
	Title       string `json:"title"`
	Category    string `json:"category"`
	Severity    string `json:"severity,omitempty"`
	Description string `json:"description"`
}

// Engine names the engine a policy is written for.
type Engine struct {
	Name     string   `json:"name"`
	Version  string   `json:"version,omitempty"`
	Subjects []string `json:"subjects,omitempty"`
}

// SourceCode is a policy's text.
type SourceCode struct {
	ContentType string `json:"contentType"`
	Content     string `json:"content"`
}

// DetailsItem is one titled value.
type DetailsItem struct {
	Title string `json:"title"`
	Value string `json:"value"`
}

// Details is a titled group of values.
type Details struct {
	Title string        `json:"title"`
	Items []DetailsItem `json:"items"`
}

// Reference is a link about a policy.
type Reference struct {
	URL string `json:"url"`
}

// Policy is one policy in full.
type Policy struct {
	Name        string        `json:"name"`
	Namespace   string        `json:"namespace,omitempty"`
	Title       string        `json:"title"`
	Category    string        `json:"category"`
	Severity    string        `json:"severity,omitempty"`
	Description string        `json:"description"`
	Engine      *Engine       `json:"engine,omitempty"`
	SourceCode  *SourceCode   `json:"code,omitempty"`
	References  []Reference   `json:"references,omitempty"`
	Details     []DetailsItem `json:"details,omitempty"`
	Additional  []Details     `json:"additional,omitempty"`
}

// Resource names the resource an exception is asked for.
type Resource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
}

// ExceptionRule is one rule of a policy an exception is asked for, with the result's properties.
type ExceptionRule struct {
	Name  string            `json:"name"`
	Props map[string]string `json:"props,omitempty"`
}

// ExceptionPolicy is one policy an exception is asked for.
type ExceptionPolicy struct {
	Name  string          `json:"name"`
	Rules []ExceptionRule `json:"rules"`
}

// ExceptionRequest asks a plugin for an exception.
type ExceptionRequest struct {
	Resource Resource           `json:"resource"`
	Policies []*ExceptionPolicy `json:"policies"`
}

// ExceptionResponse is a plugin's answer: the exception as YAML.
type ExceptionResponse struct {
	Resource string `json:"resource,omitempty"`
}
