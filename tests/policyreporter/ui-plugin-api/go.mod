module github.com/kyverno/policy-reporter-plugins/sdk/api

go 1.24
