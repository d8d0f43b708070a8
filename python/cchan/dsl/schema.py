"""A JSON Schema validator for the subset the plan schema uses, and the plan schema itself.

Keywords: type, required, properties, additionalProperties (boolean), enum, items, minimum,
maximum, $ref (to "#/$defs/<name>"). Everything else is ignored. Standard library only.
"""
import json
import os

from .errors import PlanFormatError

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plan.schema.json")

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def errors(value, schema, root=None, path="$"):
    """Every violation, as 'path: message' strings (empty when the value is valid)."""
    root = schema if root is None else root
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref}")
        return errors(value, root["$defs"][ref[len("#/$defs/"):]], root, path)
    out = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            return [f"{path}: expected {' or '.join(types)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        out.append(f"{path}: {value} is below the minimum {schema['minimum']}")
    if "maximum" in schema and _TYPES["number"](value) and value > schema["maximum"]:
        out.append(f"{path}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                out.append(f"{path}: missing required field {key!r}")
        props = schema.get("properties", {})
        for key, v in value.items():
            if key in props:
                out.extend(errors(v, props[key], root, f"{path}.{key}"))
            elif schema.get("additionalProperties", True) is False:
                out.append(f"{path}: unknown field {key!r}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out.extend(errors(v, schema["items"], root, f"{path}[{i}]"))
    return out


_plan_schema = None


def plan_schema():
    global _plan_schema
    if _plan_schema is None:
        with open(SCHEMA_PATH) as f:
            _plan_schema = json.load(f)
    return _plan_schema


def validate_plan(doc):
    """Raises PlanFormatError listing the first violations of the plan schema."""
    errs = errors(doc, plan_schema())
    if errs:
        more = f" (and {len(errs) - 5} more)" if len(errs) > 5 else ""
        raise PlanFormatError("plan does not match the schema: " + "; ".join(errs[:5]) + more)
    return doc
