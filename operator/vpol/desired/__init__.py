"""Pure builders of the objects vpol writes: ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their
bindings, webhook configurations, PolicyReports, policy status and Events."""
