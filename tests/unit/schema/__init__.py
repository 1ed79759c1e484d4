"""Tests of discovery, OpenAPI schemas as CEL types, and schema-aware type checking."""
