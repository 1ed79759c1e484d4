"""Tests of the CustomResourceDefinitions in crds/."""
