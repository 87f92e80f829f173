#!/usr/bin/env python3
"""Writes GBNF grammars for a set of JSON schemas with llama-cpp-python's own converter
(llama_cpp/llama_grammar.py of the pinned sdist: what `response_format` feeds the library).

    grammar_schemas.py LLAMA_GRAMMAR_PY OUT_DIR
"""
import importlib.util
import json
import os
import sys

SCHEMAS = {
    "object": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
               "required": ["name", "age"]},
    "optional-props": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "boolean"},
                                                          "c": {"type": "null"}}},
    "array-bounds": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 5},
    "enum-const": {"type": "object", "properties": {"color": {"enum": ["red", "green", 3, None]},
                                                     "kind": {"const": "fixed"}},
                   "required": ["color", "kind"]},
    "string-bounds": {"type": "string", "minLength": 2, "maxLength": 8},
    "pattern": {"type": "string", "pattern": "^[A-Z][a-z]{2,4}-[0-9]+$"},
    "nested": {"type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array",
                                                                              "items": {"type": "string"}}},
        "required": ["id"]}}}, "required": ["items"]},
    "any-of": {"anyOf": [{"type": "integer"}, {"type": "string", "format": "date"},
                         {"type": "array", "items": {"type": "boolean"}}]},
    "additional": {"type": "object", "additionalProperties": {"type": "integer"}},
    "tuple": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]},
}


def main():
    path, out = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("llama_grammar", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.makedirs(out, exist_ok=True)
    for name, schema in SCHEMAS.items():
        with open(os.path.join(out, "schema-%s.gbnf" % name), "w") as f:
            f.write(module.json_schema_to_gbnf(json.dumps(schema)))


if __name__ == "__main__":
    main()
