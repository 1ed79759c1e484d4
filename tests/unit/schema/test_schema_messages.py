"""OpenAPI schemas become protobuf messages that type ``object`` in CEL."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from vpol.cel import schemas, types
from vpol.cel.environment import EnvSpec, environment
from vpol.model.discovery import builtin


def message(name: str) -> Descriptor:
    return types.POOL.FindMessageTypeByName(name)


def field(root: str, path: str) -> FieldDescriptor:
    """The field at a dotted path; steps through singular, repeated and map-valued messages."""
    desc = message(root)
    f: FieldDescriptor | None = None
    for part in path.split("."):
        if f is not None:
            assert f.message_type is not None, f"{part}: parent is not a message"
            desc = f.message_type
            if desc.GetOptions().map_entry:
                desc = desc.fields_by_name["value"].message_type
        f = desc.fields_by_name[part]
    assert f is not None
    return f


def is_repeated(f: FieldDescriptor) -> bool:
    if hasattr(f, "is_repeated"):  # protobuf >= 6
        return bool(f.is_repeated)
    return f.label == FieldDescriptor.LABEL_REPEATED


def map_value(f: FieldDescriptor) -> FieldDescriptor:
    assert f.message_type is not None and f.message_type.GetOptions().map_entry, f.full_name
    assert f.message_type.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING
    return f.message_type.fields_by_name["value"]


def kind_type(group: str, version: str, kind: str) -> str:
    schema = builtin().schema(group, version, kind)
    assert schema is not None
    return schemas.message_type(schema)


def compiles(object_type: str, src: str) -> bool:
    try:
        environment(EnvSpec(object_type=object_type)).compile(src)
    except RuntimeError:
        return False
    return True


def compile_error(object_type: str, src: str) -> str:
    try:
        environment(EnvSpec(object_type=object_type)).compile(src)
    except RuntimeError as exc:
        return str(exc)
    raise AssertionError(f"{src!r} compiled")


# --- built-in kinds ---------------------------------------------------------------


def test_pod() -> None:
    pod = kind_type("", "v1", "Pod")
    assert {"apiVersion", "kind", "metadata", "spec", "status"} <= set(message(pod).fields_by_name)
    containers = field(pod, "spec.containers")
    assert is_repeated(containers) and containers.message_type.name == "Container"
    assert field(pod, "spec.containers.image").type == FieldDescriptor.TYPE_STRING
    assert field(pod, "spec.containers.ports.containerPort").type == FieldDescriptor.TYPE_INT64
    assert field(pod, "spec.containers.securityContext.privileged").type == FieldDescriptor.TYPE_BOOL
    assert map_value(field(pod, "metadata.labels")).type == FieldDescriptor.TYPE_STRING
    assert field(pod, "metadata.creationTimestamp").message_type.full_name == "google.protobuf.Timestamp"
    # Quantity is an untyped union: its values are dyn
    assert map_value(field(pod, "spec.containers.resources.limits")).message_type.full_name == "google.protobuf.Value"


def test_deployment() -> None:
    dep = kind_type("apps", "v1", "Deployment")
    assert field(dep, "spec.replicas").type == FieldDescriptor.TYPE_INT64
    assert field(dep, "spec.template.spec").message_type.name == "PodSpec"
    # IntOrString (format int-or-string) is dyn
    assert field(dep, "spec.strategy.rollingUpdate.maxSurge").message_type.full_name == "google.protobuf.Value"
    assert compiles(dep, "object.spec.replicas > 1")
    assert compiles(dep, "object.spec.strategy.rollingUpdate.maxSurge == 1 || object.spec.strategy.rollingUpdate.maxSurge == '25%'")
    assert compiles(dep, "object.spec.template.spec.containers.all(c, c.resources.limits['cpu'] == '1')")
    assert not compiles(dep, "object.spec.replicas + 'a' == 'b'")
    assert "undefined field 'foo'" in compile_error(dep, "object.spec.foo")


def test_cronjob() -> None:
    cron = kind_type("batch", "v1", "CronJob")
    assert field(cron, "spec.schedule").type == FieldDescriptor.TYPE_STRING
    assert field(cron, "spec.suspend").type == FieldDescriptor.TYPE_BOOL
    containers = field(cron, "spec.jobTemplate.spec.template.spec.containers")
    assert is_repeated(containers) and containers.message_type.name == "Container"
    assert compiles(cron, "object.spec.jobTemplate.spec.template.spec.containers.all(c, c.image.startsWith('r/'))")
    assert compiles(cron, "object.metadata.creationTimestamp < timestamp('2030-01-01T00:00:00Z')")
    assert not compiles(cron, "object.spec.suspend == 'yes'")


def test_recursive_schema_terminates() -> None:
    crd = kind_type("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
    props = field(crd, "spec.versions.schema.openAPIV3Schema.properties")
    assert map_value(props).message_type.name == "JSONSchemaProps"
    assert compiles(crd, "object.spec.versions[0].schema.openAPIV3Schema.properties['a'].properties['b'].type == 'string'")


def test_self_reference_through_components() -> None:
    doc = {
        "$ref": "#/components/schemas/Node",
        "components": {"schemas": {"Node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "parent": {"$ref": "#/components/schemas/Node"},
            "children": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/Node"}]}},
        }}}},
    }
    t = schemas.message_type(doc, resource_root=False)
    assert compiles(t, "object.children[0].parent.children.all(c, c.name != '')")
    assert not compiles(t, "object.parent.name + 1 == 2")


# --- mapping rules ----------------------------------------------------------------


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}}},
        **props,
    }}


def test_escaped_property_names() -> None:
    t = schemas.message_type(obj(spec={"type": "object", "properties": {
        "x-prop": {"type": "integer"}, "namespace": {"type": "string"}, "a.b": {"type": "boolean"},
        "1bad": {"type": "string"}, "with space": {"type": "string"}, "fooBar": {"type": "string"},
        "foo_bar": {"type": "string"},
    }}))
    fields = set(field(t, "spec").message_type.fields_by_name)
    assert {"x__dash__prop", "__namespace__", "namespace", "a__dot__b", "fooBar", "foo_bar"} == fields
    assert compiles(t, "object.spec.x__dash__prop > 1 && object.spec.a__dot__b")
    assert compiles(t, "object.spec.__namespace__ == 'a' && object.spec.namespace == 'b'")
    assert not compiles(t, "object.spec.x__dash__prop == 'a'")


def test_dyn_parts() -> None:
    t = schemas.message_type(obj(spec={"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": True},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"known": {"type": "string"}}},
        "anything": {},
        "union": {"oneOf": [{"type": "string"}, {"type": "number"}]},
    }}))
    for src in ("object.spec.port == 80 || object.spec.port == 'http'",
                "object.spec.free.unknown.deeper == 1",
                "object.spec.free.known == 1",
                "object.spec.anything.x[0] == true",
                "object.spec.union > 1"):
        assert compiles(t, src), src


def test_containers_of_containers() -> None:
    t = schemas.message_type(obj(spec={"type": "object", "properties": {
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "groups": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
        "nested": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}}},
        "records": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}},
        "free": {"type": "object"},
        "open": {"type": "object", "additionalProperties": True},
    }}))
    spec = field(t, "spec").message_type.fields_by_name
    assert is_repeated(spec["matrix"]) and spec["matrix"].message_type.full_name == "google.protobuf.ListValue"
    assert map_value(spec["groups"]).message_type.full_name == "google.protobuf.ListValue"
    assert map_value(spec["nested"]).message_type.full_name == "google.protobuf.Struct"
    assert is_repeated(spec["records"]) and spec["records"].message_type.full_name == "google.protobuf.Struct"
    assert compiles(t, "object.spec.matrix[0][1] == 1 && object.spec.matrix.all(row, row.size() > 0)")
    assert compiles(t, "object.spec.groups['a'][0] == 'x' && object.spec.nested['a']['b'] == 'y'")
    assert compiles(t, "object.spec.records[0]['k'] == 'v' && object.spec.free.x == 1 && object.spec.open['y'] == 2")
    assert not compiles(t, "object.spec.matrix.size() + 'a' == 'b'")
    assert not compiles(t, "object.spec.groups + 1 == 2")


def test_string_formats() -> None:
    t = schemas.message_type(obj(spec={"type": "object", "properties": {
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "timeout": {"type": "string", "format": "duration"},
        "blob": {"type": "string", "format": "byte"},
        "mail": {"type": "string", "format": "email"},
        "ratio": {"type": "number", "format": "double"},
        "count": {"type": "integer", "format": "int32"},
    }}))
    assert compiles(t, "object.spec.at < object.spec.day + object.spec.timeout")
    assert compiles(t, "size(object.spec.blob) > 0 && object.spec.blob == b'x'")
    assert compiles(t, "object.spec.mail.endsWith('@x.io') && object.spec.ratio > 0.5 && object.spec.count > 1")
    assert not compiles(t, "object.spec.at.startsWith('2020')")
    assert not compiles(t, "object.spec.ratio > 1 && object.spec.count == 1.5")


def test_resource_root_gets_type_and_object_meta() -> None:
    t = schemas.message_type({"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}})
    assert compiles(t, "object.apiVersion + object.kind + object.metadata.name + object.metadata.generateName != ''")
    # as in Kubernetes, only name and generateName are known then
    assert not compiles(t, "object.metadata.labels.size() > 0")
    not_root = schemas.message_type({"type": "object", "properties": {"a": {"type": "string"}}}, resource_root=False)
    assert not compiles(not_root, "object.kind == 'x'")


def test_content_addressed_and_added_once() -> None:
    schema = obj(spec={"type": "object", "properties": {"dedupe": {"type": "string"}}})
    first = schemas.message_type(schema)
    files_before = len(types.POOL.FindMessageTypeByName(first).file.message_types_by_name)
    assert schemas.message_type(schema) == first
    assert schemas.message_type(copy.deepcopy(schema)) == first  # equal content, other dict
    assert len(types.POOL.FindMessageTypeByName(first).file.message_types_by_name) == files_before
    other = obj(spec={"type": "object", "properties": {"dedupe": {"type": "integer"}}})
    assert schemas.message_type(other) != first
    assert schemas.message_type(schema, resource_root=False) != first
    assert first.startswith("vpol.schema.h")


@pytest.mark.parametrize("kind", [("", "v1", "Pod"), ("apps", "v1", "Deployment"), ("batch", "v1", "CronJob")])
def test_builtin_schema_is_cached(kind: tuple[str, str, str]) -> None:
    import time

    kind_type(*kind)
    start = time.perf_counter()
    for _ in range(100):
        kind_type(*kind)
    assert (time.perf_counter() - start) / 100 < 0.001
