"""CEL for ValidatingPolicies: environment, libraries, compiler and type checker."""
